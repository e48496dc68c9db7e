"""`attested-replay run --evidence coco-aa` against the loopback agent, then the tenant's
verifier."""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from pytest_httpserver import HTTPServer

from attestation.abi.product import ProductLine
from attestation.abi.tpm import QuoteSignature, parse_quote, serialize_quote, serialize_signature
from attestation.cli import main as verify_main
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd.vtpm import new_attestation_key
from runner.cli import main as runner_main
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


INIT_DATA = hashlib.sha256(b"the peer pod's init-data").digest()


def _resign(document: dict[str, Any], key: rsa.RSAPrivateKey, quote: bytes) -> None:
    """Put ``quote`` signed by ``key`` into an envelope document."""
    vtpm = document["evidence"]["vtpm"]
    signature = key.sign(quote, padding.PKCS1v15(), hashes.SHA256())
    vtpm["quote"] = base64.b64encode(quote).decode()
    vtpm["signature"] = base64.b64encode(serialize_signature(QuoteSignature(signature))).decode()


def test_run_with_azure_agent_emulation_verifies(
    httpserver: HTTPServer,
    tmp_path: Path,
    sim_state_dir: Path,
    sim_amd: SimulatedAmd,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A peer pod on a (simulated) Azure VM: the agent answers in az-snp-vtpm form, the
    envelope verifies, and a changed nonce, PCR 8 or attestation key does not."""
    ak = new_attestation_key()
    agent = AgentEmulator(
        sim_amd, tee="azsnpvtpm", mode="azure-sim", azure_ak=ak, azure_init_data=INIT_DATA
    )
    httpserver.expect_request("/info").respond_with_handler(agent.info)
    httpserver.expect_request("/aa/evidence").respond_with_handler(agent.evidence)
    bundle = tmp_path / "endorsement.pem"  # the agent sends the VCEK alone
    bundle.write_text(sim_amd.cert_chain_pem(ProductLine.MILAN))
    envelope = tmp_path / "envelope.json"
    run_id = "run-azure"
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
            "--endorsement-bundle",
            str(bundle),
            "--out",
            str(envelope),
        ]
    )
    assert code == 0, capsys.readouterr().err
    document = json.loads(envelope.read_bytes())
    assert document["evidence"]["kind"] == "az-snp-vtpm"
    assert document["platform"] == "simulated"
    assert document["hostData"] == "00" * 32  # a peer pod's VM has no HOST_DATA
    expected = _expected(tmp_path, run_id, sim_amd)
    pinned = json.loads(expected.read_text())
    pinned["initDataDigest"] = INIT_DATA.hex()
    expected.write_text(json.dumps(pinned))
    capsys.readouterr()

    def verdict(changed: dict[str, Any], name: str) -> int:
        path = tmp_path / name
        path.write_text(json.dumps(changed))
        code = verify_main(["--envelope", str(path), "--expected", str(expected)])
        capsys.readouterr()
        return code

    assert verdict(document, "as-run.json") == 0
    quote = parse_quote(base64.b64decode(document["evidence"]["vtpm"]["quote"]))

    other_nonce = copy.deepcopy(document)
    _resign(other_nonce, ak, serialize_quote(dataclasses.replace(quote, extra_data=bytes(64))))
    assert verdict(other_nonce, "nonce.json") == 7

    pcr8 = copy.deepcopy(document)
    pcr8["evidence"]["vtpm"]["pcrs"][8] = "ff" * 32
    assert verdict(pcr8, "pcr8.json") == 7  # the PCR values are no longer the quoted ones

    other_ak = copy.deepcopy(document)
    _resign(other_ak, new_attestation_key(), serialize_quote(quote))
    assert verdict(other_ak, "ak.json") == 3

    pinned["initDataDigest"] = "ab" * 32  # another init-data than the VM measured
    expected.write_text(json.dumps(pinned))
    assert verdict(document, "as-run.json") == 6
