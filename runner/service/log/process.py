"""The publication log in a process of its own: how ``serve`` runs it.

In one process the event loop (HTTP, the envelope checks, the answers) and the sequencer
(SQLite, the Merkle trees, signing) take turns on one interpreter lock. At 8 publishers the
sequencer waited about 1.2 ms of each 2.6 ms batch for the event loop to let go of it
(``docs/publishing.md``, "The log in a process of its own"); in a process of its own it waits
only for its fsyncs. Trillian splits its log the same way: a log server answers the API, a
log signer sequences and signs.

:class:`LogProcess`, in ``serve``'s process, is a :class:`runner.service.log.sequencer.Log` that
forwards every call to the child process, which runs a
:class:`~runner.service.log.sequencer.PublicationLog` over its own connection to the same
database, the head journal and the log key. The batches, the fork guard and the signing are the
ones the tests exercise in one process.

The wire: frames of a 4-byte big-endian length and a pickle, over a Unix socket pair made
before the child starts (its end is the child's only inherited descriptor besides stdio).
Both ends are this module; nothing else holds the socket. The first frame is the
:class:`LogProcessSpec` (a PostgreSQL DSN may hold a password: never on a command line).

Lifecycle:

* :meth:`LogProcess.start` starts ``python -m runner.service.log.process`` (a fresh
  interpreter: no inherited database connection or event loop). The child opens the storage,
  the journal and the key, checks every tenant's log (``PublicationLog.start``) and answers
  with the refused logs, or with the exception that stopped it, which ``start`` raises.
* The child dies with the thread that started it (Linux ``PR_SET_PDEATHSIG``): a ``kill -9``
  of ``serve`` stops both, as it stopped the one process. It ignores SIGINT and SIGTERM (a
  Ctrl-C reaches the whole process group, systemd signals the whole control group):
  :meth:`LogProcess.stop` has it integrate what is queued, close its storage (SQLite moves
  the WAL into the database) and exit.
* If the child exits on its own, every pending and later call fails with
  :class:`LogProcessLostError` (503) and ``on_lost`` is called: ``serve`` stops and exits 9
  for its supervisor to start it again.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import itertools
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from attestation.contracts import MAX_ENVELOPE_BYTES
from attestation.transparency.checkpoint import CheckpointError
from runner.errors import LogProcessStartError
from runner.log import configure_logging
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.heads import HeadJournal, SignedHead
from runner.service.log.sequencer import (
    AppendRequest,
    PublicationLog,
    Receipt,
    ShuttingDownError,
)
from runner.service.log.storage import (
    Storage,
    StorageUnavailableError,
    classify_database_error,
    open_storage,
)

log = structlog.get_logger("attested-replay.serve")

_LENGTH: Final = struct.Struct(">I")
#: The largest frame either end accepts: one envelope and its request, with room to spare.
MAX_FRAME_BYTES: Final = MAX_ENVELOPE_BYTES + 1024 * 1024
#: Reads (checkpoints, proofs) the child answers at once, beside the sequencer.
_READ_THREADS: Final = 4
_COMPACT_AFTER_BYTES: Final = 1024 * 1024
_PR_SET_PDEATHSIG: Final = 1


class LogProcessLostError(StorageUnavailableError):
    """The log's process exited: nothing more is integrated until ``serve`` is restarted."""


class _ProtocolError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class LogProcessSpec:
    """What the child needs to run the log ``serve`` would run in its own process."""

    storage_location: str  # SQLite path or postgresql:// DSN
    sqlite_synchronous: str
    signing_key: Path
    key_id: bytes  # the parent's: the child refuses a key file that changed meanwhile
    log_name: str
    journal: Path
    adopt_database_heads: bool
    log_level: str


