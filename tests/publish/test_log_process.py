"""The log in a process of its own (``runner.service.log.process``), as ``serve`` runs it:
the same answers as in one process, the fork guard's refusals and every failure carried
across, and a child that never outlives or half-stops its service."""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from attestation.transparency.checkpoint import CheckpointError, verify_signed_checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, verify_consistency, verify_inclusion
from runner.errors import LogProcessStartError
from runner.exit_codes import exit_code_for
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.heads import JOURNAL_FILE, JournalError
from runner.service.log.process import (
    MAX_FRAME_BYTES,
    LogProcess,
    LogProcessLostError,
    LogProcessSpec,
    _Channel,
    _portable,
    _ProtocolError,
)
from runner.service.log.sequencer import (
    AppendRequest,
    LogRefusedError,
    Outcome,
    ProofRangeError,
    Receipt,
)
from runner.service.log.shard_sets import PartShape
from runner.service.log.storage import (
    PostgresStorage,
    SqliteStorage,
    Storage,
    StorageFullError,
    StorageUnavailableError,
)
from tests.publish.conftest import (
    LOG_NAME,
    free_port,
    make_envelope,
    serve_command,
    serve_process,
    sha256_name,
)
from tests.publish.test_fork_guard import _sql

TENANT = "acme"


def location(storage: Storage) -> str:
    if isinstance(storage, SqliteStorage):
        return str(storage.path)
    assert isinstance(storage, PostgresStorage)
    return storage.dsn


def request_for(run_id: str, seed: int = 0, padding: int = 0) -> AppendRequest:
    """``padding``: trailing spaces, as in an envelope written with indentation."""
    data = make_envelope(TENANT, run_id, seed) + b" " * padding
    digest = sha256_name(data)
    entry = LogEntry(tenant=TENANT, run_id=run_id, envelope=digest).to_bytes()
    return AppendRequest(TENANT, digest, data, run_id, PartShape("unsharded", None), entry)


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, CheckpointSigner]:
    path = tmp_path / "log-signing-key.pem"
    return path, CheckpointSigner.load_or_create(LOG_NAME, path, create=True)


@pytest.fixture
def spec(storage: Storage, tmp_path: Path, key: tuple[Path, CheckpointSigner]) -> LogProcessSpec:
    path, signer = key
    return LogProcessSpec(
        storage_location=location(storage),
        sqlite_synchronous="FULL",
        signing_key=path,
        key_id=signer.verifier_key.key_id,
        log_name=LOG_NAME,
        journal=tmp_path / JOURNAL_FILE,
        adopt_database_heads=False,
        log_level="warning",
    )


@pytest.fixture
def running(spec: LogProcessSpec) -> Iterator[LogProcess]:
    log = LogProcess(spec)
    log.start()
    try:
        yield log
    finally:
        log.stop()


def child_pid(log: LogProcess) -> int:
    assert log._process is not None
    return log._process.pid


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        status = Path(f"/proc/{pid}/status")
        if status.exists() and "State:\tZ" in status.read_text():
            return True  # dead, waiting for its parent to reap it
        time.sleep(0.02)
    return False


