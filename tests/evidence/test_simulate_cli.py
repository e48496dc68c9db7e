"""``attested-replay simulate``, driven through ``runner.cli.main``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509

from attestation import cli as verifier_cli
from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import parse_report
from attestation.endorsement.certificate import load_certificates, load_endorsement
from attestation.endorsement.chain import verify_chain
from attestation.endorsement.trust import TrustStore
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd.state import store as store_simulated_amd
from runner.cli import main


@pytest.fixture
def state_dir(simulated_amd: SimulatedAmd, tmp_path: Path) -> Path:
    """A state dir that already holds the session's simulated AMD (no key generation)."""
    directory = tmp_path / "state"
    store_simulated_amd(simulated_amd, directory / "simulated-amd")
    return directory


def test_root_prints_the_simulated_ark(
    simulated_amd: SimulatedAmd, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "root", "--state-dir", str(state_dir)]) == 0
    assert capsys.readouterr().out == simulated_amd.root_fingerprint + "\n"
    assert main(["simulate", "root", "--state-dir", str(state_dir), "--pem"]) == 0
    out = capsys.readouterr().out
    assert out == simulated_amd.ark_pem
    assert (
        x509.load_pem_x509_certificate(out.encode())
        .subject.rfc4514_string()
        .startswith("CN=ARK-Simulated (NOT AMD),O=SIMULATED - not AMD")
    )
    pem = tmp_path / "root.pem"
    assert main(["simulate", "root", "--state-dir", str(state_dir), "--out", str(pem)]) == 0
    assert capsys.readouterr().out == simulated_amd.root_fingerprint + "\n"
    assert pem.read_text() == simulated_amd.ark_pem


def test_root_creates_the_state_on_first_use(
    simulated_amd: SimulatedAmd,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generated: list[SimulatedAmd] = []

    def generate() -> SimulatedAmd:  # stands in for three RSA-4096 key generations
        generated.append(simulated_amd)
        return simulated_amd

    monkeypatch.setattr(SimulatedAmd, "generate", generate)
    state = tmp_path / "fresh"
    assert main(["simulate", "root", "--state-dir", str(state)]) == 0
    first = capsys.readouterr().out
    assert main(["simulate", "root", "--state-dir", str(state)]) == 0
    assert capsys.readouterr().out == first
    assert first == simulated_amd.root_fingerprint + "\n"
    assert len(generated) == 1
    assert (state / "simulated-amd" / "ark.key.pem").is_file()


@pytest.mark.parametrize(
    ("product", "signer"),
    [("Milan", "vcek"), ("genoa", "vlek"), ("TURIN", "vcek")],
)
def test_report_writes_a_signed_report_and_its_chain(
    simulated_amd: SimulatedAmd, state_dir: Path, tmp_path: Path, product: str, signer: str
) -> None:
    out, cert = tmp_path / "r.bin", tmp_path / "c.pem"
    measurement = "ab" * 48
    host_data = "cd" * 32
    code = main(
        [
            "simulate", "report", "--state-dir", str(state_dir),
            "--report-data", "0x1234",
            "--out", str(out), "--endorsement-out", str(cert),
            "--product", product, "--signer", signer,
            "--measurement", measurement, "--host-data", host_data,
            "--policy", "0x30000", "--vmpl", "1",
        ]
    )  # fmt: skip
    assert code == 0
    report = parse_report(out.read_bytes())
    line = ProductLine(product.capitalize())
    assert report.product_line is line
    assert report.signer_kind is SignerKind(signer)
    assert report.report_data == bytes.fromhex("1234") + bytes(62)
    assert report.measurement == bytes.fromhex(measurement)
    assert report.host_data == bytes.fromhex(host_data)
    assert report.policy.raw == 0x30000
    assert report.vmpl == 1
    certificates = load_certificates(cert.read_bytes())
    assert [c.subject.rfc4514_string().split(",")[0] for c in certificates] == [
        f"CN=SEV-{signer.upper()}",
        "CN=SEV-Simulated" if signer == "vcek" else "CN=SEV-VLEK-Simulated",
        "CN=ARK-Simulated (NOT AMD)",
    ]
    endorsement = load_endorsement(cert.read_bytes())
    assert dict(endorsement.spls) == report.tcb("reported").components()
    verify_chain(
        endorsement,
        line,
        trust=TrustStore.amd().with_simulated_root(simulated_amd.ark_certificate),
        now=dt.datetime.now(dt.UTC),
        intermediates=certificates[1:],
    )


def test_the_verifier_accepts_the_report_only_with_the_root_pinned(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, cert, root = tmp_path / "r.bin", tmp_path / "c.pem", tmp_path / "root.pem"
    argv = [
        "simulate", "report", "--state-dir", str(state_dir), "--report-data", "aa" * 64,
        "--out", str(out), "--endorsement-out", str(cert),
    ]  # fmt: skip
    assert main(argv) == 0
    assert main(["simulate", "root", "--state-dir", str(state_dir), "--out", str(root)]) == 0
    capsys.readouterr()
    unpinned = verifier_cli.main(["--report", str(out), "--endorsement", str(cert)])
    assert unpinned == 2
    assert "simulated root" in capsys.readouterr().out
    pinned = verifier_cli.main(
        ["--report", str(out), "--endorsement", str(cert), "--simulated-root", str(root)]
    )
    assert pinned == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--report-data", "zz"], "error: --report-data: 'zz' is not hex"),
        (["--report-data", "00" * 65], "error: --report-data: must be at most 64 bytes, got 65"),
        (["--report-data", "00", "--measurement", "00"], "--measurement: must be exactly 48"),
        (["--report-data", "00", "--product", "Venus"], "--product: unknown product 'Venus'"),
        (["--report-data", "00", "--vmpl", "4"], "error: --vmpl 4: must be 0 to 3"),
        (["--report-data", "00", "--vmpl", "x"], "error: --vmpl: 'x' is not an integer"),
        (["--report-data", "00", "--policy", "0x0"], "cannot build that report"),
        (["--report-data", "00", "--signer", "ask"], "invalid choice: 'ask'"),
        (["--report-data", "00", "--report-version", "6"], "cannot build that report"),
    ],
)
def test_bad_arguments_exit_9(
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    argv = [
        "simulate", "report", "--state-dir", str(state_dir),
        "--out", str(tmp_path / "r.bin"), "--endorsement-out", str(tmp_path / "c.pem"),
        *extra,
    ]  # fmt: skip
    assert main(argv) == 9
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.bin").exists()


def test_a_corrupt_state_exits_1_naming_the_file(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (state_dir / "simulated-amd" / "asvk.pem").write_text("not a certificate")
    assert main(["simulate", "root", "--state-dir", str(state_dir)]) == 1
    err = capsys.readouterr().err
    assert "'asvk.pem' is not a PEM certificate" in err
    assert str(state_dir / "simulated-amd") in err
