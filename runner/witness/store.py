"""The witness's state: per origin, the latest checkpoint it cosigned, in SQLite.

One row per origin (size, root, the note served to monitors). Judging a request against the
row and replacing it are one ``BEGIN IMMEDIATE`` transaction, committed (synchronous=FULL)
before the cosignature is returned: two requests never both extend the same state (the race
tlog-witness describes), and a witness killed at any point restarts with either the old row,
whose cosignature was never returned, or the new one.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from runner.witness.protocol import AddCheckpoint, Cosigned

DATABASE_FILE: Final = "witness.sqlite3"
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS cosigned (
    origin TEXT PRIMARY KEY,
    -- lower-case hex SHA-256 of the origin: how monitors name a log (tlog-witness)
    origin_hash TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL CHECK (size >= 0),
    root BLOB NOT NULL CHECK (length(root) = 32),
    note TEXT NOT NULL
)
"""


class WitnessStore:
    """The latest cosigned checkpoint of every origin (thread-safe; one connection)."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def note(self, origin_hash: str) -> str | None:
        """The note served for the origin whose SHA-256 is ``origin_hash`` (lower-case hex):
        the latest checkpoint cosigned, with the log's signature and the cosignature."""
        with self._lock:
            row = self._db.execute(
                "SELECT note FROM cosigned WHERE origin_hash = ?", (origin_hash,)
            ).fetchone()
        return None if row is None else str(row[0])

    def advance(
        self,
        request: AddCheckpoint,
        judge: Callable[[AddCheckpoint, Cosigned | None], None],
        cosign: Callable[[AddCheckpoint], str],
    ) -> str:
        """Judge ``request`` against the stored state and, if ``judge`` raises nothing, store
        its checkpoint with the cosignature line ``cosign`` made, and return that line."""
        origin = request.checkpoint.origin
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT size, root FROM cosigned WHERE origin = ?", (origin,)
                ).fetchone()
                judge(request, None if row is None else Cosigned(size=row[0], root=row[1]))
                line = cosign(request)
                self._db.execute(
                    "INSERT INTO cosigned (origin, origin_hash, size, root, note) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET "
                    "size = excluded.size, root = excluded.root, note = excluded.note",
                    (
                        origin,
                        origin_hash(origin),
                        request.checkpoint.size,
                        request.checkpoint.root,
                        request.note + line,
                    ),
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return line


def origin_hash(origin: str) -> str:
    """How tlog-witness's monitoring path names a log: its origin's SHA-256, lower-case hex."""
    return hashlib.sha256(origin.encode()).hexdigest()
