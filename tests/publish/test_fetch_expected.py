"""`tenant fetch --expected X`: every fetched envelope verified against one expected-values
file, with the run ID of its log entry; exit 4 when one does not verify."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from attestation.cli import main as verify_main
from attestation.contracts import MAX_ENVELOPE_JSON_DEPTH
from attestation.envelope.verification import verify_envelope
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd import state as simulated_state
from attestation.tenant import verify_fetched as verify_fetched_module
from attestation.tenant.errors import TenantUsageError, VerificationWorkerError
from attestation.tenant.http import RetryPolicy
from attestation.tenant.verify_fetched import load_expectations, verify_fetched
from attestation.transparency.entries import LogEntry
from runner.cli import main
from runner.evidence.simulated import simulated_amd_dir
from runner.exit_codes import exit_code_for
from runner.publish.client import publish_envelope
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.sequencer import AppendRequest
from runner.service.log.shard_sets import PartShape
from runner.service.log.storage import SqliteStorage
from tests.publish.conftest import make_envelope

EXAMPLE_CORPUS = Path(__file__).parents[2] / "runner" / "examples" / "corpus"
FAST = RetryPolicy(backoff_factor=0.01, backoff_max=0.05)
SIMULATED = "VERIFIED (SIMULATED \N{EM DASH} not AMD hardware) (report version"


@pytest.fixture(scope="module")
def genuine(
    tmp_path_factory: pytest.TempPathFactory, simulated_amd: SimulatedAmd
) -> dict[str, Path]:
    """Two simulated runs of the example corpus (run-a, run-b), shard 1 of 2 of a third
    (run-s) and the tenant's one expected-values file for all (written for another run ID)."""
    out = tmp_path_factory.mktemp("genuine")
    state_dir = out / "state"
    state_dir.mkdir()
    simulated_state.store(simulated_amd, simulated_amd_dir(state_dir))
    files = {}
    for run_id, *shard in (
        ("run-a",),
        ("run-b",),
        ("run-s", "--shard-count", "2", "--shard-index", "1"),
    ):
        files[run_id] = out / f"{run_id}.json"
        argv = [
            *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", run_id, "--tenant", "acme"),
            *("--evidence", "simulated", "--state-dir", str(state_dir)),
            *("--out", str(files[run_id]), *shard),
        ]
        assert main(argv) == 0
    files["expected"] = out / "expected.json"
    argv = [
        *("expected", "--run-id", "any-run", "--corpus", str(EXAMPLE_CORPUS), "--tenant", "acme"),
        *("--trust-local-simulated-root", "--state-dir", str(state_dir)),
        *("--out", str(files["expected"])),
    ]
    assert main(argv) == 0
    return files


@pytest.fixture
def service(tmp_path: Path, signer: CheckpointSigner, serve: Callable[..., Any]) -> Iterator[Any]:
    storage = SqliteStorage(tmp_path / "publish.sqlite3")
    storage.initialize()
    try:
        with serve(storage, signer) as running:
            yield running
    finally:
        storage.close()


def _publish(service: Any, tmp_path: Path, run_id: str, data: bytes) -> None:
    publish_envelope(
        service.url,
        data,
        tenant="acme",
        run_id=run_id,
        token=service.token("acme"),
        spool_dir=tmp_path / "spool",
        retry=FAST,
    )


def _fetch(service: Any, tmp_path: Path, *extra: str) -> int:
    token = tmp_path / "acme.token"
    token.write_text(service.token("acme", "tenant") + "\n")
    argv = [
        *("tenant", "fetch", "--server", service.url, "--token-file", str(token)),
        *("--tenant", "acme", "--out", str(tmp_path / "store")),
        *("--log-key", service.verifier_key.encode()),
    ]
    return main([*argv, *extra])


