"""The rules a tenant follows its log by, as one state object: what it trusts, and what may
change that (the way python-tuf's ``TrustedMetadataSet`` holds a TUF client's trusted metadata).

:class:`TrustedLogState` holds the pinned log key and witnesses, the last accepted checkpoint
and the index of the entries it covers (log position -> envelope digest, run, shard). Its
methods take what the service answered (a signed note, the hashes and entries of its tiles,
envelope bytes) and either advance the state or raise :class:`TamperingError`; nothing here
opens a file, a connection or a thread. :mod:`attestation.tenant.fetch` does the IO and the
worker pool and feeds this object, in this order:

1. :meth:`~TrustedLogState.accept_checkpoint` with the service's newest (or latest cosigned)
   checkpoint: signed by the pinned key, cosigned by the pinned witnesses' threshold;
2. :meth:`~TrustedLogState.new_entries_start`: the kept size, after refusing a log that shrank
   or one of the same size with another root; None when nothing is new;
3. :meth:`~TrustedLogState.check_kept_edge` with the kept tree's right edge read from the hash
   tiles (it must give the kept root), then :meth:`~TrustedLogState.prove_entries` with the new
   entries (the edge extended with them must give the new root): one computation proves both
   consistency with the kept tree and inclusion of every new entry;
4. :func:`checked_envelope` for each downloaded envelope (a pure function of the entry, so the
   worker processes call it without this object);
5. :meth:`~TrustedLogState.record`: one envelope per run and part, a merged envelope holding
   exactly the logged shards (:mod:`attestation.tenant.logged_shards`); only then do the index
   and the checkpoint advance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import structlog

from attestation.contracts import MAX_ENVELOPE_BYTES, sha256_digest
from attestation.envelope.merged import parse_any_envelope, shard_index
from attestation.errors import MalformedError
from attestation.tenant.errors import TamperingError, TenantInputError, TenantUsageError
from attestation.tenant.logged_shards import check_logged_shards
from attestation.transparency.checkpoint import (
    COSIGNATURE_V1_ALGORITHM,
    Checkpoint,
    CheckpointError,
    VerifierKey,
    tenant_log_origin,
    verify_signed_checkpoint,
)
from attestation.transparency.cosignature import (
    CosignatureError,
    require_cosignatures,
    verify_cosignatures,
)
from attestation.transparency.entries import EntryError, LogEntry
from attestation.transparency.merkle import CompactRange, leaf_hash

log = structlog.get_logger("attested-replay.tenant")

#: A log index: position (decimal string) -> ``{"digest", "runId", "shard"}``.
Index = dict[str, Any]
#: A proven log entry and its position.
PositionedEntry = tuple[int, LogEntry]


@dataclass(frozen=True, slots=True)
class WitnessPolicy:
    """The witnesses whose cosignatures a checkpoint needs, and how many of them."""

    keys: tuple[VerifierKey, ...]
    threshold: int

    def __post_init__(self) -> None:
        if not 1 <= self.threshold <= len(self.keys):
            raise TenantUsageError(
                f"--witness-threshold {self.threshold}: must be between 1 and the "
                f"{len(self.keys)} --witness-key given"
            )
        if len({key.name for key in self.keys}) != len(self.keys):
            raise TenantUsageError("--witness-key: two keys with one name")

    def to_json(self) -> str:
        keys = [key.encode() for key in self.keys]
        return json.dumps({"keys": keys, "threshold": self.threshold}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, source: Path) -> WitnessPolicy:
        try:
            data = json.loads(text)
            keys = tuple(
                VerifierKey.parse(key, algorithm=COSIGNATURE_V1_ALGORITHM) for key in data["keys"]
            )
            return cls(keys, int(data["threshold"]))
        except (ValueError, KeyError, TypeError, CheckpointError) as exc:
            raise TenantInputError(f"pinned witnesses {source} cannot be read: {exc}") from exc


class KeptEnvelopes(Protocol):
    """The envelopes an earlier fetch stored, by digest (the caller's files)."""

    def read(self, digest: str) -> bytes:
        """The stored bytes (OSError when they cannot be read)."""
        ...

    def where(self, digest: str) -> str:
        """Where they are, for a message."""
        ...


class TrustedLogState:
    """A tenant's trusted view of its log: the pinned keys, the last accepted checkpoint and
    the index of the entries it covers. Changed only by the methods below, each of which
    either accepts what it is given or raises, leaving the trusted state as it was."""

    def __init__(
        self,
        key: VerifierKey,
        tenant: str,
        *,
        witnesses: WitnessPolicy | None = None,
    ) -> None:
        self.key: Final = key
        self.tenant: Final = tenant
        self.witnesses: Final = witnesses
        self.origin: Final = tenant_log_origin(key.name, tenant)
        self._index: Index = {}
        self._trusted: Checkpoint | None = None
        self._candidate: tuple[str, Checkpoint] | None = None
        self._proven: list[PositionedEntry] | None = None

    @property
    def trusted(self) -> Checkpoint | None:
        """The last accepted checkpoint (None before the first fetch)."""
        return self._trusted

    @property
    def index(self) -> Index:
        """A copy of the index of the trusted checkpoint's entries."""
        return dict(self._index)

    def adopt_index(self, index: Index) -> None:
        """The index an earlier fetch kept beside the trusted checkpoint (its own files: each
        item is checked again, with the new ones, by :meth:`record`)."""
        self._index = dict(index)

    def trust_kept_checkpoint(self, note: str, source: str, *, given: bool) -> Checkpoint:
        """Start from a checkpoint kept by an earlier fetch, or ``given`` by the tenant
        (``--checkpoint``, e.g. a publish receipt's): signed by the pinned key; with pinned
        witnesses, a cosignature line a given one carries by one of them must verify too (a
        receipt's cosigned checkpoint: tampering otherwise)."""
        try:
            checkpoint = verify_signed_checkpoint(note, self.key, origin=self.origin)
        except CheckpointError as exc:
            raise TenantInputError(f"kept checkpoint {source} does not verify: {exc}") from exc
        if given and self.witnesses is not None:
            try:
                verify_cosignatures(note, self.witnesses.keys)
            except CosignatureError as exc:
                raise TamperingError(f"checkpoint {source}: {exc}") from exc
        self._trusted = checkpoint
        return checkpoint

    def no_cosigned_checkpoint(self) -> TamperingError:
        """The error for a service that has no cosigned checkpoint to give."""
        policy = self.witnesses
        if policy is None:
            raise RuntimeError("no witnesses are pinned")
        missing = ", ".join(key.name for key in policy.keys)
        return TamperingError(
            f"the service has no checkpoint cosigned by witnesses ({policy.threshold} "
            f"required; none from: {missing})"
        )

    def accept_checkpoint(self, note: str) -> Checkpoint:
        """The service's new checkpoint, once signed by the pinned key and cosigned by the
        pinned witnesses' threshold: the candidate the next steps prove entries against."""
        try:
            new = verify_signed_checkpoint(note, self.key, origin=self.origin)
            if self.witnesses is not None:
                require_cosignatures(note, self.witnesses.keys, self.witnesses.threshold)
        except CheckpointError as exc:
            raise TamperingError(f"the server's checkpoint is not acceptable: {exc}") from exc
        self._candidate = (note, new)
        self._proven = None
        return new

    def new_entries_start(self) -> int | None:
        """The first position the candidate adds (the trusted size), or None when it adds
        none: a log that shrank, or that has the trusted size with another root, is
        tampering."""
        _, new = self._need_candidate()
        old = self._trusted
        if old is not None and new.size < old.size:
            raise TamperingError(
                f"the log shrank from {old.size} to {new.size} entries: entries were removed"
            )
        if old is not None and new.size == old.size:
            if new.root != old.root:
                raise self._not_consistent(old, new)
            self._proven = []
            return None
        return 0 if old is None else old.size

    def check_kept_edge(self, edge: CompactRange, tile_paths: Sequence[str]) -> None:
        """The trusted tree's right edge, as read from the hash tiles at ``tile_paths``, must
        give the trusted root."""
        _, new = self._need_candidate()
        old = self._trusted
        if old is None or edge.size != old.size:
            raise RuntimeError("the kept edge is checked only against a kept tree of its size")
        if edge.root() != old.root:
            raise self._not_consistent(
                old,
                new,
                f" (the hash tiles {', '.join(tile_paths)} do not give the kept root: the log no "
                "longer holds the kept tree, or the service served a wrong tile)",
            )

    def prove_entries(
        self, edge: CompactRange, entries: Iterable[tuple[int, bytes]]
    ) -> list[PositionedEntry]:
        """The new entries, in log order, once ``edge`` (the trusted tree's checked right edge,
        or an empty range for a first fetch) extended with them gives the candidate's root:
        the candidate extends the trusted tree and holds every one of them."""
        _, new = self._need_candidate()
        old = self._trusted
        if edge.size != (0 if old is None else old.size):
            raise RuntimeError("entries are proven from the edge of the kept tree")
        proven: list[PositionedEntry] = []
        for position, raw in entries:
            proven.append((position, _log_entry(raw, position, self.tenant)))
            edge.append(leaf_hash(raw))
        if edge.root() != new.root:
            if old is not None:
                raise self._not_consistent(old, new)
            raise TamperingError(
                f"the entries served do not give the root of the signed checkpoint of size "
                f"{new.size}: the server shows another log than the one it signed"
            )
        self._proven = proven
        return proven

    def record(self, shards: Sequence[int | None], kept: KeptEnvelopes) -> tuple[str, Index]:
        """Advance to the candidate once its proven entries' envelopes (stored, checked by
        :func:`checked_envelope`, of shards ``shards`` in log order) keep one envelope per run
        and part and every merged envelope holds exactly its logged shards. The new trusted
        signed note and index, for the caller to store."""
        note, new = self._need_candidate()
        if self._proven is None:
            raise RuntimeError("the candidate's entries were not proven")
        index = dict(self._index)
        for (position, entry), shard in zip(self._proven, shards, strict=True):
            index[str(position)] = {"digest": entry.envelope, "runId": entry.run_id, "shard": shard}
        _check_one_envelope_per_run(index, kept)
        check_logged_shards(index, (position for position, _ in self._proven), kept.read)
        self._index = index
        self._trusted = new
        self._candidate = None
        self._proven = None
        return note, dict(index)

    def _need_candidate(self) -> tuple[str, Checkpoint]:
        if self._candidate is None:
            raise RuntimeError("no checkpoint was accepted")
        return self._candidate

    @staticmethod
    def _not_consistent(old: Checkpoint, new: Checkpoint, detail: str = "") -> TamperingError:
        return TamperingError(
            f"checkpoint of size {new.size} is not consistent with the kept checkpoint of size "
            f"{old.size}: entries were removed, reordered or rewritten, or the log forked{detail}"
        )


def _log_entry(raw: bytes, position: int, tenant: str) -> LogEntry:
    try:
        entry = LogEntry.from_bytes(raw)
    except (ValueError, EntryError) as exc:
        raise TamperingError(f"log entry {position} is malformed: {exc}") from exc
    if entry.tenant != tenant:
        raise TamperingError(f"log entry {position} belongs to tenant {entry.tenant!r}")
    return entry


def checked_envelope(data: bytes, entry: LogEntry, position: int, tenant: str) -> int | None:
    """The shard index (None for a whole or merged run) of the envelope the service served for
    proven entry ``position`` (one it says it no longer has is :func:`envelope_gone`).

    Bytes that are no valid envelope but are the ones the entry names (an envelope an older
    service logged beyond today's bounds, say) are kept as the entry's whole run: the log
    proves the operator published them, and ``--expected`` judges them (NOT VERIFIED,
    malformed), where refusing them as tampering would stop every later fetch at them."""
    if len(data) > MAX_ENVELOPE_BYTES:
        raise envelope_too_large(entry.envelope, position)
    if sha256_digest(data) != entry.envelope:
        raise TamperingError(f"envelope {entry.envelope} (entry {position}) has other bytes")
    try:
        envelope = parse_any_envelope(data)
    except MalformedError as exc:
        log.warning(
            "invalid_envelope_logged", digest=entry.envelope, position=position, reason=str(exc)
        )
        return None
    if envelope.tenant != tenant or envelope.run_id != entry.run_id:
        raise TamperingError(f"envelope {entry.envelope} does not match its log entry {position}")
    return shard_index(envelope)


def envelope_too_large(digest: str, position: int) -> TamperingError:
    return TamperingError(
        f"envelope {digest} of log entry {position} exceeds {MAX_ENVELOPE_BYTES} bytes, "
        "which the service never accepts"
    )


def envelope_gone(digest: str, position: int) -> TamperingError:
    """The log commits to the entry, so an envelope the service no longer has was removed
    after it was published: tampering, not unavailability."""
    return TamperingError(
        f"envelope {digest} of log entry {position} is gone: the signed log "
        "includes it, so it was removed after publication"
    )


def _check_one_envelope_per_run(index: Index, kept: KeptEnvelopes) -> None:
    """Tampering when two log entries publish one run (or one shard of a run)."""
    first: dict[tuple[str, int | None], int] = {}
    for position in sorted(index, key=int):
        item = index[position]
        if "shard" not in item:  # kept by an older tenant fetch: read its envelope once
            item["shard"] = _kept_shard(kept, str(item["digest"]))
        shard = item["shard"]
        key = (str(item["runId"]), None if shard is None else int(shard))
        if key in first:
            what = f"run {key[0]!r}" if shard is None else f"shard {shard} of run {key[0]!r}"
            raise TamperingError(
                f"log entries {first[key]} and {position} both publish {what} "
                f"({index[str(first[key])]['digest']} and {item['digest']}): the service "
                "never logs a second envelope for a run, so the run's envelope was replaced"
            )
        first[key] = int(position)


def _kept_shard(kept: KeptEnvelopes, digest: str) -> int | None:
    try:
        return shard_index(parse_any_envelope(kept.read(digest)))
    except (OSError, MalformedError) as exc:
        raise TenantInputError(f"kept envelope {kept.where(digest)} cannot be read: {exc}") from exc
