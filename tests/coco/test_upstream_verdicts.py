"""The engines, queried as kata-agent queries them, reproduce upstream's verdicts.

Before trusting a harness with our own policy, it must give upstream's answers on upstream's
requests under upstream's policies (tests/assets/coco, see its PROVENANCE.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.coco.agent import EngineError, RegopyAgent, RegorusAgent

COCO = Path(__file__).parents[1] / "assets" / "coco"
INDEX: list[dict[str, Any]] = json.loads((COCO / "INDEX.json").read_text())
#: Requests whose genpolicy rules never read the generated container data: answerable with
#: rules.rego + the settings alone.
SETTINGS_ONLY_KINDS = {
    "AddARPNeighborsRequest",
    "CopyFileRequest",
    "CreateSandboxRequest",
    "UpdateInterfaceRequest",
    "UpdateRoutesRequest",
}
#: The 2024 generated policies call to_number() on "tcp://..." values; the agent evaluates with
#: set_strict_builtin_errors(false) (an error is undefined), the PyPI binding raises.
STRICT_BUILTIN_ERROR_IDS = {
    "regorus-k8s-policy-job-L011-CreateContainerRequest",
    "regorus-k8s-policy-rc-L011-CreateContainerRequest",
    "regorus-pod-cm1-L023-CreateContainerRequest",
    "regorus-pod-cm2-L058-CreateContainerRequest",
    "regorus-pod-exec-L023-CreateContainerRequest",
    "regorus-pod-many-layers-L023-CreateContainerRequest",
    "regorus-pod-many-layers-L038-CreateContainerRequest",
    "regorus-pod-many-layers-L068-CreateContainerRequest",
    "regorus-pod-persistent-volumes-L022-CreateContainerRequest",
    "regorus-pod-same-containers-L038-CreateContainerRequest",
    "regorus-pod-same-containers-L053-CreateContainerRequest",
    "regorus-web2-L024-CreateContainerRequest",
}


def upstream_request(entry: dict[str, Any]) -> Any:
    """What the agent passes to the policy for this sample."""
    if entry["id"].startswith("kata-"):
        return json.loads((COCO / entry["agent_input_file"]).read_text())
    return json.loads((COCO / entry["file"]).read_text())["request"]


def genpolicy_settings_only() -> str:
    rules = (COCO / "policies/genpolicy/rules.rego").read_text()
    data = (COCO / "policies/genpolicy/policy-data-settings-only.json").read_text()
    return f"{rules}\npolicy_data := {data}"


def regorus_policy(entry: dict[str, Any]) -> str:
    pod = entry["id"].removeprefix("regorus-").rpartition("-L")[0]
    return (COCO / "policies/regorus-kata" / f"{pod}.policy.rego").read_text()


def by_policy(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Samples grouped by the policy they are answered under (these policies keep no state)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        groups.setdefault(regorus_policy(entry), []).append(entry)
    return groups


KATA_SETTINGS_ONLY = [
    e for e in INDEX if e["id"].startswith("kata-") and e["kind"] in SETTINGS_ONLY_KINDS
]
REGORUS = [e for e in INDEX if e["id"].startswith("regorus-")]


def test_samples_are_the_indexed_bytes() -> None:
    assert len(INDEX) == 108
    for entry in INDEX:
        for key, digest in (("file", "sha256"), ("agent_input_file", "agent_input_sha256")):
            if entry.get(digest):
                data = (COCO / entry[key]).read_bytes()
                assert hashlib.sha256(data).hexdigest() == entry[digest], entry[key]


@pytest.mark.parametrize("rego_v0", [False, True], ids=["rego-v1", "rego-v0"])
def test_regorus_reproduces_genpolicy_verdicts(rego_v0: bool) -> None:
    """kata's own genpolicy test cases, against the current rules.rego, in both dialects."""
    policy = genpolicy_settings_only()
    verdicts = {
        e["id"]: RegorusAgent(policy, rego_v0=rego_v0).allows(e["kind"], upstream_request(e))
        for e in KATA_SETTINGS_ONLY
    }
    assert len(verdicts) == 28
    assert verdicts == {e["id"]: e["upstream_verdict"] for e in KATA_SETTINGS_ONLY}
    assert sorted(verdicts.values()).count(True) == 9


def test_regorus_reproduces_logged_agent_verdicts() -> None:
    """The requests a kata agent logged, under the 2024 generated policies (Rego v0)."""
    answered: dict[str, bool] = {}
    errors: dict[str, str] = {}
    for policy, entries in by_policy(REGORUS).items():
        agent = RegorusAgent(policy, rego_v0=True)
        for entry in entries:
            try:
                answered[entry["id"]] = agent.allows(entry["kind"], upstream_request(entry))
            except EngineError as exc:
                errors[entry["id"]] = str(exc)
    assert answered == {e["id"]: e["upstream_verdict"] for e in REGORUS if e["id"] in answered}
    assert len(answered) == 24
    assert set(errors) == STRICT_BUILTIN_ERROR_IDS
    assert all("could not parse string as number" in message for message in errors.values())


def test_regopy_reproduces_logged_agent_verdicts() -> None:
    """rego-cpp answers all 36, including the 12 the strict binding cannot."""
    verdicts: dict[str, bool] = {}
    for policy, entries in by_policy(REGORUS).items():
        agent = RegopyAgent(policy)
        for entry in entries:
            verdicts[entry["id"]] = agent.allows(entry["kind"], upstream_request(entry))
    assert verdicts == {e["id"]: e["upstream_verdict"] for e in REGORUS}
    assert len(verdicts) == 36


def test_regopy_cannot_load_current_genpolicy_rules() -> None:
    """A known gap of rego-cpp 1.5: `some k, _ in x` inside a comprehension does not parse."""
    with pytest.raises(EngineError, match="Invalid collection"):
        RegopyAgent(genpolicy_settings_only())


def test_kata_fixed_policies() -> None:
    """kata's allow-all-except-exec-process: what CoCo CI puts in init-data for "no exec"."""
    policy = (COCO / "policies/kata-opa/allow-all-except-exec-process.rego").read_text()
    for agent in (RegorusAgent(policy, rego_v0=False), RegorusAgent(policy, rego_v0=True)):
        assert agent.allow_failures is False
        assert agent.allows("ExecProcessRequest", {}) is False
        assert agent.allows("CreateContainerRequest", {}) is True
        assert agent.allows("CopyFileRequest", {}) is True
    set_policy_only = (COCO / "policies/kata-opa/allow-set-policy.rego").read_text()
    agent = RegorusAgent(set_policy_only, rego_v0=False)
    assert agent.allows("SetPolicyRequest", {}) is True
    assert agent.allows("CreateContainerRequest", {}) is False  # undefined: the agent refuses
