"""Tenant side: download new envelopes and prove the log only grew: the IO and the worker
pool around the log-following rules of :class:`~attestation.tenant.log_state.TrustedLogState`.

State kept in the output directory (each file written atomically, the checkpoint last):
``log-key.pub`` (the pinned verifier key), ``checkpoint`` (the last verified signed note),
``envelopes/sha256-<hex>.json`` (exact bytes), ``index.json`` (log index -> digest, run,
shard) and, once witnesses are required, ``witnesses.json`` (their keys and threshold).

Each fetch verifies the new checkpoint's signature with the pinned key (and, with pinned
witnesses, takes the latest cosigned checkpoint and requires their cosignatures: a split view
then needs the witnesses' collusion), then proves with one
computation that the new tree extends the kept one and holds every new entry: the right edge
of the kept tree (read from the log's C2SP tlog-tiles hash tiles, :mod:`attestation.tenant.tlog`,
and giving the kept root) extended with the new entries (from its entry bundles) must give the new
signed root (:class:`CompactRange`). Any failure is tampering. So
is a log holding two envelopes for one run (or one shard of a run): the service never logs a
replacement, so a second one means the operator rewrote which envelope a run has; and a run
whose merged envelope holds other shards than the log's shard envelopes of it
(:mod:`attestation.tenant.logged_shards`).
Envelopes are downloaded in bundles (the envelopes of up to ``BUNDLE`` consecutive entries
in one request, ``GET .../log/envelopes``), ``jobs`` requests at a time, by ``jobs`` worker
processes when the fetch is large enough to pay for starting them (else by threads of this
process); each envelope is checked against its entry and written atomically by the worker
that downloaded it; the directory is synced once per page, and the index and checkpoint
follow only when every envelope is stored. A service without the bundle route is asked for
each envelope on its own. A worker process that dies is :class:`FetchWorkerError`, never a
completed fetch.
"""

from __future__ import annotations

import binascii
import contextlib
import json
import multiprocessing
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any, ClassVar, Final

import structlog

from attestation.contracts import MAX_ENVELOPE_BYTES
from attestation.tenant.errors import (
    FetchWorkerError,
    ServiceUnavailableError,
    TamperingError,
    TenantInputError,
    TenantUsageError,
)
from attestation.tenant.fsutil import (
    atomic_write,
    atomic_write_text,
    fsync_directory,
    remove_temporaries,
)
from attestation.tenant.http import (
    Answer,
    AnswerTooLargeError,
    HttpClient,
    HttpError,
    HttpRefusedError,
    Limits,
    RetryPolicy,
    check_url,
)
from attestation.tenant.log_state import (
    PositionedEntry,
    TrustedLogState,
    WitnessPolicy,
    checked_envelope,
    envelope_gone,
    envelope_too_large,
)
from attestation.tenant.tlog import LogTiles
from attestation.tenant.unjudged import load_unjudged, record_unjudged
from attestation.transparency.checkpoint import (
    ED25519_ALGORITHM,
    Checkpoint,
    CheckpointError,
    VerifierKey,
)
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import CompactRange

log = structlog.get_logger("attested-replay.tenant")

