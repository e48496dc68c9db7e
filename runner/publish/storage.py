"""Storage of the publication service: SQLite (default) and PostgreSQL behind one interface.

Both keep four tables: ``tokens`` (SHA-256 of each bearer token, its tenant and role),
``envelopes`` (exact bytes by tenant and digest, with the log index of their entry),
``log_entries`` (the append-only per-tenant log) and ``runs`` (write-once run pointers).
An envelope and its log entry are written in one transaction that first takes a per-tenant
write lock, so concurrent publishers cannot give two entries the same index (the primary key
``(tenant, log_index)`` is a second guard).
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import psycopg

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tokens (
        token_hash TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS envelopes (
        tenant TEXT NOT NULL, digest TEXT NOT NULL, data {blob} NOT NULL,
        log_index BIGINT NOT NULL, PRIMARY KEY (tenant, digest))""",
    """CREATE TABLE IF NOT EXISTS log_entries (
        tenant TEXT NOT NULL, log_index BIGINT NOT NULL, entry {blob} NOT NULL,
        PRIMARY KEY (tenant, log_index))""",
    """CREATE TABLE IF NOT EXISTS runs (
        tenant TEXT NOT NULL, run_id TEXT NOT NULL, digest TEXT NOT NULL,
        PRIMARY KEY (tenant, run_id))""",
)


class Role(StrEnum):
    OPERATOR = "operator"  # writes envelopes for its tenant (and may read them back)
    TENANT = "tenant"  # reads its own tenant's envelopes and log


class RunPointer(StrEnum):
    CREATED = "created"
    UNCHANGED = "unchanged"
    CONFLICT = "conflict"


class DigestCollisionError(Exception):
    """Stored bytes under a digest differ from new bytes with the same digest (corruption)."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    created: bool
    log_index: int


class Storage(Protocol):
    def initialize(self) -> None: ...
    def add_token(self, token_hash: str, tenant: str, role: Role) -> None: ...
    def token_identity(self, token_hash: str) -> tuple[str, str, Role] | None:
        """(stored hash, tenant, role) of the token whose hash is ``token_hash``."""
        ...

    def publish_envelope(self, tenant: str, digest: str, data: bytes, entry: bytes) -> AppendResult:
        """Store ``data`` and append ``entry`` to the tenant's log, unless already stored."""
        ...

    def envelope(self, tenant: str, digest: str) -> tuple[bytes, int] | None:
        """Bytes and log index of a stored envelope."""
        ...

    def set_run(self, tenant: str, run_id: str, digest: str) -> RunPointer: ...
    def run_digest(self, tenant: str, run_id: str) -> str | None: ...
    def log_entries(self, tenant: str, start: int, end: int) -> list[bytes]:
        """Entries with ``start <= index < end``, in index order."""
        ...

    def log_size(self, tenant: str) -> int: ...
    def close(self) -> None: ...


def tenant_lock_key(tenant: str) -> int:
    """A signed 64-bit PostgreSQL advisory-lock key for one tenant's log."""
    return int.from_bytes(
        hashlib.sha256(b"attested-replay log " + tenant.encode()).digest()[:8], "big", signed=True
    )


def _existing(stored: bytes, log_index: int, data: bytes, digest: str) -> AppendResult:
    if bytes(stored) != data:
        raise DigestCollisionError(digest)
    return AppendResult(created=False, log_index=int(log_index))