def test_receipts_and_proofs_cross_the_process(
    running: LogProcess, key: tuple[Path, CheckpointSigner]
) -> None:
    verifier = key[1].verifier_key
    requests_ = [request_for(f"run-{i}", seed=i) for i in range(5)]
    futures = [running.submit(r) for r in requests_]
    receipts = [f.result(timeout=30) for f in futures]
    assert [r.outcome for r in receipts] == [Outcome.CREATED] * 5
    assert sorted(r.log_index for r in receipts if r.log_index is not None) == [0, 1, 2, 3, 4]
    for request, receipt in zip(requests_, receipts, strict=True):
        assert receipt.head is not None
        assert receipt.log_index is not None
        checkpoint = verify_signed_checkpoint(
            receipt.head.note, verifier, origin=f"{LOG_NAME}/t/{TENANT}"
        )
        assert verify_inclusion(
            leaf_hash(request.entry),
            receipt.log_index,
            checkpoint.size,
            receipt.inclusion_proof,
            checkpoint.root,
        )
        assert receipt.run_digest == request.digest

    head = running.signed_head(TENANT)
    assert head.size == 5
    first = next(r for r in receipts if r.log_index == 0)
    assert first.head is not None
    proof = running.consistency_proof(TENANT, first.head.size, 5)
    assert verify_consistency(
        first.head.size, 5, proof, first.head.checkpoint.root, head.checkpoint.root
    )
    index_of_run_2 = receipts[2].log_index
    assert index_of_run_2 is not None
    assert running.inclusion_proof(TENANT, index_of_run_2, 5) == list(
        running.submit(requests_[2]).result(timeout=30).inclusion_proof
    )

    again = running.submit(requests_[0]).result(timeout=30)
    assert (again.outcome, again.log_index) == (Outcome.PRESENT, receipts[0].log_index)
    other = running.submit(request_for("run-0", seed=99)).result(timeout=30)
    assert other == Receipt(Outcome.RUN_CONFLICT, None, run_digest=requests_[0].digest)
    assert running.signed_head(TENANT).size == 5  # the refused replacement was not logged


def test_a_proof_beyond_the_signed_head_raises_its_size(running: LogProcess) -> None:
    running.submit(request_for("run-0")).result(timeout=30)
    with pytest.raises(ProofRangeError) as raised:
        running.inclusion_proof(TENANT, 0, 2)
    assert raised.value.head_size == 1
    with pytest.raises(ProofRangeError) as raised:
        running.consistency_proof(TENANT, 1, 3)
    assert raised.value.head_size == 1


def test_stop_integrates_and_answers_what_is_queued(spec: LogProcessSpec, storage: Storage) -> None:
    log = LogProcess(spec)
    log.start()
    futures = [log.submit(request_for(f"run-{i}", seed=i)) for i in range(40)]
    log.stop()
    outcomes = [f.result(timeout=0) for f in futures]  # all done once stop returns
    assert {r.outcome for r in outcomes} == {Outcome.CREATED}
    assert len(storage.log_entries(TENANT, 0, 100)) == 40
    later = log.submit(request_for("late"))
    assert isinstance(later.exception(timeout=0), StorageUnavailableError)


def test_a_store_rolled_back_is_refused_at_start_and_for_every_call(
    spec: LogProcessSpec, storage: Storage
) -> None:
    log = LogProcess(spec)
    log.start()
    for i in range(3):
        log.submit(request_for(f"run-{i}", seed=i)).result(timeout=30)
    log.stop()
    _sql(storage, "DELETE FROM log_entries WHERE tenant = 'acme' AND log_index >= 1")

    log = LogProcess(spec)
    log.start()
    try:
        reason = log.refusals()[TENANT]
        assert "log entry 1 is missing from the store" in reason or "were lost" in reason
        with pytest.raises(LogRefusedError) as raised:
            log.submit(request_for("run-9", seed=9)).result(timeout=30)
        assert (raised.value.tenant, raised.value.reason) == (TENANT, reason)
        with pytest.raises(LogRefusedError):
            log.signed_head(TENANT)
    finally:
        log.stop()


def test_rows_deleted_under_a_running_log_process_are_refused(
    running: LogProcess, storage: Storage
) -> None:
    for i in range(3):
        running.submit(request_for(f"run-{i}", seed=i)).result(timeout=30)
    assert running.refusals() == {}
    _sql(storage, "DELETE FROM log_entries WHERE tenant = 'acme' AND log_index = 2")
    with pytest.raises(LogRefusedError) as raised:
        running.signed_head(TENANT)
    assert raised.value.reason == (
        "the store holds 2 entries but the service had integrated 3: signed entries were "
        "lost (a restored backup, a lagging replica, a DELETE)"
    )
    assert running.refusals() == {TENANT: raised.value.reason}


def test_a_corrupt_journal_stops_start_with_the_journal_error(spec: LogProcessSpec) -> None:
    spec.journal.write_text('{"note": "not a signed note"}\n{"note": "x"}\n')
    log = LogProcess(spec)
    with pytest.raises(JournalError, match=f"{spec.journal} line 1 is not a head signed"):
        log.start()
    assert log._process is None  # the child is gone, nothing is left running


