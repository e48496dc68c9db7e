"""The publication log: batch sequencing with group commit, signed heads and the fork guard.

Publishers' envelopes queue for one **sequencer**: a thread of the service's process, or in
``serve`` the main thread of the log's own process (:mod:`runner.service.log.process`, which
calls :meth:`PublicationLog.integrate`). It takes what queued while the previous batch was
committing and integrates it in one database
transaction: for each envelope it checks the digest (already present?) and the run pointer
(another envelope for this part of the run? then 409 and nothing is logged), appends the log
entry, stores the envelope and points the run at it; then, once per tenant, it computes the
new root, signs the checkpoint and stores it as the tenant's signed head. After the commit
the new heads are appended to the :class:`~runner.service.log.heads.HeadJournal` (fsynced) and
only then do the publishers get their receipts, with inclusion proofs under the new head.
One commit and one signature per batch, as Trillian and Tessera integrate.

The fork guard: a tenant's log is served only while the store still extends the last head
this service signed or served (journal or database, whichever is larger): the store holds at
least that many entries and its root at that size is the signed root. It is checked for
every tenant when the service starts and on every catch-up (a read of the rows another
process, a restore or a DELETE may have changed). A failed check refuses that tenant's log
(checkpoints, proofs, entry pages and publishing answer 503 with the reason) until an
operator repairs the store and restarts the service; it is logged once.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Protocol

import structlog

from attestation.transparency.checkpoint import (
    Checkpoint,
    CheckpointError,
    tenant_log_origin,
    verify_signed_checkpoint,
)
from attestation.transparency.merkle import EMPTY_ROOT, leaf_hash
from attestation.transparency.tiles import TILE_HEIGHT, TILE_WIDTH
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.heads import HeadJournal, SignedHead, divergence
from runner.service.log.merkle import MerkleTree
from runner.service.log.shard_sets import PartShape, shard_set_conflict, stored_shape
from runner.service.log.storage import (
    WHOLE_RUN,
    DigestCollisionError,
    EntryRow,
    LogTransaction,
    RunPointer,
    Storage,
    StorageUnavailableError,
    utc_now,
)

log = structlog.get_logger("attested-replay.serve")

#: Log entries read from storage per query while a tree catches up.
_CATCH_UP_BATCH: Final = 10_000
#: The most envelopes, and bytes of envelopes, one transaction integrates: bounds the
#: memory and the latency of one batch.
MAX_BATCH: Final = 512
MAX_BATCH_BYTES: Final = 64 * 1024 * 1024
#: What an operator reads next to a refused log.
REMEDY: Final = (
    "repair the store (docs/publishing.md, 'Recovering a refused log'), then restart the service"
)


class LogRefusedError(Exception):
    """The tenant's log no longer extends its last signed head; an operator must repair it."""

    def __init__(self, tenant: str, reason: str) -> None:
        super().__init__(f"the log of tenant {tenant!r} is refused: {reason}; {REMEDY}")
        self.tenant = tenant
        self.reason = reason

    def __reduce__(self) -> tuple[type[LogRefusedError], tuple[str, str]]:
        return LogRefusedError, (self.tenant, self.reason)  # across the log process's socket


class ProofRangeError(Exception):
    """A proof was asked for sizes the signed head does not cover."""

    def __init__(self, head_size: int) -> None:
        super().__init__(f"the signed head has size {head_size}")
        self.head_size = head_size

    def __reduce__(self) -> tuple[type[ProofRangeError], tuple[int]]:
        return ProofRangeError, (self.head_size,)


class ShuttingDownError(StorageUnavailableError):
    """The service is stopping: nothing more is integrated by this process."""


class Outcome(StrEnum):
    CREATED = "created"
    PRESENT = "already-present"
    RUN_CONFLICT = "run-conflict"
    SHARD_SET_CONFLICT = "shard-set-conflict"


