"""``verify-attested-run`` raw-report mode: every real case, exit codes, output shapes."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from attestation import cli
from attestation.abi.product import ProductLine
from attestation.contracts import MAX_CERTIFICATE_BYTES, MAX_REPORT_FILE_BYTES
from attestation.endorsement.trust import AmdRole, TrustStore
from attestation.errors import FailureClass
from attestation.exit_codes import EXIT_CODES
from attestation.simulated_amd import SimulatedAmd
from attestation.verify.verifier import Verifier

ASSETS = Path(__file__).parents[1] / "assets"
REAL = ASSETS / "real"
DOCS = Path(__file__).parents[2] / "docs" / "verification.md"
CASES: list[dict[str, Any]] = json.loads((ASSETS / "cases.json").read_text())["cases"]
CRYPTO_ONLY = {
    "allowDebug": True,
    "allowMigrationAgent": True,
    "allowedVmpl": [0, 1, 2, 3],
    "allowProvisionalFirmware": True,
}
NOW = "2026-11-29T00:00:00Z"

#: cases.json verdict -> exit code. "endorsement_mismatch_or_signature" is the Turin report
#: with a genuine Milan VCEK: the certificate chains (to AMD's Milan root), so the first
#: failing stage is the signature (3), which runs before the consistency checks (4).
VERDICTS = {
    "pass": 0,
    "fail:platform_policy": 5,
    "fail:untrusted_chain": 2,
    "fail:endorsement_mismatch_or_signature": 3,
}


def case_id(case: dict[str, Any]) -> str:
    return f"{case['report'].removesuffix('-report.bin')}+{case['cert'].removesuffix('.der')}@{case['now'][:10]}"


def write(path: Path, data: bytes | str) -> Path:
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
@pytest.mark.parametrize(
    ("policy", "column"),
    [(CRYPTO_ONLY, "crypto"), ({}, "secure_default")],
    ids=["crypto-only", "secure-default"],
)
def test_every_real_case_reaches_its_verdict(
    case: dict[str, Any],
    policy: dict[str, Any],
    column: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy_file = write(tmp_path / "policy.json", json.dumps(policy))
    code, out, _ = run(
        capsys,
        "--report", REAL / case["report"],
        "--endorsement", REAL / case["cert"],
        "--policy", policy_file,
        "--now", case["now"],
    )  # fmt: skip
    assert code == VERDICTS[case[column]], out
    if code == 0:
        assert out.startswith("VERIFIED (report version")
    else:
        assert out.splitlines()[0].startswith("NOT VERIFIED: ")
        assert all(line.startswith("  FAILED ") for line in out.splitlines()[1:])


def test_default_policy_is_the_secure_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "--report", REAL / "gsg-milan-v2-debug-report.bin",
        "--endorsement", REAL / "gsg-milan-v2-debug-vcek.der",
        "--now", NOW,
    )  # fmt: skip
    assert code == 5
    assert out == (
        "NOT VERIFIED: platform-policy (exit 5)\n"
        "  FAILED policy.debug [platform-policy]: POLICY.DEBUG is 1: the host can read guest memory\n"
    )


def test_json_output_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "--report", REAL / "oak-turin-v5-report.bin",
        "--endorsement", REAL / "oak-turin-v5-vcek.der",
        "--now", NOW,
        "--json",
    )  # fmt: skip
    assert code == 0
    document = json.loads(out)
    assert set(document) == {
        "verified", "simulated", "exitCode", "failureClass", "checks", "report"
    }  # fmt: skip
    assert document["verified"] is True
    assert document["simulated"] is False  # an AMD chain
    assert document["exitCode"] == 0
    assert document["failureClass"] is None
    assert all(set(c) == {"name", "class", "ok", "detail"} for c in document["checks"])
    assert document["checks"][0] == {
        "name": "report.parse",
        "class": "malformed",
        "ok": True,
        "detail": "version 5, 1184 bytes",
    }
    report = document["report"]
    assert report["productLine"] == "Turin"
    assert report["reportedTcb"]["ucode"] == 0x47
    assert report["chipId"].startswith("3b42092f69c656d3")


def test_json_output_of_a_failure_lists_skipped_checks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "--report", REAL / "trustee-milan-v2-idblock-provisional-report.bin",
        "--endorsement", REAL / "NEG-trustee-fake-vcek-raw-hwid.der",
        "--now", NOW,
        "--json",
    )  # fmt: skip
    assert code == 2
    document = json.loads(out)
    assert document["verified"] is False
    assert document["exitCode"] == 2
    assert document["failureClass"] == "untrusted-chain"
    by_name = {c["name"]: c for c in document["checks"]}
    assert by_name["endorsement.chain"]["ok"] is False
    assert by_name["report.signature"] == {
        "name": "report.signature",
        "class": "bad-signature",
        "ok": None,
        "detail": "not run: no trusted chain",
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "exactly 1184 bytes (0x4a0), got 0"),
        (
            (REAL / "azure-milan-v3-report.bin").read_bytes()[:1000],
            "exactly 1184 bytes (0x4a0), got 1000",
        ),
        (
            (REAL / "azure-milan-v3-report.bin").read_bytes() + b"\0",
            "exactly 1184 bytes (0x4a0), got 1185",
        ),
        (b"\xff" * 1184, r"version [0x000:0x004] unsupported (2..5): ffffffff"),
        (b"hello world\n" * 98 + b"\n" * 8, "version [0x000:0x004] unsupported"),
    ],
    ids=["empty", "truncated", "one-byte-long", "all-ff", "text"],
)
def test_truncated_or_garbage_report_exits_1_naming_the_problem(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = write(tmp_path / "r.bin", content)
    code, out, _ = run(
        capsys, "--report", report, "--endorsement", REAL / "azure-milan-v3-vcek.der", "--now", NOW
    )
    assert code == 1
    assert "FAILED report.parse [malformed]: " in out
    assert message in out


def test_oversized_report_exits_1_naming_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = write(tmp_path / "big.bin", bytes(MAX_REPORT_FILE_BYTES + 1))
    code, _, err = run(
        capsys, "--report", report, "--endorsement", REAL / "azure-milan-v3-vcek.der", "--now", NOW
    )
    assert code == 1
    assert f"is over the {MAX_REPORT_FILE_BYTES}-byte limit" in err


def test_oversized_report_with_json_still_prints_a_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = write(tmp_path / "big.bin", bytes(MAX_REPORT_FILE_BYTES + 1))
    code, out, _ = run(
        capsys, "--report", report, "--endorsement", REAL / "azure-milan-v3-vcek.der", "--json"
    )
    assert code == 1
    document = json.loads(out)
    assert document["exitCode"] == 1
    assert document["checks"][0]["name"] == "input"


@pytest.mark.parametrize(
    "content",
    [b"", b"not a certificate", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"],
)
def test_garbage_endorsement_exits_1(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert = write(tmp_path / "c.der", content)
    code, out, _ = run(
        capsys, "--report", REAL / "azure-milan-v3-report.bin", "--endorsement", cert, "--now", NOW
    )
    assert code == 1
    assert "FAILED endorsement.parse [malformed]" in out


def test_oversized_endorsement_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert = write(tmp_path / "c.pem", b"A" * (MAX_CERTIFICATE_BYTES + 1))
    code, _, err = run(
        capsys, "--report", REAL / "azure-milan-v3-report.bin", "--endorsement", cert
    )
    assert code == 1
    assert f"over the {MAX_CERTIFICATE_BYTES}-byte limit" in err


def test_malformed_policy_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path / "p.json", '{"allowDebug": true, "allowDebugg": true}')
    code, _, err = run(
        capsys,
        "--report", REAL / "azure-milan-v3-report.bin",
        "--endorsement", REAL / "azure-milan-v3-vcek.der",
        "--policy", policy,
    )  # fmt: skip
    assert code == 1
    assert "allowDebugg: Extra inputs are not permitted" in err


@pytest.mark.parametrize("missing", ["report", "endorsement", "policy", "crl", "simulated-root"])
def test_missing_file_exits_9(
    missing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {
        "report": REAL / "azure-milan-v3-report.bin",
        "endorsement": REAL / "azure-milan-v3-vcek.der",
    }
    args[missing] = tmp_path / "does-not-exist"
    argv: list[str | Path] = []
    for key, value in args.items():
        argv += [f"--{key}", value]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 9
    assert out == ""
    assert "cannot read" in err
    assert "does-not-exist" in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--bogus"],
        ["--report"],
        ["--endorsement", str(REAL / "azure-milan-v3-vcek.der")],
        ["--report", str(REAL / "azure-milan-v3-report.bin")],
        ["--report", "x", "--endorsement", "y", "--now", "yesterday"],
        ["--report", "x", "--endorsement", "y", "--now", "2026-01-01T00:00:00"],
    ],
    ids=[
        "no-args",
        "unknown-option",
        "missing-value",
        "no-mode",
        "no-endorsement",
        "bad-now",
        "naive-now",
    ],
)
def test_usage_errors_exit_9(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 9
    assert capsys.readouterr().err != ""


@pytest.mark.parametrize(("option", "shows"), [("--help", "usage: "), ("--version", "0.1.0")])
def test_help_and_version_exit_0(
    option: str, shows: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([option]) == 0
    captured = capsys.readouterr()
    assert shows in captured.out
    assert "VERIFIED" not in captured.out
    assert captured.err == ""


def test_a_mistyped_option_is_named_with_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--envelop", "e.json", "--expected", "x.json"]) == 9
    assert capsys.readouterr().err == (
        "verify-attested-run: usage: unknown option --envelop; did you mean --envelope?\n"
    )
    assert cli.main(["--expected=x.json", "--envelope", "e.json", "--jsn"]) == 9
    assert "unknown option --jsn; did you mean --json?" in capsys.readouterr().err


def test_now_accepts_offsets(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(
        capsys,
        "--report", REAL / "azure-milan-v3-report.bin",
        "--endorsement", REAL / "azure-milan-v3-vcek.der",
        "--now", "2026-11-29T02:00:00+02:00",
    )  # fmt: skip
    assert code == 0


def test_unexpected_exception_exits_9(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Verifier, "verify", boom)
    code, _, err = run(
        capsys,
        "--report", REAL / "azure-milan-v3-report.bin",
        "--endorsement", REAL / "azure-milan-v3-vcek.der",
    )  # fmt: skip
    assert code == 9
    assert "internal error" in err
    assert "RuntimeError: boom" in err


@pytest.fixture
def sim(simulated_amd: SimulatedAmd) -> SimulatedAmd:
    """The session's simulated PKI (tests/conftest.py); it issues certificates at real time."""
    return simulated_amd