PAGE = 1000
#: Entries whose envelopes one request asks for (the service may answer fewer: it bounds an
#: answer's bytes, and the rest is asked for again).
BUNDLE: Final = 64
#: Requests at once by default (``tenant fetch --jobs``), and the most allowed.
DEFAULT_JOBS: Final = 8
MAX_JOBS: Final = 64
#: The witnesses pinned by a fetch with --witness-key (their keys and threshold), in --out.
WITNESSES_FILE: Final = "witnesses.json"
#: From this many bundles on (and ``jobs`` above 1), the bundles are stored by ``jobs``
#: worker processes instead of threads: a process costs about 35 ms of CPU to start and
#: build its client when forked (half a second when spawned), two bundles' worth of checking.
POOL_MIN_BUNDLES: Final = 3
#: A checkpoint; an envelope (the one contracts limit). Tiles: :mod:`attestation.tenant.tlog`.
SMALL_ANSWER: Final = Limits(max_bytes=64 * 1024, deadline=60.0)
ENVELOPE_ANSWER: Final = Limits(max_bytes=MAX_ENVELOPE_BYTES, deadline=120.0)
#: A bundle: base64 of at most one maximal envelope's bytes (the service's byte bound is
#: below it, and its first envelope is always served), with room for the JSON around it.
BUNDLE_ANSWER: Final = Limits(max_bytes=MAX_ENVELOPE_BYTES * 4 // 3 + 64 * 1024, deadline=120.0)


@dataclass(frozen=True, slots=True)
class FetchReport:
    previous_size: int
    size: int
    new_envelopes: tuple[str, ...]  # digests, in log order
    out_dir: Path


def load_verifier_key(
    value: str, *, algorithm: int = ED25519_ALGORITHM, what: str = "log key"
) -> VerifierKey:
    """A verifier key (of signature type ``algorithm``) given literally or as a file."""
    text = value
    path = Path(value)
    if "+" not in value or path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TenantUsageError(f"cannot read {what} {value}: {exc}") from exc
    try:
        return VerifierKey.parse(text, algorithm=algorithm)
    except CheckpointError as exc:
        raise TenantUsageError(f"{what} {value}: {exc}") from exc


class _Api:
    def __init__(self, server: str, tenant: str, client: HttpClient) -> None:
        self.tenant = tenant
        self._base = server.rstrip("/") + f"/v1/tenants/{tenant}"
        self._client = client

    def close(self) -> None:
        """Close the client's connections (it opens new ones if used again)."""
        self._client.close()

    def get(self, path: str, limit: Limits = SMALL_ANSWER, **params: int) -> Answer:
        return self._ok(path, self._answer(path, limit, params))

    def get_or_missing(
        self, path: str, limit: Limits = SMALL_ANSWER, **params: int
    ) -> Answer | None:
        """:meth:`get`, with None for a 404."""
        answer = self._answer(path, limit, params)
        return None if answer.status == 404 else self._ok(path, answer)

    def _answer(self, path: str, limit: Limits, params: Mapping[str, int]) -> Answer:
        try:
            return self._client.get(self._base + path, params=params, limit=limit)
        except AnswerTooLargeError as exc:
            raise TamperingError(f"GET {path}: {exc}") from exc
        except HttpError as exc:
            raise ServiceUnavailableError(f"publication service unreachable: {exc}") from exc

    @staticmethod
    def _ok(path: str, answer: Answer) -> Answer:
        if answer.status != 200:
            raise ServiceUnavailableError(
                f"GET {path} answered HTTP {answer.status}: {answer.text()}"
            )
        return answer

    def envelope(self, digest: str, position: int) -> bytes:
        """The bytes of an envelope that log entry ``position`` names (already proven included).

        The log commits to the entry, so a 404 here means the envelope was removed after it
        was published: tampering, not unavailability. The download is capped while reading.
        """
        path = f"/envelopes/{digest}"
        try:
            answer = self._client.get(self._base + path, limit=ENVELOPE_ANSWER)
        except AnswerTooLargeError as exc:
            raise envelope_too_large(digest, position) from exc
        except HttpError as exc:
            raise ServiceUnavailableError(f"publication service unreachable: {exc}") from exc
        if answer.status == 404:
            raise envelope_gone(digest, position)
        if answer.status != 200:
            raise ServiceUnavailableError(f"GET {path} answered HTTP {answer.status}")
        return answer.body

    def tile(self, path: str, limit: Limits) -> bytes | None:
        """A tlog-tiles path of the log (``tile/...``), or None for a 404."""
        answer = self.get_or_missing(f"/tlog/{path}", limit)
        return None if answer is None else answer.body

    def bundle(self, start: int, end: int) -> list[bytes | None] | None:
        """The envelopes of entries ``start``, ``start + 1``, ... (at least one, at most up to
        ``end - 1``), None for one the service says is not stored; None when the service has
        no bundle route (a 404 after the checkpoint was served with the same token)."""
        path = "/log/envelopes"
        try:
            answer = self._client.get(
                self._base + path, params={"start": start, "end": end}, limit=BUNDLE_ANSWER
            )
        except AnswerTooLargeError as exc:
            raise TamperingError(
                f"the envelopes of log entries {start}..{end - 1} exceed "
                f"{BUNDLE_ANSWER.max_bytes} bytes, more than the service ever answers"
            ) from exc
        except HttpError as exc:
            raise ServiceUnavailableError(f"publication service unreachable: {exc}") from exc
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise ServiceUnavailableError(
                f"GET {path} answered HTTP {answer.status}: {answer.text()}"
            )
        try:
            body = answer.json(f"GET {path}")
        except HttpRefusedError as exc:
            raise TamperingError(f"GET {path} did not return JSON: {exc}") from exc
        served = body.get("envelopes") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or body.get("start") != start
            or not isinstance(served, list)
            or not 1 <= len(served) <= end - start
        ):
            raise TamperingError(
                f"the envelopes of log entries {start}..{end - 1} are missing from the "
                "server's answer"
            )
        bundle: list[bytes | None] = []
        for position, encoded in enumerate(served, start):
            try:
                bundle.append(None if encoded is None else decode_base64(str(encoded)))
            except (binascii.Error, ValueError) as exc:
                raise TamperingError(
                    f"the envelope of log entry {position} is malformed: {exc}"
                ) from exc
        return bundle

    def json(self, path: str, limit: Limits = SMALL_ANSWER, **params: int) -> dict[str, Any]:
        try:
            body = self.get(path, limit, **params).json(f"GET {path}")
        except HttpRefusedError as exc:
            raise TamperingError(f"GET {path} did not return JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise TamperingError(f"GET {path} did not return a JSON object")
        return body


def decode_base64(text: str) -> bytes:
    """``base64.b64decode(text, validate=True)``: the same bytes, and the same error class and
    message for anything else (padding, whitespace, characters outside the alphabet, non-ASCII
    text), without first copying ``text`` into a bytes object (an envelope's 16 KiB: some
    5 us each). Since Python 3.11 ``b64decode`` is this call after ``text.encode("ascii")``."""
    return binascii.a2b_base64(text, strict_mode=True)


def fetch_tenant(
    *,
    server: str,
    token: str,
    tenant: str,
    out_dir: Path,
    log_key: VerifierKey | None = None,
    last_checkpoint: str | None = None,
    retry: RetryPolicy | None = None,
    ca_bundle: Path | None = None,
    jobs: int = DEFAULT_JOBS,
    witnesses: WitnessPolicy | None = None,
    to_judge: bool = False,
) -> FetchReport:
    """Fetch and verify everything the log gained since the kept (or given) checkpoint,
    with up to ``jobs`` requests at once (see :func:`_store_envelopes`).

    With ``witnesses`` (or witnesses pinned in ``out_dir`` by an earlier fetch), the new
    checkpoint is the latest one the service has cosigned, and it must carry valid
    cosignatures by at least the threshold of the pinned witness keys.

    ``to_judge``: the caller verifies the new envelopes next (``--expected``): their log
    positions are listed in :data:`~attestation.tenant.unjudged.UNJUDGED_FILE` before the index and
    the checkpoint advance, and leave it only with a verdict (:mod:`attestation.tenant.unjudged`).

    Raises:
        TamperingError: the log, a checkpoint or an envelope was tampered with (the first
            failure in log order).
        FetchWorkerError: a worker process storing envelopes died; nothing is recorded.
    """
    check_url(server, what="server")
    if not 1 <= jobs <= MAX_JOBS:
        raise TenantUsageError(f"--jobs {jobs}: must be between 1 and {MAX_JOBS}")
    key = _pinned_key(out_dir, log_key)
    state = TrustedLogState(key, tenant, witnesses=_pinned_witnesses(out_dir, witnesses))
    _trust_old_checkpoint(out_dir, last_checkpoint, state)
    old = state.trusted
    state.adopt_index(_load_index(out_dir))
    remote = _Remote(server, tenant, token, retry, ca_bundle)
    with remote.client(connections=jobs) as client:
        api = _Api(server, tenant, client)
        new = state.accept_checkpoint(_new_checkpoint_note(api, state))
        entries = _proven_entries(api, state, new)
        shards = _store_envelopes(api, remote, out_dir, entries, jobs)
    note, index = state.record(shards, _StoredEnvelopes(out_dir))
    if to_judge and entries:
        record_unjudged(out_dir, [*load_unjudged(out_dir), *(position for position, _ in entries)])
    atomic_write_text(out_dir / "index.json", json.dumps(index, indent=1, sort_keys=True) + "\n")
    atomic_write_text(out_dir / "checkpoint", note)
    atomic_write_text(out_dir / "log-key.pub", key.encode() + "\n")
    if state.witnesses is not None:
        atomic_write_text(out_dir / WITNESSES_FILE, state.witnesses.to_json())
    log.info("tenant_fetched", tenant=tenant, size=new.size, new=len(entries))
    return FetchReport(
        previous_size=0 if old is None else old.size,
        size=new.size,
        new_envelopes=tuple(entry.envelope for _, entry in entries),
        out_dir=out_dir,
    )


def _pinned_key(out_dir: Path, given: VerifierKey | None) -> VerifierKey:
    stored_path = out_dir / "log-key.pub"
    stored = load_verifier_key(str(stored_path)) if stored_path.is_file() else None
    if stored is not None and given is not None and stored != given:
        raise TenantUsageError(
            f"--log-key differs from the key pinned in {stored_path}; "
            "re-pin only after checking the new key out of band (move that file away)"
        )
    key = given or stored
    if key is None:
        raise TenantUsageError("no pinned log key: pass --log-key (the key `serve` printed)")
    return key


def _pinned_witnesses(out_dir: Path, given: WitnessPolicy | None) -> WitnessPolicy | None:
    """The witnesses a checkpoint needs: given now, or pinned by an earlier fetch (the same,
    if both: the requirement is never dropped by leaving the options out)."""
    stored_path = out_dir / WITNESSES_FILE
    stored = (
        WitnessPolicy.from_json(stored_path.read_text(encoding="utf-8"), stored_path)
        if stored_path.is_file()
        else None
    )
    if stored is not None and given is not None and stored != given:
        raise TenantUsageError(
            f"--witness-key/--witness-threshold differ from the witnesses pinned in "
            f"{stored_path}; change them only deliberately (move that file away)"
        )
    return given or stored


def _new_checkpoint_note(api: _Api, state: TrustedLogState) -> str:
    """The checkpoint to fetch up to: the latest, or with witnesses the latest cosigned."""
    if state.witnesses is None:
        return api.get("/tlog/checkpoint").body.decode("utf-8", "replace")
    answer = api.get_or_missing("/log/checkpoint/cosigned")
    if answer is None:
        raise state.no_cosigned_checkpoint()
    return answer.body.decode("utf-8", "replace")


def _trust_old_checkpoint(out_dir: Path, given: str | None, state: TrustedLogState) -> None:
    """Start ``state`` from the kept checkpoint, or from ``given`` (``--checkpoint``)."""
    if given is not None:
        try:
            note, source = Path(given).read_text(encoding="utf-8"), given
        except OSError as exc:
            raise TenantUsageError(f"cannot read checkpoint {given}: {exc}") from exc
    elif (out_dir / "checkpoint").is_file():
        source = str(out_dir / "checkpoint")
        note = (out_dir / "checkpoint").read_text(encoding="utf-8")
    else:
        return
    state.trust_kept_checkpoint(note, source, given=given is not None)


def _proven_entries(api: _Api, state: TrustedLogState, new: Checkpoint) -> list[PositionedEntry]:
    """The entries past the kept size, in log order, proven to be what ``new`` commits to
    in a tree that extends the kept one: the kept tree's right edge (from the log's hash
    tiles) extended with them (from its entry bundles) gives ``new.root``."""
    start = state.new_entries_start()
    if start is None:
        return []
    tiles = LogTiles(api.tile, new.size)
    edge = CompactRange()
    if start > 0:
        edge, paths = tiles.kept_edge(start)
        state.check_kept_edge(edge, paths)
    return state.prove_entries(edge, tiles.entries(edge.size))


@dataclass(frozen=True, slots=True)
class _StoredEnvelopes:
    """The envelopes kept in ``out_dir`` (:class:`~attestation.tenant.log_state.KeptEnvelopes`)."""

    out_dir: Path

    def read(self, digest: str) -> bytes:
        return _envelope_path(self.out_dir, digest).read_bytes()

    def where(self, digest: str) -> str:
        return str(_envelope_path(self.out_dir, digest))


def _store_envelopes(
    api: _Api,
    remote: _Remote,
    out_dir: Path,
    entries: Sequence[tuple[int, LogEntry]],
    jobs: int,
) -> list[int | None]:
    """Download, check and write the envelopes of ``entries`` (consecutive log positions),
    a bundle of up to ``BUNDLE`` per request and ``jobs`` requests at a time; their shard
    indices (None for a whole or merged run) in log order.

    Each bundle is stored by the worker that downloaded it: one of ``jobs`` processes (at
    most one per bundle, one request at a time each) when there are at least
    ``POOL_MIN_BUNDLES`` bundles and ``jobs`` is above 1 (the per-envelope check and write are
    CPU-bound Python, and the threads of one interpreter share one core), else one of
    ``jobs`` threads of this process. Either way the directory is synced once per page, in
    order, and the first failure in log order is raised (the same one whatever the timing):
    once a bundle failed, no bundle after it starts a download, while every bundle before it
    still completes and reports its own failure first.

    Raises:
        FetchWorkerError: a worker process died.
    """
    directory = out_dir / "envelopes"
    directory.mkdir(parents=True, exist_ok=True)
    bundles: list[Sequence[tuple[int, LogEntry]]] = []
    page_ends: set[int] = set()
    for first in range(0, len(entries), PAGE):
        page = entries[first : first + PAGE]
        bundles.extend(page[i : i + BUNDLE] for i in range(0, len(page), BUNDLE))
        page_ends.add(len(bundles) - 1)
    if jobs == 1 or len(bundles) < POOL_MIN_BUNDLES:
        return _store_in_threads(api, out_dir, bundles, page_ends, jobs)
    # The workers open connections of their own; none of this process's idle keep-alive
    # connections is inherited by a forked worker.
    api.close()
    return _store_in_processes(remote, out_dir, bundles, page_ends, min(jobs, len(bundles)))


def _store_in_threads(
    api: _Api,
    out_dir: Path,
    bundles: Sequence[Sequence[tuple[int, LogEntry]]],
    page_ends: set[int],
    jobs: int,
) -> list[int | None]:
    failures = _Failures()

    def store(number: int) -> list[int | None] | None:
        return _store_bundle(api, out_dir, number, bundles[number], failures)

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="tenant-fetch") as pool:
        futures = [pool.submit(store, number) for number in range(len(bundles))]
        try:
            return _in_log_order(futures, out_dir, page_ends)
        except BaseException:
            failures.record(-1)  # nothing queued starts a download any more
            pool.shutdown(wait=True, cancel_futures=True)
            raise