@dataclass(frozen=True, slots=True)
class AppendRequest:
    tenant: str
    digest: str
    data: bytes
    run_id: str
    shape: PartShape  # which part of its run the envelope is
    entry: bytes  # the canonical log entry naming (tenant, run_id, digest)

    @property
    def part(self) -> str:
        """The run pointer's part: storage.WHOLE_RUN, or the shard index as text."""
        return self.shape.part


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a publisher gets back once its batch is integrated."""

    outcome: Outcome
    log_index: int | None  # None for a run conflict: nothing was logged
    head: SignedHead | None = None
    inclusion_proof: tuple[bytes, ...] = ()
    run_digest: str | None = None  # the envelope the run's part points to
    conflict: str | None = None  # why a shard-set conflict was refused


@dataclass
class _TenantLog:
    tree: MerkleTree = field(default_factory=MerkleTree)
    lock: threading.RLock = field(default_factory=threading.RLock)
    head: SignedHead | None = None  # the last head journaled (and so servable)
    refused: str | None = None


@dataclass(slots=True)
class _Pending:
    request: AppendRequest
    future: Future[Receipt]


class _DivergedError(Exception):
    pass


def _next_batch(queue: deque[_Pending]) -> list[_Pending]:
    """What one transaction integrates from the front of ``queue`` (not empty)."""
    batch = [queue.popleft()]
    size = len(batch[0].request.data)
    while queue and len(batch) < MAX_BATCH:
        size += len(queue[0].request.data)
        if size > MAX_BATCH_BYTES:
            break
        batch.append(queue.popleft())
    return batch


class Log(Protocol):
    """What the service asks of the log: :class:`PublicationLog` in the service's process, or
    :class:`runner.service.log.process.LogProcess` running one in a process of its own.
    Every method but :meth:`submit` and :meth:`refusals` may block on the database."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def submit(self, request: AppendRequest) -> Future[Receipt]: ...

    def refusals(self) -> dict[str, str]: ...

    def signed_head(self, tenant: str) -> SignedHead: ...

    def inclusion_proof(self, tenant: str, index: int, size: int) -> list[bytes]: ...

    def consistency_proof(self, tenant: str, old_size: int, new_size: int) -> list[bytes]: ...

    def tile(self, tenant: str, level: int, index: int, width: int) -> list[bytes]: ...


