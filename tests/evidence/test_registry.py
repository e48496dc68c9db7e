"""get_provider, the auto search, and endorsement bundles."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from attestation.simulated_amd import SimulatedAmd
from runner.errors import EvidenceError, EvidenceUnavailableError, InputError, UsageError
from runner.evidence import EVIDENCE_CHOICES, get_provider, load_endorsement_bundle
from runner.evidence.auto import AutoProvider
from runner.evidence.base import Evidence
from runner.evidence.coco_aa import CocoAgentProvider
from runner.evidence.configfs_tsm import ConfigfsTsmProvider
from runner.evidence.sev_guest import SevGuestProvider
from runner.evidence.simulated import SimulatedProvider
from tests.evidence.emulators import signed_chain
from tests.evidence.test_coco_aa import free_loopback_port


def test_choices() -> None:
    assert EVIDENCE_CHOICES == ("simulated", "coco-aa", "configfs-tsm", "sev-guest", "auto")


def test_named_providers(tmp_path: Path) -> None:
    assert isinstance(get_provider("simulated", state_dir=tmp_path), SimulatedProvider)
    coco = get_provider("coco-aa", agent_url="http://127.0.0.1:1/", agent_encoding="sha512")
    assert isinstance(coco, CocoAgentProvider)
    assert (coco.base_url, coco.encoding) == ("http://127.0.0.1:1", "sha512")
    assert coco.wait == 30.0  # the agent's REST server may start after the container
    assert get_provider("coco-aa", agent_wait=2.5).wait == 2.5  # type: ignore[attr-defined]
    configfs = get_provider("configfs-tsm", configfs_root=tmp_path)
    assert isinstance(configfs, ConfigfsTsmProvider)
    assert configfs.root == tmp_path
    assert isinstance(get_provider("sev-guest"), SevGuestProvider)
    auto = get_provider("auto")
    assert isinstance(auto, AutoProvider)
    assert [p.name for p in auto.providers] == ["configfs-tsm", "sev-guest", "coco-aa"]
    # auto cannot tell a late agent from none: it waits only when asked to
    assert auto.providers[2].wait == 0.0  # type: ignore[attr-defined]
    asked = get_provider("auto", agent_wait=7)
    assert isinstance(asked, AutoProvider)
    assert asked.providers[2].wait == 7.0  # type: ignore[attr-defined]


def test_unknown_name_and_option() -> None:
    with pytest.raises(UsageError, match="unknown evidence provider 'tpm'"):
        get_provider("tpm")
    with pytest.raises(UsageError, match="unknown evidence option"):
        get_provider("coco-aa", colour="blue")
    with pytest.raises(UsageError, match="unknown agent encoding"):
        get_provider("coco-aa", agent_encoding="base64")
    with pytest.raises(UsageError, match="agent_wait must be a number of seconds >= 0"):
        get_provider("coco-aa", agent_wait=-1)


def test_auto_without_any_interface_lists_every_reason(tmp_path: Path, binding: bytes) -> None:
    provider = get_provider(
        "auto",
        configfs_root=tmp_path / "no-configfs",
        sev_guest_device=tmp_path / "no-sev-guest",
        agent_url=f"http://127.0.0.1:{free_loopback_port()}",
        agent_timeout=2,
    )
    with pytest.raises(EvidenceUnavailableError) as info:
        provider.obtain(binding)
    assert type(info.value) is EvidenceUnavailableError
    lines = str(info.value).splitlines()
    assert lines[0] == (
        "no SEV-SNP evidence interface on this machine (tried configfs-tsm, sev-guest, coco-aa):"
    )
    assert lines[1].startswith("  - configfs-tsm: configfs-tsm: ")
    assert "no-configfs does not exist" in lines[1]
    assert lines[2].startswith("  - sev-guest: sev-guest: ")
    assert "no-sev-guest does not exist" in lines[2]
    assert lines[3].startswith("  - coco-aa: coco-aa: no attestation agent at http://127.0.0.1:")


class _Fixed:
    def __init__(self, name: str, error: Exception | None) -> None:
        self.name = name
        self.error = error
        self.calls = 0

    def check_available(self) -> None:
        if isinstance(self.error, EvidenceUnavailableError):
            raise self.error

    def obtain(self, canonical_binding: bytes) -> Evidence:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return Evidence(canonical_binding, (), self.name, "sha512")


def test_auto_stops_at_an_interface_that_exists_but_fails(binding: bytes) -> None:
    first = _Fixed("configfs-tsm", EvidenceUnavailableError("absent"))
    second = _Fixed("sev-guest", EvidenceError("firmware error"))
    third = _Fixed("coco-aa", None)
    with pytest.raises(EvidenceError, match="firmware error") as caught:
        AutoProvider([first, second, third]).obtain(binding)
    assert type(caught.value) is EvidenceError
    assert third.calls == 0


def test_auto_uses_first_available(binding: bytes) -> None:
    first = _Fixed("configfs-tsm", EvidenceUnavailableError("absent"))
    second = _Fixed("sev-guest", None)
    assert AutoProvider([first, second]).obtain(binding).provider == "sev-guest"


def test_endorsement_bundle_is_ordered_signer_first(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    report = sim_amd.sign_report(report_data=bytes(64))
    vcek, ask, ark = signed_chain(sim_amd, report)
    pem = b"".join(
        x509.load_der_x509_certificate(d).public_bytes(Encoding.PEM) for d in (ark, vcek, ask)
    )
    path = tmp_path / "bundle.pem"
    path.write_bytes(pem)
    assert load_endorsement_bundle(path) == (vcek, ask, ark)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n", "not certificates"),
        (b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n", "not a PEM"),
    ],
)
def test_bad_endorsement_bundles(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bundle.pem"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message) as caught:
        load_endorsement_bundle(path)
    assert type(caught.value) is InputError


def test_bundle_of_only_cas_is_refused(tmp_path: Path, sim_amd: SimulatedAmd) -> None:
    path = tmp_path / "bundle.pem"
    path.write_bytes(sim_amd.ark_pem.encode())
    with pytest.raises(InputError, match="has no VCEK/VLEK") as caught:
        load_endorsement_bundle(path)
    assert type(caught.value) is InputError


def test_missing_bundle(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read endorsement bundle") as caught:
        load_endorsement_bundle(tmp_path / "absent.pem")
    assert type(caught.value) is InputError


@pytest.mark.parametrize(
    ("evidence", "extra", "wait"),
    [("coco-aa", [], 30.0), ("coco-aa", ["--agent-wait", "5"], 5.0), ("auto", [], 0.0)],
)
def test_run_agent_wait_reaches_the_provider(
    tmp_path: Path, evidence: str, extra: list[str], wait: float
) -> None:
    from runner.cli import build_parser
    from runner.commands.run import run_request

    argv = ["run", "--corpus", str(tmp_path), "--run-id", "r", "--tenant", "t"]
    args = build_parser().parse_args(
        [*argv, "--evidence", evidence, "--out", str(tmp_path / "e.json"), *extra]
    )
    provider = get_provider(evidence, **run_request(args).provider_options())
    coco = provider.providers[2] if isinstance(provider, AutoProvider) else provider
    assert isinstance(coco, CocoAgentProvider)
    assert coco.wait == wait
