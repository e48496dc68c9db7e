"""Replay Jobs built by the real builder, their policies, and agents that evaluate them."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any, TypeAlias

import pytest

from runner.k8s.job import BuiltReplay, CorpusUrl, CorpusVolume, ReplaySpec, build_replay
from tests.coco.agent import RegopyAgent, RegorusAgent
from tests.coco.requests import ReplayPod

IMAGE = "registry.example/attested-replay@sha256:" + "ab" * 32
CHECKSUM = "sha256:" + "11" * 32

Agent: TypeAlias = RegorusAgent | RegopyAgent
AgentFactory: TypeAlias = Callable[[str], Agent]

#: The engines a policy is checked with: kata-agent's regorus in the Rego dialect of kata
#: 3.30-4.1 (v1) and of kata 3.28-3.29 (v0), and rego-cpp as an independent second opinion.
ENGINES: dict[str, AgentFactory] = {
    "regorus-v1": lambda policy: RegorusAgent(policy, rego_v0=False),
    "regorus-v0": lambda policy: RegorusAgent(policy, rego_v0=True),
    "regopy": RegopyAgent,
}


def replay_spec(**changes: Any) -> ReplaySpec:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "run_id": "run-7",
        "corpus": CorpusUrl("https://corpora.example/acme/run-7.tar.gz"),
        "checksum": CHECKSUM,
        "image": IMAGE,
        "overlay": "snp",
        "publish_url": "https://publish.example",
        "publish_token_secret": "publish-token",
    }
    fields.update(changes)
    return ReplaySpec(**fields)


SPECS: dict[str, dict[str, Any]] = {
    "snp-url-publish": {},
    "snp-endorsement": {"endorsement_secret": "vcek-bundle"},
    "peer-pods-volume": {
        "overlay": "peer-pods",
        "corpus": CorpusVolume("corpora", "acme/run-7"),
        "publish_url": None,
        "publish_token_secret": None,
    },
    "coco-dev": {"overlay": "coco-dev", "run_id": "a-much-longer-run-id.2026-11-30T10-00-00Z"},
}


def policy_of(built: BuiltReplay) -> str:
    """The ``policy.rego`` the agent reads from the init-data the pod carries."""
    document = tomllib.loads(built.init_data.toml.decode())
    policy = document["data"]["policy.rego"]
    assert isinstance(policy, str)
    return policy


@pytest.fixture(params=list(SPECS), scope="module")
def built(request: pytest.FixtureRequest) -> BuiltReplay:
    return build_replay(replay_spec(**SPECS[request.param]))


@pytest.fixture(scope="module")
def snp() -> BuiltReplay:
    return build_replay(replay_spec())


@pytest.fixture(scope="module")
def snp_policy(snp: BuiltReplay) -> str:
    return policy_of(snp)


@pytest.fixture(scope="module")
def snp_pod(snp: BuiltReplay) -> ReplayPod:
    return ReplayPod(snp.job)
