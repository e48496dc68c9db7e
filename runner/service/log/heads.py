"""The head journal: every signed tree head, recorded outside the database before it is served.

A restored backup, a failover to a lagging replica or an operator's DELETE rolls the database
back together with any head it records. The journal lives in the service's state directory,
beside the signing key, so the service still knows the last head it signed and refuses to
sign a second, different tree of a size it already signed (a fork).

Format: one JSON object per line, ``{"note": "<signed checkpoint>"}``, appended and fsynced
once per integrated batch; each line's signature is checked with the log key when the
journal is read. The latest head per checkpoint origin wins. A torn last line (a crash while
appending) is ignored: its head was never served, because serving waits for the fsync. The
file is rewritten (latest head per origin, atomically) when it is opened with stale lines or
a torn one, and when it outgrows :data:`COMPACT_AFTER_BYTES`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from attestation.tenant.fsutil import atomic_write
from attestation.transparency.checkpoint import (
    Checkpoint,
    CheckpointError,
    VerifierKey,
    parse_signed_note,
    verify_signed_checkpoint,
)
from runner.service.log.merkle import MerkleTree
from runner.service.log.storage import storage_error_from_os

JOURNAL_FILE: Final = "signed-heads.journal"
COMPACT_AFTER_BYTES: Final = 16 * 1024 * 1024


class JournalError(Exception):
    """The head journal is unreadable, or corrupt before its last line."""


@dataclass(frozen=True, slots=True)
class SignedHead:
    """A signed checkpoint and its parsed body."""

    checkpoint: Checkpoint
    note: str

    @classmethod
    def parse(cls, note: str) -> SignedHead:
        checkpoint, _signatures = parse_signed_note(note)
        return cls(checkpoint, note)

    @property
    def size(self) -> int:
        return self.checkpoint.size


def divergence(tree: MerkleTree, head: Checkpoint) -> str | None:
    """Why ``tree`` does not extend the signed ``head``, or None when it does."""
    if tree.size < head.size:
        return (
            f"the store holds {tree.size} entries but a checkpoint of size {head.size} was "
            "signed: signed entries were lost (a restored backup, a lagging replica, a DELETE)"
        )
    if tree.root(head.size) != head.root:
        return (
            f"the store's tree of size {head.size} has another root than the checkpoint of "
            "that size that was signed: signed entries were changed or replaced (a fork)"
        )
    return None


class HeadJournal:
    """The journal file of one service process (thread-safe)."""

    def __init__(self, path: Path, key: VerifierKey) -> None:
        self.path = path
        self._key = key
        self._lock = threading.Lock()
        self._heads: dict[str, SignedHead] = {}

    def open(self) -> dict[str, SignedHead]:
        """Read the journal (creating nothing when absent), compact it when it holds stale
        lines and can be written, and return the latest head of each origin."""
        with self._lock:
            self._heads, lines, torn = _read(self.path, self._key)
            if torn or lines > len(self._heads):
                # On a read-only filesystem the journal stays as it is: still valid to read.
                with contextlib.suppress(OSError):
                    self._rewrite()
            return dict(self._heads)

    def latest(self, origin: str) -> SignedHead | None:
        with self._lock:
            return self._heads.get(origin)

    def record(self, heads: Iterable[SignedHead]) -> None:
        """Durably append the heads newer than the recorded ones (one fsync for all).

        Raises:
            StorageFullError, StorageUnavailableError: the journal cannot be written.
        """
        with self._lock:
            fresh = [h for h in heads if self._is_newer(h)]
            if not fresh:
                return
            data = b"".join(json.dumps({"note": h.note}).encode() + b"\n" for h in fresh)
            try:
                size = self._append(data)
            except OSError as exc:
                raise storage_error_from_os(exc, f"the head journal {self.path}") from exc
            for head in fresh:
                self._heads[head.checkpoint.origin] = head
            if size > COMPACT_AFTER_BYTES:
                try:
                    self._rewrite()
                except OSError as exc:
                    raise storage_error_from_os(exc, f"the head journal {self.path}") from exc

    def _append(self, data: bytes) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            written = os.write(fd, data)
            if written != len(data):
                # A partial line would be read as torn: cut it, so the next append is whole.
                os.ftruncate(fd, os.fstat(fd).st_size - written)
                raise OSError(f"short write: {written} of {len(data)} bytes")
            os.fdatasync(fd)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _is_newer(self, head: SignedHead) -> bool:
        known = self._heads.get(head.checkpoint.origin)
        return known is None or head.size > known.size

    def _rewrite(self) -> None:
        lines = (json.dumps({"note": h.note}) + "\n" for h in self._heads.values())
        atomic_write(self.path, "".join(lines).encode(), mode=0o600)


def _read(path: Path, key: VerifierKey) -> tuple[dict[str, SignedHead], int, bool]:
    """The latest head per origin, the number of complete lines and whether the last line
    is torn (it must be cut before anything is appended)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, 0, False
    except OSError as exc:
        raise JournalError(f"cannot read the head journal {path}: {exc}") from exc
    *complete, tail = raw.split(b"\n")  # ``tail`` is empty unless the last append was torn
    heads: dict[str, SignedHead] = {}
    for number, line in enumerate(complete, start=1):
        try:
            head = SignedHead.parse(json.loads(line)["note"])
            verify_signed_checkpoint(head.note, key, origin=head.checkpoint.origin)
        except (ValueError, KeyError, TypeError, CheckpointError) as exc:
            raise JournalError(
                f"{path} line {number} is not a head signed with the log key {key.name}: {exc}"
            ) from exc
        origin = head.checkpoint.origin
        known = heads.get(origin)
        if known is not None and known.size == head.size and known.checkpoint != head.checkpoint:
            raise JournalError(
                f"{path} records two different heads of size {head.size} for {origin}: "
                "this log forked before"
            )
        if known is None or head.size >= known.size:
            heads[origin] = head
    return heads, len(complete), bool(tail)