#: How long stopping a process fetch waits for the workers' shared flag's lock.
_STOP_LOCK_WAIT_SECONDS: Final = 1.0


def _store_in_processes(
    remote: _Remote,
    out_dir: Path,
    bundles: Sequence[Sequence[tuple[int, LogEntry]]],
    page_ends: set[int],
    workers: int,
) -> list[int | None]:
    # A forked worker starts at once with every module imported, but a fork copies the locks
    # other threads hold: fork only when this is the one thread, else spawn (a fresh
    # interpreter that imports what it needs, about half a second of CPU each).
    start = "fork" if threading.active_count() == 1 else "spawn"
    log.info("tenant_fetch_workers", processes=workers, start=start, bundles=len(bundles))
    context = multiprocessing.get_context(start)
    first_failure = context.Value("q", _NO_FAILURE)
    pool = ProcessPoolExecutor(
        workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(remote, out_dir, first_failure),
    )
    try:
        futures = [
            pool.submit(_store_bundle_in_worker, number, bundle)
            for number, bundle in enumerate(bundles)
        ]
        return _in_log_order(futures, out_dir, page_ends)
    except BrokenProcessPool as exc:
        broken = exc
    finally:
        # Nothing queued starts a download any more. A worker killed while it held the
        # value's lock holds it for ever: after a bounded wait the flag is stored without it
        # (one 8-byte store, which the workers only compare against).
        lock = first_failure.get_lock()
        held = lock.acquire(timeout=_STOP_LOCK_WAIT_SECONDS)
        try:
            first_failure.get_obj().value = -1
        finally:
            if held:
                lock.release()
        pool.shutdown(wait=True, cancel_futures=True)
    # When one worker dies the executor kills the others at once, maybe in the middle of a
    # write: their temporary files are this process's to remove, now that none is running.
    # A failure to remove them must not hide the error itself (they are only litter).
    with contextlib.suppress(OSError):
        remove_temporaries(
            out_dir / "envelopes",
            {_envelope_path(out_dir, e.envelope).name for bundle in bundles for _, e in bundle},
        )
    raise FetchWorkerError(
        f"a worker process of the fetch died ({broken}): the fetch is incomplete, and the "
        "kept index and checkpoint are unchanged"
    ) from broken