class SqliteStorage:
    """One SQLite file in WAL mode; ``BEGIN IMMEDIATE`` serializes writers."""

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"SQLite synchronous mode must be FULL or NORMAL, not {synchronous!r}")
        self.path = path
        # FULL fsyncs the WAL on every commit: an acknowledged envelope survives power loss.
        # NORMAL survives process crashes only; a throughput knob for disposable stores.
        self._synchronous = synchronous
        # Writers of this process queue here instead of in SQLite's busy handler, which sleeps
        # in steps of up to 100 ms; BEGIN IMMEDIATE still serializes other processes.
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # One long-lived connection per thread: opening one per operation would make every
        # "last" close checkpoint and delete the WAL, which dominates under load.
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self.path, timeout=60, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA busy_timeout = 60000")
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
            self._local.connection = connection
            with self._all_lock:
                self._all.append(connection)
        yield connection

    def initialize(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode = WAL")
            for statement in SCHEMA:
                db.execute(statement.format(blob="BLOB"))

    def add_token(self, token_hash: str, tenant: str, role: Role) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT INTO tokens (token_hash, tenant, role) VALUES (?, ?, ?)",
                (token_hash, tenant, role.value),
            )

    def token_identity(self, token_hash: str) -> tuple[str, str, Role] | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT token_hash, tenant, role FROM tokens WHERE token_hash = ?", (token_hash,)
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), Role(row[2]))

    def publish_envelope(self, tenant: str, digest: str, data: bytes, entry: bytes) -> AppendResult:
        with self._write_lock, self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT data, log_index FROM envelopes WHERE tenant = ? AND digest = ?",
                    (tenant, digest),
                ).fetchone()
                if row is not None:
                    db.execute("ROLLBACK")
                    return _existing(row[0], row[1], data, digest)
                (size,) = db.execute(
                    "SELECT COALESCE(MAX(log_index) + 1, 0) FROM log_entries WHERE tenant = ?",
                    (tenant,),
                ).fetchone()
                db.execute(
                    "INSERT INTO log_entries (tenant, log_index, entry) VALUES (?, ?, ?)",
                    (tenant, size, entry),
                )
                db.execute(
                    "INSERT INTO envelopes (tenant, digest, data, log_index) VALUES (?, ?, ?, ?)",
                    (tenant, digest, data, size),
                )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return AppendResult(created=True, log_index=int(size))

    def envelope(self, tenant: str, digest: str) -> tuple[bytes, int] | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT data, log_index FROM envelopes WHERE tenant = ? AND digest = ?",
                (tenant, digest),
            ).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def set_run(self, tenant: str, run_id: str, digest: str) -> RunPointer:
        with self._write_lock, self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT digest FROM runs WHERE tenant = ? AND run_id = ?", (tenant, run_id)
                ).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO runs (tenant, run_id, digest) VALUES (?, ?, ?)",
                        (tenant, run_id, digest),
                    )
                db.execute("COMMIT")
            except BaseException:
                # A failed statement leaves the transaction open; this thread's connection is
                # reused, so without the rollback its every later write would fail.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        if row is None:
            return RunPointer.CREATED
        return RunPointer.UNCHANGED if row[0] == digest else RunPointer.CONFLICT

    def run_digest(self, tenant: str, run_id: str) -> str | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT digest FROM runs WHERE tenant = ? AND run_id = ?", (tenant, run_id)
            ).fetchone()
        return None if row is None else str(row[0])

    def log_entries(self, tenant: str, start: int, end: int) -> list[bytes]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT entry FROM log_entries WHERE tenant = ? AND log_index >= ? "
                "AND log_index < ? ORDER BY log_index",
                (tenant, start, end),
            ).fetchall()
        return [bytes(row[0]) for row in rows]

    def log_size(self, tenant: str) -> int:
        with self._connect() as db:
            (size,) = db.execute(
                "SELECT COALESCE(MAX(log_index) + 1, 0) FROM log_entries WHERE tenant = ?",
                (tenant,),
            ).fetchone()
        return int(size)

    def close(self) -> None:
        with self._all_lock:
            for connection in self._all:
                connection.close()
            self._all.clear()
        self._local = threading.local()


