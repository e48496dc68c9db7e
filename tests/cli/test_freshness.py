"""Freshness: the tenant picks a nonce, the operator submits the run with it, the tenant pins
it. An envelope with another nonce, or none, is not the run the tenant asked for (exit 8)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from pathlib import Path

import pytest

from attestation.cli import main as verify_main
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd import state as simulated_state
from runner.cli import main
from runner.evidence.simulated import simulated_amd_dir

EXAMPLE_CORPUS = Path(__file__).parents[2] / "runner" / "examples" / "corpus"
IMAGE = "registry.example/attested-replay@sha256:" + "1" * 64
CHECKSUM = "sha256:" + "2" * 64
KATA_INIT_DATA = "io.katacontainers.config.hypervisor.cc_init_data"
NONCE = "tenant-acme-2026-12-01T03:00Z-7f3a9c"


@pytest.fixture
def state_dir(tmp_path: Path, simulated_amd: SimulatedAmd) -> Path:
    directory = tmp_path / "state"
    directory.mkdir()
    simulated_state.store(simulated_amd, simulated_amd_dir(directory))
    return directory


def _replay(tmp_path: Path, state_dir: Path, *extra: str) -> Path:
    envelope = tmp_path / "envelope.json"
    argv = [
        *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "run-7", "--tenant", "acme"),
        *("--evidence", "simulated", "--state-dir", str(state_dir), "--out", str(envelope)),
        *extra,
    ]
    assert main(argv) == 0
    return envelope


def _expected(tmp_path: Path, state_dir: Path, *extra: str) -> Path:
    expected = tmp_path / "expected.json"
    argv = [
        *("expected", "--run-id", "run-7", "--corpus", str(EXAMPLE_CORPUS)),
        *("--trust-local-simulated-root", "--state-dir", str(state_dir), "--out", str(expected)),
        *extra,
    ]
    assert main(argv) == 0
    return expected


def test_the_pinned_nonce_decides(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = _replay(tmp_path, state_dir, "--nonce", NONCE)
    expected = _expected(tmp_path, state_dir, "--nonce", NONCE)
    assert json.loads(expected.read_text())["nonce"] == NONCE
    capsys.readouterr()
    assert verify_main(["--envelope", str(envelope), "--expected", str(expected)]) == 0

    # An old envelope (another nonce) is refused: exit 8, naming both.
    stale = _expected(tmp_path, state_dir, "--nonce", "a-newer-nonce")
    capsys.readouterr()
    assert verify_main(["--envelope", str(envelope), "--expected", str(stale)]) == 8
    assert (
        f"FAILED expectation.nonce [expectation]: nonce is {NONCE}, the tenant expected "
        "a-newer-nonce" in capsys.readouterr().out
    )


def test_an_envelope_without_a_nonce_fails_a_pinned_one(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = _replay(tmp_path, state_dir)
    expected = _expected(tmp_path, state_dir, "--nonce", NONCE)
    capsys.readouterr()
    assert verify_main(["--envelope", str(envelope), "--expected", str(expected)]) == 8
    assert (
        f"nonce is absent from the binding, the tenant expected {NONCE}" in capsys.readouterr().out
    )


def test_a_bad_nonce_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    too_long = "n" * 257
    argv = [
        *("expected", "--run-id", "run-7", "--corpus-checksum", CHECKSUM),
        *("--nonce", too_long, "--out", str(tmp_path / "x.json")),
    ]
    assert main(argv) == 9
    err = capsys.readouterr().err
    assert err.startswith(f"error: --nonce '{too_long[:77]}...': String should have at most 256")
    assert not (tmp_path / "x.json").exists()


def test_submit_passes_the_nonce_to_the_run_and_its_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = [
        *("--run-id", "run-7", "--tenant", "acme", "--image", IMAGE, "--overlay", "snp"),
        *("--nonce", NONCE),
    ]
    argv = ["submit", *run, "--corpus", "https://corpora.example/c.tar.gz", "--checksum", CHECKSUM]
    assert main([*argv, "--dry-run"]) == 0
    job = json.loads(capsys.readouterr().out)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--nonce") + 1] == NONCE
    init_data = gzip.decompress(
        base64.b64decode(job["spec"]["template"]["metadata"]["annotations"][KATA_INIT_DATA])
    )
    assert NONCE.encode() in init_data  # the agent policy admits exactly these arguments
    host_data = hashlib.sha256(init_data).hexdigest()

    # The tenant's expected values from the same parameters pin that HOST_DATA and the nonce.
    expected = tmp_path / "expected.json"
    assert (
        main(
            [
                "expected",
                *run,
                *("--corpus-source", "https://corpora.example/c.tar.gz"),
                *("--corpus-checksum", CHECKSUM, "--out", str(expected)),
                # A hardware file pins the launch digest and the evaluation too.
                *("--evaluation-digest", CHECKSUM, "--measurement", "ab" * 48),
            ]
        )
        == 0
    )
    capsys.readouterr()
    document = json.loads(expected.read_text())
    assert (document["nonce"], document["hostData"]) == (NONCE, [host_data])
    # Without the nonce the Job is another one: the HOST_DATA a tenant pins differs.
    assert (
        main([*argv[: argv.index("--nonce")], *argv[argv.index("--nonce") + 2 :], "--dry-run"]) == 0
    )
    other = json.loads(capsys.readouterr().out)
    annotation = other["spec"]["template"]["metadata"]["annotations"][KATA_INIT_DATA]
    assert hashlib.sha256(gzip.decompress(base64.b64decode(annotation))).hexdigest() != host_data