def _in_log_order(
    futures: Sequence[Future[list[int | None] | None]], out_dir: Path, page_ends: set[int]
) -> list[int | None]:
    """The shards of every bundle in log order, the directory synced after each page; the
    first failure in log order raised."""
    shards: list[int | None] = []
    for number, future in enumerate(futures):
        bundle_shards = future.result()
        if bundle_shards is None:  # skipped: only ever after a bundle that failed, raised above
            raise RuntimeError(f"bundle {number} was skipped while no bundle before it failed")
        shards.extend(bundle_shards)
        if number in page_ends:
            fsync_directory(out_dir / "envelopes")
    return shards


#: No bundle failed (any bundle number is below it).
_NO_FAILURE: Final = 2**62


class _Failures:
    """The lowest number of a bundle that failed, shared by the workers of one fetch (a lock
    and an int in this process, or a shared ``multiprocessing`` value)."""

    def __init__(self, shared: Synchronized[int] | None = None) -> None:
        self._shared = shared
        self._lock = threading.Lock() if shared is None else shared.get_lock()
        self._first = _NO_FAILURE

    def _value(self) -> int:
        return self._first if self._shared is None else self._shared.value

    def before(self, number: int) -> bool:
        """Whether a bundle before bundle ``number`` failed (or the fetch is stopping)."""
        with self._lock:
            return self._value() < number

    def record(self, number: int) -> None:
        with self._lock:
            if number < self._value():
                if self._shared is None:
                    self._first = number
                else:
                    self._shared.value = number