class PublicationLog:
    """Per-tenant Merkle logs over ``storage``, integrated by one sequencer: a thread of its
    own, or the caller of :meth:`integrate`.

    ``on_refused(tenant, reason)`` is called (in the thread that checked) when a tenant's
    log is refused."""

    def __init__(
        self,
        storage: Storage,
        signer: CheckpointSigner,
        journal: HeadJournal,
        *,
        log_name: str,
        adopt_database_heads: bool = False,
        clock: Callable[[], str] = utc_now,
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self._storage = storage
        self._on_refused = on_refused
        self._signer = signer
        self._journal = journal
        self._log_name = log_name
        self._adopt = adopt_database_heads
        self._clock = clock
        self._logs: dict[str, _TenantLog] = {}
        self._logs_lock = threading.Lock()
        self._queue: deque[_Pending] = deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, *, sequencer_thread: bool = True) -> None:
        """Check every tenant's log against its last signed head, then start sequencing:
        in a thread of its own, or without ``sequencer_thread`` in the callers of
        :meth:`integrate`."""
        journaled = self._journal.open()
        tenants = set(self._storage.tenants())
        prefix = f"{self._log_name}/t/"
        tenants |= {o.removeprefix(prefix) for o in journaled if o.startswith(prefix)}
        for tenant in sorted(tenants):
            state = self._tenant(tenant)
            with state.lock:
                state.head = self._journal.latest(self.origin(tenant))
                check = functools.partial(self._catch_up, tenant, state, starting=True)
                self._guarded(tenant, state, check)
                if state.refused is None and self._stale(state) and not self._storage.read_only:
                    # Entries no head covers: a store an older service wrote. Sign it now.
                    self._sign_current(tenant, state)
        if sequencer_thread:
            self._thread = threading.Thread(target=self._run, name="log-sequencer", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Integrate what is queued, then stop the sequencer thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def origin(self, tenant: str) -> str:
        return tenant_log_origin(self._log_name, tenant)

    def refusals(self) -> dict[str, str]:
        """The refused tenants and why (for the health route and the logs)."""
        with self._logs_lock:
            states = dict(self._logs)
        return {t: s.refused for t, s in states.items() if s.refused is not None}

    # -- publishing ------------------------------------------------------------------------

    def submit(self, request: AppendRequest) -> Future[Receipt]:
        """Queue ``request``; the future resolves once its batch is integrated."""
        future: Future[Receipt] = Future()
        with self._wake:
            if self._stopping:
                future.set_exception(ShuttingDownError("the service is shutting down"))
                return future
            self._queue.append(_Pending(request, future))
            self._wake.notify()
        return future

    def integrate(self, requests: Sequence[AppendRequest]) -> list[Future[Receipt]]:
        """Integrate ``requests`` now, in the calling thread (a log started without its
        sequencer thread), in batches as the thread makes them; their futures are done."""
        queue = deque(_Pending(request, Future()) for request in requests)
        futures = [pending.future for pending in queue]
        while queue:
            self._integrate_safely(_next_batch(queue))
        return futures

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if not self._queue:
                    return
                batch = _next_batch(self._queue)
            self._integrate_safely(batch)

    def _integrate_safely(self, batch: list[_Pending]) -> None:
        try:
            results = self._integrate(batch)
        except BaseException as exc:  # every publisher of the batch must hear of it
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for pending, result in zip(batch, results, strict=True):
            if isinstance(result, Exception):
                pending.future.set_exception(result)
            else:
                pending.future.set_result(result)

    def _integrate(self, batch: list[_Pending]) -> list[Receipt | Exception]:
        tenants = sorted({p.request.tenant for p in batch})
        states = {t: self._tenant(t) for t in tenants}
        with contextlib.ExitStack() as locks:
            for tenant in tenants:  # sorted: readers take one lock, so no lock-order cycle
                locks.enter_context(states[tenant].lock)
            marks = {t: s.tree.size for t, s in states.items()}
            try:
                results, heads = self._write_batch(batch, states)
            except BaseException:
                for tenant, state in states.items():  # nothing was committed: forget the appends
                    if state.tree.size > marks[tenant]:
                        state.tree.truncate(marks[tenant])
                raise
            self._journal.record(heads.values())  # durable before anyone sees the new heads
            for tenant, head in heads.items():
                states[tenant].head = head
            return [
                self._with_proof(result, states[pending.request.tenant])
                for pending, result in zip(batch, results, strict=True)
            ]

    def _write_batch(
        self, batch: list[_Pending], states: dict[str, _TenantLog]
    ) -> tuple[list[Receipt | Exception], dict[str, SignedHead]]:
        with self._storage.transaction(sorted(states)) as txn:
            for tenant, state in states.items():
                if state.refused is None:
                    self._guarded(
                        tenant, state, functools.partial(self._catch_up, tenant, state, txn)
                    )
            plan = _BatchPlan(self._clock())
            for tenant, state in states.items():
                if state.refused is None:
                    mine = [p.request for p in batch if p.request.tenant == tenant]
                    plan.read(txn, tenant, mine)
            results: list[Receipt | Exception] = []
            for pending in batch:
                request = pending.request
                state = states[request.tenant]
                if state.refused is not None:
                    results.append(LogRefusedError(request.tenant, state.refused))
                else:
                    results.append(plan.place(request, state.tree))
            if plan.rows:
                txn.append(plan.rows)
            if plan.pointers:
                txn.set_run_pointers(plan.pointers)
            grown = {row.tenant for row in plan.rows}
            stale = {t for t, s in states.items() if s.refused is None and self._stale(s)}
            heads = {t: self._sign(txn, t, states[t]) for t in sorted(grown | stale)}
            return results, heads

    @staticmethod
    def _stale(state: _TenantLog) -> bool:
        """Entries no head covers: a store written by an older service."""
        return state.tree.size > 0 and (state.head is None or state.head.size < state.tree.size)

    def _sign(self, txn: LogTransaction, tenant: str, state: _TenantLog) -> SignedHead:
        checkpoint = Checkpoint(self.origin(tenant), state.tree.size, state.tree.root())
        head = SignedHead(checkpoint, self._signer.sign(checkpoint))
        txn.put_head(tenant, head.size, checkpoint.root, head.note)
        return head

    def _sign_current(self, tenant: str, state: _TenantLog) -> None:
        """Sign the tenant's current tree when no head covers it yet (under ``state.lock``)."""
        with self._storage.transaction([tenant]) as txn:
            self._guarded(tenant, state, lambda: self._catch_up(tenant, state, txn))
            if state.refused is not None:
                raise LogRefusedError(tenant, state.refused)
            head = self._sign(txn, tenant, state) if self._stale(state) else None
        if head is not None:
            self._journal.record([head])
            state.head = head
            log.warning("log_head_signed_for_older_store", tenant=tenant, size=head.size)

    def _with_proof(self, result: Receipt | Exception, state: _TenantLog) -> Receipt | Exception:
        if isinstance(result, Exception) or result.log_index is None:
            return result
        head = state.head
        if head is None or result.log_index >= head.size:
            return StorageUnavailableError("no signed head covers this entry yet; retry")
        proof = tuple(state.tree.inclusion_proof(result.log_index, head.size))
        return Receipt(result.outcome, result.log_index, head, proof, result.run_digest)

    # -- reading ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def view(self, tenant: str) -> Iterator[tuple[MerkleTree, SignedHead]]:
        """The tenant's tree and its signed head, caught up and checked, under the tenant's
        lock. A tenant without entries gets a freshly signed empty checkpoint (every tree
        extends it, so it needs no record).

        Raises:
            LogRefusedError: the store no longer extends the signed head.
        """
        state = self._tenant(tenant)
        with state.lock:
            if state.refused is None:
                self._guarded(tenant, state, lambda: self._catch_up(tenant, state))
            if state.refused is None and self._stale(state):
                self._sign_current(tenant, state)
            if state.refused is not None:
                raise LogRefusedError(tenant, state.refused)
            head = state.head
            if head is None:
                empty = Checkpoint(self.origin(tenant), 0, EMPTY_ROOT)
                head = SignedHead(empty, self._signer.sign(empty))
            yield state.tree, head

    def signed_head(self, tenant: str) -> SignedHead:
        """The tenant's signed head, caught up and checked (see :meth:`view`)."""
        with self.view(tenant) as (_tree, head):
            return head

    def inclusion_proof(self, tenant: str, index: int, size: int) -> list[bytes]:
        """Raises:
        ProofRangeError: unless ``index < size <= `` the signed head's size."""
        with self.view(tenant) as (tree, head):
            if size > head.size or not 0 <= index < size:
                raise ProofRangeError(head.size)
            return tree.inclusion_proof(index, size)

    def consistency_proof(self, tenant: str, old_size: int, new_size: int) -> list[bytes]:
        """Raises:
        ProofRangeError: unless ``old_size <= new_size <= `` the signed head's size."""
        with self.view(tenant) as (tree, head):
            if not 0 <= old_size <= new_size <= head.size:
                raise ProofRangeError(head.size)
            return tree.consistency_proof(old_size, new_size)

    def tile(self, tenant: str, level: int, index: int, width: int) -> list[bytes]:
        """The C2SP tlog-tiles hash tile ``level``/``index`` of ``width`` hashes, of the tree
        the signed head signs.

        Raises:
        ProofRangeError: unless the signed head's tree holds ``width`` hashes in that tile."""
        with self.view(tenant) as (tree, head):
            try:
                return tree.complete_subtrees(
                    TILE_HEIGHT * level, TILE_WIDTH * index, width, head.size
                )
            except ValueError as exc:
                raise ProofRangeError(head.size) from exc

    # -- catching up and the guard ---------------------------------------------------------

    def _tenant(self, tenant: str) -> _TenantLog:
        with self._logs_lock:
            return self._logs.setdefault(tenant, _TenantLog())

    def _guarded(self, tenant: str, state: _TenantLog, check: Callable[[], None]) -> None:
        try:
            check()
        except _DivergedError as exc:
            state.refused = str(exc)
            log.error(  # noqa: TRY400 - the reason says it all; a traceback would not help
                "log_refused", tenant=tenant, reason=state.refused, remedy=REMEDY
            )
            if self._on_refused is not None:
                self._on_refused(tenant, state.refused)

    def _catch_up(
        self,
        tenant: str,
        state: _TenantLog,
        txn: LogTransaction | None = None,
        *,
        starting: bool = False,
    ) -> None:
        """Read what the store gained since the cached tree and check it against the heads;
        ``starting``: the first check of this process (see :meth:`_check_heads`)."""
        with contextlib.ExitStack() as stack:
            reader = txn or stack.enter_context(self._storage.snapshot())
            database_note = reader.head(tenant)
            tree = state.tree
            # From the last integrated entry: it must still be there, unchanged.
            start = max(tree.size - 1, 0)
            while True:
                rows = reader.entries_since(tenant, start, _CATCH_UP_BATCH)
                expected = start
                for index, entry in rows:
                    if index != expected:
                        raise _DivergedError(f"log entry {expected} is missing from the store")
                    value = leaf_hash(entry)
                    if index < tree.size:
                        if tree.leaf_hash_at(index) != value:
                            raise _DivergedError(
                                f"log entry {index} changed under the service (a fork)"
                            )
                    else:
                        tree.append_leaf_hash(value)
                    expected += 1
                if expected < tree.size:
                    raise _DivergedError(
                        f"the store holds {reader.size(tenant)} entries but the service had "
                        f"integrated "
                        f"{tree.size}: signed entries were lost (a restored backup, a lagging "
                        "replica, a DELETE)"
                    )
                if len(rows) < _CATCH_UP_BATCH:
                    break
                start = expected
        self._check_heads(tenant, state, database_note, starting=starting)

    def _check_heads(
        self, tenant: str, state: _TenantLog, database_note: str | None, *, starting: bool
    ) -> None:
        """The tree must extend the journal's head and the database's. At start, a database
        head the journal does not know is refused unless adopted: this process cannot tell a
        database that moved on from one that was swapped. Later, a newer database head is
        another process's (on the same database), and the tree it covers was just checked."""
        database: SignedHead | None = None
        if state.head is not None and database_note == state.head.note:
            database = state.head  # the head this process journaled: verified already
        elif database_note is not None:
            try:
                checkpoint = verify_signed_checkpoint(
                    database_note, self._signer.verifier_key, origin=self.origin(tenant)
                )
            except CheckpointError as exc:
                raise _DivergedError(
                    f"the signed head in the database is not this log's ({exc}): another "
                    "key or log name wrote this store"
                ) from exc
            database = SignedHead(checkpoint, database_note)
        journaled = state.head
        if (
            starting
            and journaled is None
            and database is not None
            and database.size > 0
            and not self._adopt
        ):
            raise _DivergedError(
                f"the database records a signed head of size {database.size} that this "
                "service's head journal does not know (a new or lost state directory); check "
                "that the database is the right one, then start once with "
                "--adopt-database-heads"
            )
        for head in (journaled, None if database is journaled else database):
            if head is not None and (reason := divergence(state.tree, head.checkpoint)):
                raise _DivergedError(reason)
        if database is not None and (journaled is None or database.size > journaled.size):
            self._journal.record([database])  # served from now on: recorded first
            state.head = database


class _BatchPlan:
    """The decisions of one batch, made against what its transaction read."""

    def __init__(self, now: str) -> None:
        self.now = now
        self.stored: dict[tuple[str, str], tuple[bytes, int]] = {}  # (tenant, digest)
        self.parts: dict[tuple[str, str], dict[str, str]] = {}  # (tenant, run) -> part -> digest
        self.shapes: dict[tuple[str, str], PartShape | None] = {}  # (tenant, digest)
        self.rows: list[EntryRow] = []
        self.pointers: list[RunPointer] = []

    def read(self, txn: LogTransaction, tenant: str, requests: list[AppendRequest]) -> None:
        stored = txn.envelopes(tenant, [r.digest for r in requests])
        self.stored.update({(tenant, digest): value for digest, value in stored.items()})
        parts = txn.run_parts(tenant, [r.run_id for r in requests])
        self.parts.update({(tenant, run_id): found for run_id, found in parts.items()})
        # The shard-set check reads the logged parts of sharded runs (rare): read them now.
        sharded = {r.run_id for r in requests if r.shape.kind != "unsharded"}
        sharded.update(run for run, found in parts.items() if set(found) - {WHOLE_RUN})
        digests = [digest for run in sorted(sharded) for digest in parts.get(run, {}).values()]
        if digests:
            logged = txn.envelopes(tenant, digests)
            self.stored.update({(tenant, digest): value for digest, value in logged.items()})

    def place(self, request: AppendRequest, tree: MerkleTree) -> Receipt | Exception:
        key = (request.tenant, request.digest)
        parts = self.parts.setdefault((request.tenant, request.run_id), {})
        pointed = parts.get(request.part)
        stored = self.stored.get(key)
        if stored is not None:
            data, index = stored
            if data != request.data:
                return DigestCollisionError(f"stored bytes under {request.digest} differ")
            if pointed is None:  # logged before its pointer existed (an older service)
                self._point(request, parts)
                pointed = request.digest
            if pointed != request.digest:
                return Receipt(Outcome.RUN_CONFLICT, None, run_digest=pointed)
            return Receipt(Outcome.PRESENT, index, run_digest=pointed)
        conflict = shard_set_conflict(
            request.run_id, request.shape, parts, functools.partial(self._shape, request.tenant)
        )
        if conflict is not None:  # the more telling refusal, where both apply
            return Receipt(Outcome.SHARD_SET_CONFLICT, None, conflict=conflict)
        if pointed is not None:  # another envelope has this run: refused, nothing logged
            return Receipt(Outcome.RUN_CONFLICT, None, run_digest=pointed)
        index = tree.append_leaf_hash(leaf_hash(request.entry))
        self.rows.append(
            EntryRow(request.tenant, index, request.entry, request.digest, request.data, self.now)
        )
        self.stored[key] = (request.data, index)
        self._point(request, parts)
        return Receipt(Outcome.CREATED, index, run_digest=request.digest)

    def _shape(self, tenant: str, digest: str) -> PartShape | None:
        if (tenant, digest) not in self.shapes:
            stored = self.stored.get((tenant, digest))
            self.shapes[(tenant, digest)] = None if stored is None else stored_shape(stored[0])
        return self.shapes[(tenant, digest)]

    def _point(self, request: AppendRequest, parts: dict[str, str]) -> None:
        parts[request.part] = request.digest
        self.pointers.append(
            RunPointer(request.tenant, request.run_id, request.part, request.digest)
        )