class _Channel:
    """Length-prefixed pickles over a stream socket; ``send`` from any thread."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()
        self._buffer = bytearray()
        self._start = 0  # where the first frame not yet taken begins in ``_buffer``
        self._closed = False  # the other end closed: what is buffered is all there is

    @staticmethod
    def frame(message: tuple[Any, ...]) -> bytes:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        return _LENGTH.pack(len(data)) + data

    def send(self, message: tuple[Any, ...]) -> None:
        self.send_frames(self.frame(message))

    def send_frames(self, frames: bytes) -> None:
        with self._send_lock:
            self._sock.sendall(frames)

    def send_now(self, frames: bytes) -> int:
        """Send what the socket takes without waiting; how many bytes that was."""
        with self._send_lock:
            try:
                return self._sock.send(frames, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return 0

    def receive(self) -> tuple[Any, ...] | None:
        """The next message, or None once the other end closed (between frames)."""
        while (message := self._buffered()) is None:
            if self._closed or not self._read(0):
                if len(self._buffer) > self._start:
                    raise _ProtocolError("the other end closed in the middle of a frame")
                return None
        return message

    def receive_ready(self) -> list[tuple[Any, ...]]:
        """The messages that arrived complete so far, without waiting for more."""
        while not self._closed:
            try:
                if not self._read(socket.MSG_DONTWAIT):
                    break
            except BlockingIOError:
                break
        messages = []
        while (message := self._buffered()) is not None:
            messages.append(message)
        return messages

    def _read(self, flags: int) -> bool:
        chunk = self._sock.recv(65536, flags)
        if not chunk:
            self._closed = True
        self._buffer += chunk
        return bool(chunk)

    def _buffered(self) -> tuple[Any, ...] | None:
        buffer, start = self._buffer, self._start
        if len(buffer) - start < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(buffer, start)
        if length > MAX_FRAME_BYTES:
            raise _ProtocolError(f"a frame of {length} bytes is over the bound")
        end = start + _LENGTH.size + length
        if len(buffer) < end:
            return None
        message = pickle.loads(buffer[start + _LENGTH.size : end])  # noqa: S301 - our own process's
        # Taken frames are cut off once the buffer is drained, or past a mebibyte: not one
        # move of everything behind each frame while a batch's requests are read.
        if end == len(buffer):
            buffer.clear()
            end = 0
        elif end > _COMPACT_AFTER_BYTES:
            del buffer[:end]
            end = 0
        self._start = end
        if not isinstance(message, tuple) or not message:
            raise _ProtocolError(f"not a message: {type(message).__name__}")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


class _Outbox:
    """Frames for the child, never waiting for it: the service's event loop sends a request
    and goes on, also while the child integrates a batch and reads nothing and the socket's
    buffer (about 200 KB: a dozen envelopes) is full. What the socket does not take at once
    is sent, in order, by a thread of its own."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._frames: list[bytes] = []
        self._wake = threading.Condition()
        self._sending = False  # the thread is sending what it took from ``_frames``
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="log-process-writer", daemon=True)
        self._thread.start()

    def put(self, message: tuple[Any, ...]) -> None:
        frame = _Channel.frame(message)
        with self._wake:
            if self._closed:
                return
            if not self._frames and not self._sending:  # nothing ahead of it: send it now
                try:
                    sent = self._channel.send_now(frame)
                except OSError:  # the child is gone: the reader fails what is pending
                    self._closed = True
                    return
                if sent == len(frame):
                    return
                frame = frame[sent:]
            self._frames.append(frame)
            self._wake.notify()

    def close(self) -> None:
        """Send what is queued, then stop the thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._frames and not self._closed:
                    self._wake.wait()
                if not self._frames:
                    return
                frames, self._frames = self._frames, []
                self._sending = True
            try:
                self._channel.send_frames(b"".join(frames))
            except OSError:  # the child is gone: the reader fails what is pending
                with self._wake:
                    self._closed = True
                    self._frames.clear()
                return
            with self._wake:
                self._sending = False


def _portable(exc: BaseException) -> BaseException:
    """``exc`` as the other process can raise it: a database driver's error as the storage
    fault it is, anything that does not survive pickling as a RuntimeError naming it."""
    fault = classify_database_error(exc)
    if fault is not None:
        return fault
    try:
        pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
    except Exception:  # noqa: BLE001 - any failure means: send a description instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


# -- the service's side -----------------------------------------------------------------------


class LogProcess:
    """A :class:`runner.service.log.sequencer.Log` whose :class:`PublicationLog` runs in a child
    process.

    ``on_lost(message)`` is called (in a thread of this class) when the child exits without
    being asked to."""

    def __init__(
        self, spec: LogProcessSpec, *, on_lost: Callable[[str], None] | None = None
    ) -> None:
        self._spec = spec
        self._on_lost = on_lost
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: _Channel | None = None
        self._outbox: _Outbox | None = None
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending: dict[int, Future[Any]] = {}
        self._numbers = itertools.count()
        self._refused: dict[str, str] = {}
        self._lost: str | None = None
        self._stopping = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the child and wait until it has checked every tenant's log.

        Raises:
            the exception that stopped the child (a storage fault, a corrupt journal, a
            missing or changed key), or LogProcessLostError if it exited without one.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = subprocess.Popen(  # noqa: S603 - this interpreter, this module
                [sys.executable, "-m", __name__, "--fd", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            ours.close()
            raise LogProcessStartError(
                f"cannot start the publication log's process ({sys.executable} -m {__name__}): "
                f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
            ) from exc
        finally:
            theirs.close()
        channel = self._channel = _Channel(ours)
        try:
            self._handshake(channel, self._process)
        except BaseException:
            channel.close()
            self._process.kill()
            self._process.wait()
            self._process = None
            raise
        self._outbox = _Outbox(channel)
        self._reader = threading.Thread(target=self._receive, name="log-process", daemon=True)
        self._reader.start()

    def _handshake(self, channel: _Channel, process: subprocess.Popen[bytes]) -> None:
        channel.send(("spec", self._spec))
        while (message := channel.receive()) is not None:
            if message[0] == "refused":
                self._refused[message[1]] = message[2]
            elif message[0] == "ready":
                self._refused.update(message[1])
                return
            elif message[0] == "failed":
                raise message[1]
            else:
                raise _ProtocolError(f"unexpected message {message[0]!r} while starting")
        raise LogProcessLostError(
            f"the log process exited while starting (status {process.wait()})"
        )

    def stop(self) -> None:
        """Have the child integrate what is queued, close its storage and exit; wait for it."""
        process, channel, outbox = self._process, self._channel, self._outbox
        if process is None or channel is None or outbox is None:
            return
        with self._lock:
            self._stopping = True
        outbox.put(("stop",))
        outbox.close()
        process.wait()
        if self._reader is not None:
            self._reader.join()
        channel.close()
        self._process = self._channel = self._outbox = self._reader = None

    # -- the log ---------------------------------------------------------------------------

    def submit(self, request: AppendRequest) -> Future[Receipt]:
        future: Future[Receipt] = Future()
        self._call(future, "submit", request)
        return future

    def refusals(self) -> dict[str, str]:
        with self._lock:
            return dict(self._refused)

    def signed_head(self, tenant: str) -> SignedHead:
        head: SignedHead = self._wait("head", tenant)
        return head

    def inclusion_proof(self, tenant: str, index: int, size: int) -> list[bytes]:
        proof: list[bytes] = self._wait("inclusion", tenant, index, size)
        return proof

    def consistency_proof(self, tenant: str, old_size: int, new_size: int) -> list[bytes]:
        proof: list[bytes] = self._wait("consistency", tenant, old_size, new_size)
        return proof

    def tile(self, tenant: str, level: int, index: int, width: int) -> list[bytes]:
        hashes: list[bytes] = self._wait("tile", tenant, level, index, width)
        return hashes

    # -- the wire --------------------------------------------------------------------------

    def _wait(self, kind: str, *arguments: object) -> Any:  # noqa: ANN401 - the child's answer
        future: Future[Any] = Future()
        self._call(future, kind, *arguments)
        return future.result()

    def _call(self, future: Future[Any], kind: str, *arguments: object) -> None:
        with self._lock:
            failure, outbox = self._failure(), self._outbox
            if failure is None:
                number = next(self._numbers)
                self._pending[number] = future
        if failure is not None or outbox is None:
            future.set_exception(failure or ShuttingDownError("the service is shutting down"))
            return
        # Dropped if the child is gone or stopping: the reader then fails what is pending.
        outbox.put((kind, number, *arguments))

    def _failure(self) -> StorageUnavailableError | None:
        if self._lost is not None:
            return LogProcessLostError(self._lost)
        if self._stopping or self._outbox is None:
            return ShuttingDownError("the service is shutting down")
        return None

    def _receive(self) -> None:
        assert self._channel is not None
        assert self._process is not None
        try:
            while (message := self._channel.receive()) is not None and message[0] != "stopped":
                self._dispatch(message)
        except (OSError, _ProtocolError, pickle.UnpicklingError) as exc:
            log.error(  # noqa: TRY400 - the parent's side of a broken pipe: no traceback needed
                "log_process_channel_broken", error=f"{type(exc).__name__}: {exc}"
            )
            self._process.kill()  # nothing it says can be read any more
        status = self._process.wait()
        with self._lock:
            pending, self._pending = self._pending, {}
            stopping = self._stopping
            if not stopping:
                self._lost = f"the log process exited (status {status}); restart the service"
        for future in pending.values():
            future.set_exception(self._failure() or ShuttingDownError("stopped"))
        if not stopping:
            log.error("log_process_lost", error=self._lost)
            if self._on_lost is not None:
                self._on_lost(str(self._lost))

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        if message[0] == "refused":
            with self._lock:
                self._refused[message[1]] = message[2]
            return
        if message[0] == "result":
            answers = [message[1:]]
        elif message[0] == "results":
            answers = message[1]
        else:
            raise _ProtocolError(f"unexpected message {message[0]!r}")
        with self._lock:
            futures = [self._pending.pop(number, None) for number, _ok, _value in answers]
        if None in futures:
            raise _ProtocolError("an answer to no pending call")
        for future, (_number, ok, value) in zip(futures, answers, strict=True):
            assert future is not None
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


# -- the child ------------------------------------------------------------------------------


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the thread that started this process exits (Linux only; elsewhere the
    closed socket stops the child after its current batch)."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the call above
        os._exit(1)


def _open_log(spec: LogProcessSpec, channel: _Channel) -> tuple[Storage, PublicationLog]:
    signer = CheckpointSigner.load_or_create(spec.log_name, spec.signing_key, create=False)
    if signer.verifier_key.key_id != spec.key_id:
        raise CheckpointError(
            f"log signing key {spec.signing_key} changed while the service was starting"
        )
    storage = open_storage(spec.storage_location, sqlite_synchronous=spec.sqlite_synchronous)
    publication_log = PublicationLog(
        storage,
        signer,
        HeadJournal(spec.journal, signer.verifier_key),
        log_name=spec.log_name,
        adopt_database_heads=spec.adopt_database_heads,
        on_refused=lambda tenant, reason: channel.send(("refused", tenant, reason)),
    )
    try:
        publication_log.start(sequencer_thread=False)
    except BaseException:
        storage.close()
        raise
    return storage, publication_log


def _answer(number: int, future: Future[Any]) -> tuple[int, bool, object]:
    error = future.exception()
    if error is None:
        return number, True, future.result()
    return number, False, _portable(error)


def _send_answer(channel: _Channel, number: int, future: Future[Any]) -> None:
    channel.send(("result", *_answer(number, future)))


def _read(publication_log: PublicationLog, kind: str, arguments: tuple[Any, ...]) -> object:
    if kind == "head":
        return publication_log.signed_head(*arguments)
    if kind == "inclusion":
        return publication_log.inclusion_proof(*arguments)
    if kind == "tile":
        return publication_log.tile(*arguments)
    return publication_log.consistency_proof(*arguments)


def _serve_requests(channel: _Channel, publication_log: PublicationLog) -> None:
    """Until the parent asks to stop or goes away. This thread is the sequencer: what
    arrived while it integrated the last batch is the next one (group commit), answered
    in one frame."""
    with ThreadPoolExecutor(_READ_THREADS, thread_name_prefix="log-read") as reads:
        while (first := channel.receive()) is not None:
            numbers, requests, stop = [], [], False
            for message in [first, *channel.receive_ready()]:
                kind = message[0]
                if kind == "stop":
                    stop = True
                elif kind == "submit":
                    numbers.append(message[1])
                    requests.append(message[2])
                elif kind in ("head", "inclusion", "consistency", "tile"):
                    read = reads.submit(_read, publication_log, kind, message[2:])
                    read.add_done_callback(functools.partial(_send_answer, channel, message[1]))
                else:
                    raise _ProtocolError(f"unexpected message {kind!r}")
            if requests:
                done = publication_log.integrate(requests)
                channel.send(("results", list(map(_answer, numbers, done))))
            if stop:
                return


def child_main(fd: int) -> int:
    """The child: the log over its own storage, answering the parent on socket ``fd``."""
    _die_with_parent(os.getppid())
    for ignored in (signal.SIGINT, signal.SIGTERM):
        signal.signal(ignored, signal.SIG_IGN)
    channel = _Channel(socket.socket(fileno=fd))
    message = channel.receive()
    if message is None or message[0] != "spec" or not isinstance(message[1], LogProcessSpec):
        return 2
    spec: LogProcessSpec = message[1]
    configure_logging(level=spec.log_level)
    try:
        storage, publication_log = _open_log(spec, channel)  # without a sequencer thread
    except Exception as exc:  # noqa: BLE001 - the parent raises it
        channel.send(("failed", _portable(exc)))
        return 1
    channel.send(("ready", publication_log.refusals()))
    try:
        _serve_requests(channel, publication_log)
    finally:
        storage.close()
    with contextlib.suppress(OSError):
        channel.send(("stopped",))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description="The publication log's process (serve starts it).")
    parser.add_argument("--fd", type=int, required=True)
    sys.exit(child_main(parser.parse_args().fd))


if __name__ == "__main__":
    # Run the imported module's code, not this ``__main__`` copy: the classes the parent
    # pickles are ``runner.service.log.process``'s.
    from runner.service.log.process import main as imported_main

    imported_main()