def _store_bundle(
    api: _Api,
    out_dir: Path,
    number: int,
    bundle: Sequence[tuple[int, LogEntry]],
    failures: _Failures,
) -> list[int | None] | None:
    """Download, check and write the envelopes of bundle ``number``; their shards, or None
    when a bundle before it failed first (nothing more is downloaded then)."""
    if failures.before(number):
        return None
    try:
        return _download_and_store(api, out_dir, bundle, lambda: failures.before(number))
    except BaseException:
        failures.record(number)
        raise


def _download_and_store(
    api: _Api, out_dir: Path, bundle: Sequence[tuple[int, LogEntry]], stop: Callable[[], bool]
) -> list[int | None] | None:
    found = _download(api, bundle, stop)
    if found is None:
        return None
    shards = []
    for (position, entry), data in zip(bundle, found, strict=True):
        if data is None:
            raise envelope_gone(entry.envelope, position)
        shard = checked_envelope(data, entry, position, api.tenant)
        atomic_write(_envelope_path(out_dir, entry.envelope), data, sync_directory=False)
        shards.append(shard)
    return shards


@dataclass(frozen=True, slots=True)
class _Remote:
    """What a worker process needs to reach the service as the fetching process does."""

    server: str
    tenant: str
    token: str
    retry: RetryPolicy | None
    ca_bundle: Path | None

    def client(self, connections: int) -> HttpClient:
        return HttpClient(
            token=self.token,
            retry=self.retry,
            what="server",
            ca_bundle=self.ca_bundle,
            connections=connections,
        )


