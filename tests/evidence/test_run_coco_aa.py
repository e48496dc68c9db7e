"""`attested-replay run --evidence coco-aa` against the loopback agent, then the tenant's verifier."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from attestation.abi.product import ProductLine
from attestation.cli import main as verify_main
from runner.cli import main as runner_main
from simulated_amd import SimulatedAmd
from tests.evidence.emulators import AgentEmulator
from tests.evidence.test_coco_aa import free_loopback_port

EXAMPLE_CORPUS = Path(str(resources.files("runner") / "examples" / "corpus"))


def _expected(tmp_path: Path, run_id: str, amd: SimulatedAmd) -> Path:
    expected = tmp_path / "expected.json"
    code = runner_main(
        [
            "expected",
            "--run-id",
            run_id,
            "--corpus",
            str(EXAMPLE_CORPUS),
            "--tenant",
            "acme",
            "--this-workload",
            "--simulated-root",
            amd.root_fingerprint,
            "--out",
            str(expected),
        ]
    )
    assert code == 0
    return expected


@pytest.mark.parametrize(
    ("agent_version", "chain", "encoding"),
    [("v0.21.0", "full", "sha512"), ("v0.19.0", "null", "sha256-hex")],
)
def test_run_with_agent_emulation_verifies(  # noqa: PLR0917 (pytest fixtures and parameters)
    httpserver: HTTPServer,
    tmp_path: Path,
    sim_state_dir: Path,
    sim_amd: SimulatedAmd,
    capsys: pytest.CaptureFixture[str],
    agent_version: str,
    chain: str,
    encoding: str,
) -> None:
    agent = AgentEmulator(sim_amd, version=agent_version, chain=chain)  # type: ignore[arg-type]
    httpserver.expect_request("/info").respond_with_handler(agent.info)
    httpserver.expect_request("/aa/evidence").respond_with_handler(agent.evidence)
    extra: list[str] = []
    if chain == "null":  # the platform sends no certificates: the pod mounts a bundle
        bundle = tmp_path / "endorsement.pem"
        bundle.write_text(sim_amd.cert_chain_pem(ProductLine.MILAN))
        extra = ["--endorsement-bundle", str(bundle)]
    envelope = tmp_path / "envelope.json"
    run_id = f"run-coco-{encoding}"
    code = runner_main(
        [
            "run",
            "--corpus",
            str(EXAMPLE_CORPUS),
            "--run-id",
            run_id,
            "--tenant",
            "acme",
            "--evidence",
            "coco-aa",
            "--agent-url",
            httpserver.url_for("/").rstrip("/"),
            "--state-dir",
            str(sim_state_dir),
            "--trust-simulated-root",
            "--out",
            str(envelope),
            *extra,
        ]
    )
    assert code == 0, capsys.readouterr().err
    document = json.loads(envelope.read_bytes())
    assert document["evidence"]["provider"] == "coco-aa"
    # The agent emulation signs with the simulated PKI: never labelled real hardware.
    assert document["platform"] == "simulated"
    assert document["evidence"]["reportDataEncoding"] == encoding
    expected = _expected(tmp_path, run_id, sim_amd)
    capsys.readouterr()
    verdict_code = verify_main(["--envelope", str(envelope), "--expected", str(expected), "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert verdict_code == 0, verdict
    assert verdict["verified"] is True


def test_run_auto_without_snp_lists_what_was_tried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Paths that do not exist: this machine has no SEV-SNP interface even on SNP hardware.
    absent = tmp_path / "absent"
    out = tmp_path / "out"
    out.mkdir()
    envelope = out / "envelope.json"
    code = runner_main(
        [
            "run",
            "--corpus",
            str(EXAMPLE_CORPUS),
            "--run-id",
            "run-auto",
            "--tenant",
            "acme",
            "--evidence",
            "auto",
            "--agent-url",
            f"http://127.0.0.1:{free_loopback_port()}",
            "--configfs-root",
            str(absent / "tsm" / "report"),
            "--sev-guest-device",
            str(absent / "sev-guest"),
            "--out",
            str(envelope),
        ]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert '"event": "replayed"' not in err  # refused before any replay work
    assert (
        "no SEV-SNP evidence interface on this machine (tried configfs-tsm, sev-guest, coco-aa)"
        in err
    )
    assert f"- configfs-tsm: configfs-tsm: {absent / 'tsm' / 'report'} does not exist" in err
    assert f"- sev-guest: sev-guest: {absent / 'sev-guest'} does not exist" in err
    assert "- coco-aa: coco-aa: no attestation agent at http://127.0.0.1:" in err
    assert not envelope.exists()
    assert list(out.iterdir()) == []  # no envelope, no result file, no temporary left over


def test_simulated_agent_evidence_is_refused_without_opt_in(
    httpserver: HTTPServer, tmp_path: Path, sim_state_dir: Path, sim_amd: SimulatedAmd
) -> None:
    """A real-mode run whose agent returns simulated evidence fails its own check (untrusted
    chain, exit 4 = verification failed) and writes nothing: no silent simulated fallback."""
    agent = AgentEmulator(sim_amd, version="v0.21.0", chain="full")
    httpserver.expect_request("/info").respond_with_handler(agent.info)
    httpserver.expect_request("/aa/evidence").respond_with_handler(agent.evidence)
    out = tmp_path / "out"
    out.mkdir()
    code = runner_main(
        [
            *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "r-1", "--tenant", "acme"),
            *("--evidence", "coco-aa", "--agent-url", httpserver.url_for("/").rstrip("/")),
            *("--state-dir", str(sim_state_dir), "--out", str(out / "envelope.json")),
        ]
    )
    assert code == 4
    assert list(out.iterdir()) == []