def test_a_key_file_that_changed_since_the_service_read_it_stops_start(
    spec: LogProcessSpec,
) -> None:
    changed = dataclasses.replace(spec, key_id=bytes(4))
    with pytest.raises(CheckpointError, match="changed while the service was starting"):
        LogProcess(changed).start()


def test_a_killed_log_process_fails_what_is_pending_and_every_later_call(
    spec: LogProcessSpec,
) -> None:
    lost = threading.Event()
    messages: list[str] = []

    def on_lost(message: str) -> None:
        messages.append(message)
        lost.set()

    log = LogProcess(spec, on_lost=on_lost)
    log.start()
    try:
        log.submit(request_for("run-0")).result(timeout=30)
        os.kill(child_pid(log), signal.SIGKILL)
        assert lost.wait(timeout=10)
        assert messages == ["the log process exited (status -9); restart the service"]
        with pytest.raises(LogProcessLostError, match=r"exited \(status -9\)"):
            log.submit(request_for("run-1")).result(timeout=5)
        with pytest.raises(LogProcessLostError):
            log.signed_head(TENANT)
        assert issubclass(LogProcessLostError, StorageUnavailableError)  # a 503 to clients
    finally:
        log.stop()


def test_the_log_process_ignores_sigint_and_sigterm(running: LogProcess) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        os.kill(child_pid(running), sig)
    time.sleep(0.2)
    assert running.submit(request_for("run-0")).result(timeout=30).outcome is Outcome.CREATED