@pytest.fixture
def sim_files(sim: SimulatedAmd, tmp_path: Path) -> dict[str, Path]:
    report = sim.sign_report(report_data=b"\x42" * 64, product_line=ProductLine.TURIN)
    return {
        "report": write(tmp_path / "sim.bin", report),
        "chain": write(tmp_path / "chain.pem", sim.endorsement_pem(report)),
        "root": write(tmp_path / "root.pem", sim.ark_pem),
    }


def test_simulated_root_needs_the_opt_in(
    sim_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base: list[str | Path] = [
        "--report",
        sim_files["report"],
        "--endorsement",
        sim_files["chain"],
    ]
    code, out, _ = run(capsys, *base)
    assert code == 2
    assert "FAILED endorsement.chain [untrusted-chain]" in out
    code, out, _ = run(capsys, *base, "--simulated-root", sim_files["root"])
    assert code == 0
    # Nothing pinned MEASUREMENT or HOST_DATA: the verdict says so (issue 31).
    assert out == (
        "VERIFIED (SIMULATED \N{EM DASH} not AMD hardware) (report version 5, Turin, vcek); "
        "MEASUREMENT and HOST_DATA not checked (not pinned)\n"
    )
    code, out, _ = run(capsys, *base, "--simulated-root", sim_files["root"], "--json")
    assert code == 0
    assert json.loads(out)["simulated"] is True


def test_pinning_an_amd_root_as_simulated_is_refused(
    sim_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    amd_ark = TrustStore.amd().amd_certificates()[ProductLine.MILAN, AmdRole.ARK]
    root = write(tmp_path / "amd.pem", amd_ark.public_bytes(serialization.Encoding.PEM))
    code, _, err = run(
        capsys,
        "--report", REAL / "azure-milan-v3-report.bin",
        "--endorsement", REAL / "azure-milan-v3-vcek.der",
        "--simulated-root", root,
    )  # fmt: skip
    assert code == 9
    assert "is an AMD certificate" in err


def test_crl_is_checked(
    sim: SimulatedAmd,
    sim_files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base: list[str | Path] = [
        "--report", sim_files["report"],
        "--endorsement", sim_files["chain"],
        "--simulated-root", sim_files["root"],
    ]  # fmt: skip
    # Simulated certificates are issued at the real time, so --now stays the default (now).
    this_update = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    clean = write(tmp_path / "clean.crl", sim.crl(this_update=this_update))
    assert run(capsys, *base, "--crl", clean)[0] == 0
    revoked = write(
        tmp_path / "revoked.crl",
        sim.crl(revoked_serials=[sim.ask_certificate.serial_number], this_update=this_update),
    )
    code, out, _ = run(capsys, *base, "--crl", revoked)
    assert code == 2
    assert "revoked by the CRL" in out
    garbage = write(tmp_path / "garbage.crl", b"not a crl")
    code, out, _ = run(capsys, *base, "--crl", garbage)
    assert code == 1
    assert "CRL is not a DER X.509 CRL" in out


def test_docs_exit_code_table_matches_exit_codes() -> None:
    rows = re.findall(r"^\| (\d) \| ([A-Za-z/ -]+?) \|", DOCS.read_text(), flags=re.MULTILINE)
    documented = {int(code): name.strip() for code, name in rows}
    expected = {code: failure.value for failure, code in EXIT_CODES.items()}
    expected[0] = "verified"
    expected[EXIT_CODES[FailureClass.USAGE]] = "usage / IO / internal"
    assert documented == expected


@pytest.mark.parametrize(
    ("argv", "verdict"),
    [
        ([], 0),
        (["--json"], 0),
        (["--policy", str(ASSETS / "does-not-exist.json")], 9),
    ],
    ids=["verified-text", "verified-json", "usage"],
)
def test_a_verdict_that_cannot_be_written_exits_9(
    argv: list[str], verdict: int, tmp_path: Path
) -> None:
    """stdout is a pipe nobody reads (``verify-attested-run ... | head -0``): a verified result
    the caller never received must not exit 0, and a BrokenPipeError must not exit 1."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the verifier starts: every write fails with EPIPE
    base = [
        sys.executable, "-m", "attestation.cli",
        "--report", str(REAL / "azure-milan-v3-report.bin"),
        "--endorsement", str(REAL / "azure-milan-v3-vcek.der"),
        "--now", NOW,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            [*base, *argv], stdout=write_end, stderr=subprocess.PIPE, check=False, cwd=tmp_path
        )
    finally:
        os.close(write_end)
    assert done.returncode == 9
    if verdict == 0:
        assert b"cannot write the verdict to stdout: [Errno 32] Broken pipe" in done.stderr
    assert b"Traceback" not in done.stderr


def test_a_policy_problem_names_no_python_type() -> None:
    from attestation.errors import MalformedError
    from attestation.verify.policy import load_policy

    with pytest.raises(MalformedError) as refused:
        load_policy(b'{"minimumTcb": 5}')
    assert str(refused.value) == "policy is invalid: minimumTcb: Input should be a valid dictionary"