class PostgresStorage:
    """PostgreSQL through psycopg 3 with a small connection pool; a per-tenant advisory
    transaction lock serializes appends to one tenant's log."""

    def __init__(self, dsn: str, *, pool_size: int = 16) -> None:
        self.dsn = dsn
        self._idle: queue.LifoQueue[psycopg.Connection[tuple[object, ...]]] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(pool_size)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        with self._slots:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                connection = psycopg.connect(self.dsn)
            healthy = False
            try:
                with connection.transaction():
                    yield connection
                healthy = True
            finally:
                if healthy and not connection.closed:
                    self._idle.put(connection)
                else:
                    connection.close()

    def initialize(self) -> None:
        with self._connect() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (tenant_lock_key("-schema-"),))
            for statement in SCHEMA:
                db.execute(statement.format(blob="BYTEA"))

    def add_token(self, token_hash: str, tenant: str, role: Role) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT INTO tokens (token_hash, tenant, role) VALUES (%s, %s, %s)",
                (token_hash, tenant, role.value),
            )

    def token_identity(self, token_hash: str) -> tuple[str, str, Role] | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT token_hash, tenant, role FROM tokens WHERE token_hash = %s", (token_hash,)
            ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), Role(str(row[2])))

    def publish_envelope(self, tenant: str, digest: str, data: bytes, entry: bytes) -> AppendResult:
        with self._connect() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (tenant_lock_key(tenant),))
            row = db.execute(
                "SELECT data, log_index FROM envelopes WHERE tenant = %s AND digest = %s",
                (tenant, digest),
            ).fetchone()
            if row is not None:
                return _existing(row[0], row[1], data, digest)  # type: ignore[arg-type]  # BYTEA, BIGINT
            count_row = db.execute(
                "SELECT COALESCE(MAX(log_index) + 1, 0) FROM log_entries WHERE tenant = %s",
                (tenant,),
            ).fetchone()
            size = int(count_row[0]) if count_row else 0  # type: ignore[call-overload]  # BIGINT
            db.execute(
                "INSERT INTO log_entries (tenant, log_index, entry) VALUES (%s, %s, %s)",
                (tenant, size, entry),
            )
            db.execute(
                "INSERT INTO envelopes (tenant, digest, data, log_index) VALUES (%s, %s, %s, %s)",
                (tenant, digest, data, size),
            )
        return AppendResult(created=True, log_index=size)

    def envelope(self, tenant: str, digest: str) -> tuple[bytes, int] | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT data, log_index FROM envelopes WHERE tenant = %s AND digest = %s",
                (tenant, digest),
            ).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))  # type: ignore[call-overload]  # BYTEA, BIGINT

    def set_run(self, tenant: str, run_id: str, digest: str) -> RunPointer:
        with self._connect() as db:
            inserted = db.execute(
                "INSERT INTO runs (tenant, run_id, digest) VALUES (%s, %s, %s) "
                "ON CONFLICT (tenant, run_id) DO NOTHING",
                (tenant, run_id, digest),
            ).rowcount
            if inserted == 1:
                return RunPointer.CREATED
            row = db.execute(
                "SELECT digest FROM runs WHERE tenant = %s AND run_id = %s", (tenant, run_id)
            ).fetchone()
        assert row is not None  # the conflicting row exists: runs are never deleted
        return RunPointer.UNCHANGED if row[0] == digest else RunPointer.CONFLICT

    def run_digest(self, tenant: str, run_id: str) -> str | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT digest FROM runs WHERE tenant = %s AND run_id = %s", (tenant, run_id)
            ).fetchone()
        return None if row is None else str(row[0])

    def log_entries(self, tenant: str, start: int, end: int) -> list[bytes]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT entry FROM log_entries WHERE tenant = %s AND log_index >= %s "
                "AND log_index < %s ORDER BY log_index",
                (tenant, start, end),
            ).fetchall()
        return [bytes(row[0]) for row in rows]  # type: ignore[call-overload]  # BYTEA

    def log_size(self, tenant: str) -> int:
        with self._connect() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(log_index) + 1, 0) FROM log_entries WHERE tenant = %s",
                (tenant,),
            ).fetchone()
        return int(row[0]) if row else 0  # type: ignore[call-overload]  # BIGINT

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def open_storage(location: str, *, sqlite_synchronous: str = "FULL") -> Storage:
    """A ``postgresql://`` or ``postgres://`` DSN opens PostgreSQL; anything else is SQLite."""
    if location.startswith(("postgresql://", "postgres://")):
        storage: Storage = PostgresStorage(location)
    else:
        storage = SqliteStorage(Path(location), synchronous=sqlite_synchronous)
    storage.initialize()
    return storage