class _Worker:
    """A worker process's part of a pooled fetch: its own client, and the shared record of
    the first failure. Set once per process by :func:`_start_worker`."""

    current: ClassVar[_Worker | None] = None

    def __init__(self, api: _Api, out_dir: Path, failures: _Failures) -> None:
        self.api = api
        self.out_dir = out_dir
        self.failures = failures


def _start_worker(remote: _Remote, out_dir: Path, first_failure: Synchronized[int]) -> None:
    api = _Api(remote.server, remote.tenant, remote.client(connections=1))
    _Worker.current = _Worker(api, out_dir, _Failures(first_failure))


def _store_bundle_in_worker(
    number: int, bundle: Sequence[tuple[int, LogEntry]]
) -> list[int | None] | None:
    worker = _Worker.current
    if worker is None:
        raise RuntimeError("a fetch worker process was not initialized")
    return _store_bundle(worker.api, worker.out_dir, number, bundle, worker.failures)


def _download(
    api: _Api, bundle: Sequence[tuple[int, LogEntry]], stop: Callable[[], bool]
) -> list[bytes | None] | None:
    """The envelopes of ``bundle`` in its order (None for one the service says is gone): in
    bundles, asking again from where an answer stopped; one by one from a service without
    the bundle route. None, and no further request, once ``stop()`` is true."""
    end = bundle[-1][0] + 1
    found: list[bytes | None] = []
    while len(found) < len(bundle):
        if found and stop():
            return None
        served = api.bundle(bundle[len(found)][0], end)
        if served is None:
            rest = bundle[len(found) :]
            for position, entry in rest:
                if stop():
                    return None
                found.append(api.envelope(entry.envelope, position))
            return found
        found.extend(served)
    return found


def _envelope_path(out_dir: Path, digest: str) -> Path:
    return out_dir / "envelopes" / f"sha256-{digest.removeprefix('sha256:')}.json"


def _load_index(out_dir: Path) -> dict[str, Any]:
    return load_index(out_dir / "index.json")


def load_index(path: Path) -> dict[str, Any]:
    """A kept index file (a JSON object), or an empty one when there is none yet."""
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_bytes())
    except ValueError as exc:
        raise TenantInputError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise TenantInputError(f"{path} is not a JSON object")
    return loaded