def test_each_run_is_verified_with_its_own_run_id(
    service: Any,
    genuine: dict[str, Path],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = genuine["expected"]
    for run_id in ("run-a", "run-b"):
        _publish(service, tmp_path, run_id, genuine[run_id].read_bytes())
    capsys.readouterr()
    assert _fetch(service, tmp_path, "--expected", str(expected)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(f"run run-a (log index 0): {SIMULATED}")
    assert lines[2].startswith(f"run run-b (log index 1): {SIMULATED}")
    assert lines[3] == f"2 of 2 new envelope(s) verified against --expected {expected}"

    # The same file given to verify-attested-run pins its own runId: right for one run only.
    stored = sorted((tmp_path / "store" / "envelopes").iterdir())
    assert {verify_main(["--envelope", str(e), "--expected", str(expected)]) for e in stored} == {8}
    capsys.readouterr()

    # A later fetch verifies only what it adds; an envelope that does not verify is exit 4
    # (it is kept: the log holds it) and its failed checks are listed under its line.
    _publish(service, tmp_path, "run-c", envelope_for("acme", "run-c"))
    assert _fetch(service, tmp_path, "--expected", str(expected)) == 4
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == (
        f"verified log of 3 entries (was 2); 1 new envelope(s) in {tmp_path / 'store/envelopes'}"
    )
    assert lines[1] == "run run-c (log index 2): NOT VERIFIED: malformed (exit 1)"
    assert lines[2].startswith("    FAILED envelope.cert-chain [malformed]: ")
    assert lines[-1] == f"0 of 1 new envelope(s) verified against --expected {expected}"
    assert captured.err.endswith(
        f"error: 1 of 1 new envelope(s) did not verify against --expected {expected}\n"
    )
    assert len(list((tmp_path / "store" / "envelopes").iterdir())) == 3


def test_a_shard_envelope_is_verified_as_the_shard_it_is(
    service: Any, genuine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _publish(service, tmp_path, "run-s", genuine["run-s"].read_bytes())
    capsys.readouterr()
    assert _fetch(service, tmp_path, "--expected", str(genuine["expected"])) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(f"run run-s shard 1 of 2 (log index 0): {SIMULATED}")


def test_another_corpus_fails_every_run(
    service: Any, genuine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = json.loads(genuine["expected"].read_text())
    other["corpusChecksum"] = "sha256:" + "5" * 64
    expected = tmp_path / "other.json"
    expected.write_text(json.dumps(other))
    _publish(service, tmp_path, "run-a", genuine["run-a"].read_bytes())
    capsys.readouterr()
    assert _fetch(service, tmp_path, "--expected", str(expected)) == 4
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "run run-a (log index 0): NOT VERIFIED: expectation (exit 8)"
    assert lines[2].startswith("    FAILED expectation.corpus-checksum [expectation]: ")


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        (None, 9, "--expected {path}: no such file"),
        (b'{"corpusChecksum": "sha256:00"}', 1, "--expected {path}: the expected-values file "),
        (b"\xff\xfe{}", 1, "--expected {path}: the expected-values file is not UTF-8"),
        (b"[]", 1, "--expected {path}: the expected-values file must be a JSON object"),
    ],
    ids=["missing", "bad-value", "utf-16", "not-an-object"],
)
def test_a_bad_expected_file_is_refused_before_fetching(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes | None,
    code: int,
    message: str,
) -> None:
    path = tmp_path / "expected.json"
    if content is not None:
        path.write_bytes(content)
    token = tmp_path / "t.token"
    token.write_text("token\n")
    argv = [
        *("tenant", "fetch", "--server", "https://unreachable.invalid", "--tenant", "acme"),
        *("--token-file", str(token), "--out", str(tmp_path / "store"), "--log-key", "k"),
        *("--expected", str(path)),
    ]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith("error: " + message.format(path=path)), err
    assert not (tmp_path / "store" / "checkpoint").exists()


def _fetch_all(
    service: Any, genuine: dict[str, Path], tmp_path: Path
) -> list[tuple[int, str, str]]:
    """run-a, run-b (genuine), run-c (no evidence: fails) and shard 1 of run-s, fetched."""
    published = [
        ("run-a", genuine["run-a"].read_bytes()),
        ("run-b", genuine["run-b"].read_bytes()),
        ("run-c", make_envelope("acme", "run-c")),
        ("run-s", genuine["run-s"].read_bytes()),
    ]
    for run_id, data in published:
        _publish(service, tmp_path, run_id, data)
    assert _fetch(service, tmp_path) == 0
    return [
        (position, "sha256:" + hashlib.sha256(data).hexdigest(), run_id)
        for position, (run_id, data) in enumerate(published)
    ]


def test_the_process_pool_gives_the_sequential_verdicts(
    service: Any,
    genuine: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = _fetch_all(service, genuine, tmp_path)
    document = load_expectations(genuine["expected"])
    now = datetime.now(UTC)
    envelopes = tmp_path / "store" / "envelopes"
    sequential = verify_fetched(envelopes, entries, document, now=now)
    assert [(v.position, v.run_id, v.ok, v.exit_code) for v in sequential] == [
        (0, "run-a", True, 0),
        (1, "run-b", True, 0),
        (2, "run-c", False, 1),
        (3, "run-s", True, 0),
    ]
    assert sequential[2].summary.startswith("NOT VERIFIED: malformed (exit 1)\n")
    assert sequential[3].label() == "run run-s shard 1 of 2 (log index 3)"
    monkeypatch.setattr(verify_fetched_module, "POOL_BATCH", 1)  # one task per envelope
    assert verify_fetched(envelopes, entries, document, now=now, workers=2) == sequential
    monkeypatch.setattr(verify_fetched_module, "POOL_BATCH", 3)  # batches of 3 and 1
    assert verify_fetched(envelopes, entries, document, now=now, workers=4) == sequential


def test_the_pool_reports_what_the_sequential_loop_reports(
    service: Any,
    genuine: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(verify_fetched_module, "POOL_BATCH", 1)
    _fetch_all(service, genuine, tmp_path)
    outputs = []
    for workers in ("1", "2"):
        (tmp_path / "store" / "checkpoint").unlink()  # fetch (and verify) everything again
        capsys.readouterr()
        assert (
            _fetch(
                service,
                tmp_path,
                "--expected",
                str(genuine["expected"]),
                "--verify-workers",
                workers,
            )
            == 4
        )
        outputs.append(capsys.readouterr())
    assert outputs[0].out == outputs[1].out
    # the error line is the same too (the log line before it carries a time)
    assert outputs[0].err.splitlines()[-1] == outputs[1].err.splitlines()[-1]
    lines = outputs[0].out.splitlines()
    assert lines[3] == "run run-c (log index 2): NOT VERIFIED: malformed (exit 1)"
    assert lines[-1] == f"3 of 4 new envelope(s) verified against --expected {genuine['expected']}"


class _DiesWhenUnpickled(datetime):
    """A time whose unpickling ends the process: a worker that dies mid-task."""

    def __reduce_ex__(self, _protocol: Any) -> tuple[Any, tuple[int]]:
        return os._exit, (70,)


def test_a_worker_that_dies_is_an_error_never_a_pass(
    service: Any, genuine: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify_fetched_module, "POOL_BATCH", 1)
    entries = _fetch_all(service, genuine, tmp_path)
    document = load_expectations(genuine["expected"])
    now = _DiesWhenUnpickled(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(VerificationWorkerError) as caught:
        verify_fetched(tmp_path / "store" / "envelopes", entries, document, now=now, workers=2)
    assert str(caught.value).startswith("a verification worker process died (")
    assert str(caught.value).endswith("): no envelope is reported verified")
    assert exit_code_for(caught.value) == 9


def test_an_unreadable_envelope_is_the_same_error_in_the_pool(
    service: Any, genuine: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify_fetched_module, "POOL_BATCH", 1)
    entries = _fetch_all(service, genuine, tmp_path)
    missing = (
        tmp_path / "store" / "envelopes" / f"sha256-{entries[1][1].removeprefix('sha256:')}.json"
    )
    missing.unlink()
    document = load_expectations(genuine["expected"])
    errors = []
    for workers in (1, 2):
        with pytest.raises(TenantUsageError) as caught:
            verify_fetched(
                tmp_path / "store" / "envelopes",
                entries,
                document,
                now=datetime.now(UTC),
                workers=workers,
            )
        errors.append(str(caught.value))
    assert errors == [f"{missing}: No such file or directory"] * 2


@pytest.mark.parametrize("workers", ["0", "65", "x"])
def test_verify_workers_out_of_range_is_a_usage_error(
    workers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("arp_t\n")
    argv = ["tenant", "fetch", "--server", "http://127.0.0.1:9", "--token-file", str(token)]
    argv += ["--tenant", "acme", "--out", str(tmp_path / "out"), f"--verify-workers={workers}"]
    assert main(argv) == 9
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --verify-workers: not a whole number from 1 to 64: {workers!r}"
    )
    with pytest.raises(TenantUsageError, match=r"^--verify-workers 0: must be between 1 and 64$"):
        verify_fetched(tmp_path, [], {}, now=datetime.now(UTC), workers=0)


# -- no envelope passes without a verdict ----------------------------------------------------


def _unjudged(tmp_path: Path) -> list[int] | None:
    path = tmp_path / "store" / "unjudged.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_an_envelope_the_verifier_fails_on_stays_unjudged_until_judged(
    service: Any,
    genuine: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The verifier fails on the middle envelope of a batch: the others get their verdicts,
    the middle one is listed as unjudged, and every later fetch verifies it again and fails
    (exit 4) until it has a verdict; then the next fetch is clean."""
    expected = str(genuine["expected"])
    for run_id in ("run-a", "run-b", "run-s"):
        _publish(service, tmp_path, run_id, genuine[run_id].read_bytes())
    middle = "sha256:" + hashlib.sha256(genuine["run-b"].read_bytes()).hexdigest()
    genuine_verify = verify_envelope

    def fails_on_the_middle(data: bytes, *args: Any, **kwargs: Any) -> Any:
        if "sha256:" + hashlib.sha256(data).hexdigest() == middle:
            raise RuntimeError("verifier bug")
        return genuine_verify(data, *args, **kwargs)

    monkeypatch.setattr(verify_fetched_module, "verify_envelope", fails_on_the_middle)
    capsys.readouterr()
    for attempt in range(2):
        argv = ("--expected", expected, "--verify-workers", "1")
        assert _fetch(service, tmp_path, *argv) == 4, attempt
        captured = capsys.readouterr()
        lines = captured.out.splitlines()
        no_verdict = "run run-b (log index 1): NO VERDICT: the verifier failed: RuntimeError: "
        if attempt == 0:
            assert lines[1].startswith(f"run run-a (log index 0): {SIMULATED}")
            assert lines[2] == f"{no_verdict}verifier bug"
            assert lines[3].startswith(f"run run-s shard 1 of 2 (log index 2): {SIMULATED}")
            assert lines[4] == (
                f"2 of 3 new envelope(s) verified against --expected {expected} "
                "(1 without a verdict)"
            )
        else:
            assert lines[1:] == [
                (
                    "1 envelope(s) fetched earlier have no verdict yet (log index 1): "
                    "verifying them again"
                ),
                f"{no_verdict}verifier bug",
                f"0 of 1 envelope(s) verified against --expected {expected} (1 without a verdict)",
            ]
        assert captured.err.endswith(
            "error: 1 fetched envelope(s) have no verdict yet (log index 1): every "
            "`tenant fetch --expected` verifies them again and fails until each has one\n"
        )
        assert _unjudged(tmp_path) == [1]
        # The log itself was fetched and proven: the checkpoint advanced, the index holds all.
        assert sorted(json.loads((tmp_path / "store" / "index.json").read_text())) == [
            "0",
            "1",
            "2",
        ]
    # Without --expected nothing is judged, and the fetch still fails naming what is pending.
    assert _fetch(service, tmp_path) == 4
    assert "1 fetched envelope(s) have no verdict yet (log index 1)" in capsys.readouterr().err
    monkeypatch.setattr(verify_fetched_module, "verify_envelope", genuine_verify)
    assert _fetch(service, tmp_path, "--expected", expected) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith(f"run run-b (log index 1): {SIMULATED}")
    assert lines[3] == f"1 of 1 envelope(s) verified against --expected {expected}"
    assert _unjudged(tmp_path) is None
    assert _fetch(service, tmp_path, "--expected", expected) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"0 of 0 new envelope(s) verified against --expected {expected}"
    )


def test_a_900_deep_envelope_in_the_log_is_judged_not_verified(
    service: Any,
    genuine: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A genuine envelope whose result nests 900 deep, logged as an older service would have
    (injected into the log past today's 422): the fetch keeps it (the log proves it was
    published) and judges it NOT VERIFIED, malformed (exit 4), where it used to stop at
    "internal error" (exit 9) after advancing, and pass silently on the next fetch."""
    _publish(service, tmp_path, "run-a", genuine["run-a"].read_bytes())
    document = json.loads(genuine["run-b"].read_text())
    document["result"] = "DEEP"
    deep = json.dumps(document).replace('"DEEP"', '{"a":' * 900 + "1" + "}" * 900).encode()
    digest = "sha256:" + hashlib.sha256(deep).hexdigest()
    entry = LogEntry(tenant="acme", run_id="run-b", envelope=digest).to_bytes()
    request = AppendRequest("acme", digest, deep, "run-b", PartShape("unsharded", None), entry)
    service.app_service.log.submit(request).result(timeout=10)
    expected = str(genuine["expected"])
    capsys.readouterr()
    assert _fetch(service, tmp_path, "--expected", expected) == 4
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[1].startswith(f"run run-a (log index 0): {SIMULATED}")
    assert lines[2:] == [
        "run run-b (log index 1): NOT VERIFIED: malformed (exit 1)",
        (
            "    FAILED envelope.parse [malformed]: envelope nests arrays and objects deeper "
            f"than {MAX_ENVELOPE_JSON_DEPTH} levels (refused before parsing)"
        ),
        f"1 of 2 new envelope(s) verified against --expected {expected}",
    ]
    assert "Traceback" not in captured.err
    assert _unjudged(tmp_path) is None  # every envelope has its verdict
    assert (tmp_path / "store" / "envelopes" / f"sha256-{digest[7:]}.json").read_bytes() == deep
    # It was judged: the next fetch has nothing new to judge.
    assert _fetch(service, tmp_path, "--expected", expected) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"0 of 0 new envelope(s) verified against --expected {expected}"
    )