def test_the_log_process_dies_with_its_parent(spec: LogProcessSpec, tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.pickle"
    spec_file.write_bytes(pickle.dumps(spec))
    script = textwrap.dedent(
        f"""
        import os, pickle, signal
        from runner.service.log.process import LogProcess
        log = LogProcess(pickle.loads(open({str(spec_file)!r}, "rb").read()))
        log.start()
        print(log._process.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    parent = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    assert wait_gone(int(parent.stdout.strip()))


def test_a_frame_over_the_bound_is_refused_before_it_is_read() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(struct.pack(">I", MAX_FRAME_BYTES + 1))
        with pytest.raises(_ProtocolError, match=f"a frame of {MAX_FRAME_BYTES + 1} bytes"):
            _Channel(ours).receive()


def test_a_frame_cut_short_by_a_closed_socket_is_a_protocol_error() -> None:
    ours, theirs = socket.socketpair()
    with ours:
        data = pickle.dumps(("stop",))
        theirs.sendall(struct.pack(">I", len(data)) + data[:-1])
        theirs.close()
        with pytest.raises(_ProtocolError, match="closed in the middle of a frame"):
            _Channel(ours).receive()


def test_receive_ready_returns_the_complete_frames_without_waiting() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        sender, receiver = _Channel(theirs), _Channel(ours)
        sender.send(("a", 1))
        sender.send(("b", 2))
        data = pickle.dumps(("c", 3))
        theirs.sendall(struct.pack(">I", len(data)) + data[:3])  # a frame still arriving
        time.sleep(0.05)
        assert receiver.receive_ready() == [("a", 1), ("b", 2)]
        theirs.sendall(data[3:])
        assert receiver.receive() == ("c", 3)
        theirs.shutdown(socket.SHUT_WR)
        assert receiver.receive() is None


class _UnpicklableError(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = threading.Lock()


def test_errors_cross_as_what_the_service_maps_them_to() -> None:
    full = StorageFullError("the disk is full")
    assert _portable(full) is full
    refused = pickle.loads(pickle.dumps(LogRefusedError(TENANT, "a fork")))
    assert (type(refused), refused.tenant, refused.reason) == (LogRefusedError, TENANT, "a fork")
    described = _portable(_UnpicklableError())
    assert (type(described), str(described)) == (RuntimeError, "_UnpicklableError: holds a lock")


def _child_of(pid: int) -> int:
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if f"\nPPid:\t{pid}\n" in text:
            return int(status.parent.name)
    raise AssertionError(f"process {pid} has no child")


def test_serve_exits_9_when_its_log_process_dies(tmp_path: Path) -> None:
    with serve_process(str(tmp_path / "publish.sqlite3"), tmp_path / "state") as server:
        os.kill(_child_of(server.process.pid), signal.SIGKILL)
        assert server.process.wait(timeout=30) == 9
        output = server.output()
    assert "log_process_lost" in output
    assert "error: the log process exited (status -9); restart the service" in output


def test_kill_9_of_serve_takes_its_log_process_with_it(tmp_path: Path) -> None:
    with serve_process(str(tmp_path / "publish.sqlite3"), tmp_path / "state") as server:
        child = _child_of(server.process.pid)
        server.process.kill()
        server.process.wait()
        assert wait_gone(child)


def test_the_child_asks_the_kernel_for_sigkill_when_its_parent_exits() -> None:
    script = textwrap.dedent(
        """
        import ctypes, os
        from runner.service.log.process import _die_with_parent
        _die_with_parent(os.getppid())
        signal_number = ctypes.c_int()
        ctypes.CDLL(None).prctl(2, ctypes.byref(signal_number), 0, 0, 0)  # PR_GET_PDEATHSIG
        print(signal_number.value)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == str(int(signal.SIGKILL))


def test_submitting_never_waits_for_a_child_that_reads_nothing(running: LogProcess) -> None:
    """The event loop submits; while the child integrates a batch it reads nothing, and more
    envelopes than the socket's buffer holds must still be queued without waiting."""
    padded = [request_for(f"run-{i}", seed=i, padding=16_000) for i in range(200)]
    os.kill(child_pid(running), signal.SIGSTOP)
    futures: list[Future[Receipt]] = []
    try:
        submitter = threading.Thread(target=lambda: futures.extend(map(running.submit, padded)))
        submitter.start()
        submitter.join(timeout=20)
        assert not submitter.is_alive()  # 3.6 MB queued while the child was stopped
        assert not any(f.done() for f in futures)
    finally:
        os.kill(child_pid(running), signal.SIGCONT)
    results = [f.result(timeout=60) for f in futures]
    assert [r.outcome for r in results] == [Outcome.CREATED] * 200


def test_an_answer_to_no_pending_call_is_a_protocol_error(spec: LogProcessSpec) -> None:
    with pytest.raises(_ProtocolError, match="an answer to no pending call"):
        LogProcess(spec)._dispatch(("results", [(7, True, None)]))


def _not_executable(tmp_path: Path) -> Path:
    """An interpreter path the service's user cannot execute (no execute bit: even root's
    exec needs one)."""
    path = tmp_path / "bin" / "python3"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\n")
    path.chmod(0o644)
    return path


def test_a_log_process_that_cannot_start_is_a_startup_error(
    spec: LogProcessSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interpreter = _not_executable(tmp_path)
    monkeypatch.setattr(sys, "executable", str(interpreter))
    with pytest.raises(LogProcessStartError) as caught:
        LogProcess(spec).start()
    assert str(caught.value) == (
        f"cannot start the publication log's process ({interpreter} -m "
        f"runner.service.log.process): Permission denied: {interpreter}"
    )
    assert exit_code_for(caught.value) == 9


def test_serve_whose_log_process_cannot_start_exits_9_naming_why(tmp_path: Path) -> None:
    """``serve`` in a real process whose interpreter path, as its log process would use it,
    is not executable: exit 9 with the reason, no traceback."""
    interpreter = _not_executable(tmp_path)
    port = free_port()
    argv = serve_command(str(tmp_path / "publish.sqlite3"), tmp_path / "state", port)[3:]
    script = (
        "import sys\n"
        f"sys.executable = {str(interpreter)!r}\n"
        "from runner.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 9, done.stderr
    assert done.stderr.endswith(
        f"error: cannot start the publication log's process ({interpreter} -m "
        f"runner.service.log.process): Permission denied: {interpreter}\n"
    )
    assert "Traceback" not in done.stderr
