"""Storage of tenants' corpus exports, in the publication service's own database.

An export is kept per tenant under the SHA-256 of its exact bytes, in 1 MiB chunks so that
neither an upload nor a download holds a whole corpus in memory. Two tables:
``corpus_exports`` (tenant, digest, corpus checksum, case count, size, manifest, upload time)
and ``corpus_chunks`` (tenant, digest, sequence number, bytes). An export and its chunks are
written in one transaction, so a reader never sees a partial export. Exports are immutable:
a digest, once stored, is never rewritten.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, Protocol

import psycopg

from runner.service.log.storage import tenant_lock_key

CHUNK_BYTES: Final = 1024 * 1024

SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS corpus_exports (
        tenant TEXT NOT NULL, digest TEXT NOT NULL, corpus_checksum TEXT NOT NULL,
        case_count BIGINT NOT NULL, size BIGINT NOT NULL, manifest {blob} NOT NULL,
        uploaded_at TEXT NOT NULL, PRIMARY KEY (tenant, digest))""",
    """CREATE TABLE IF NOT EXISTS corpus_chunks (
        tenant TEXT NOT NULL, digest TEXT NOT NULL, seq BIGINT NOT NULL, data {blob} NOT NULL,
        PRIMARY KEY (tenant, digest, seq))""",
)


@dataclass(frozen=True, slots=True)
class StoredExport:
    digest: str
    corpus_checksum: str
    case_count: int
    size: int
    uploaded_at: str


class CorpusStore(Protocol):
    def initialize(self) -> None: ...
    def put(self, tenant: str, export: StoredExport, manifest: bytes, body: IO[bytes]) -> bool:
        """Store ``body`` (``export.size`` bytes); False when the digest is already held."""
        ...

    def get(self, tenant: str, digest: str) -> StoredExport | None: ...
    def chunks(self, tenant: str, digest: str) -> Iterator[bytes]: ...
    def list(self, tenant: str) -> list[StoredExport]: ...
    def close(self) -> None: ...


def _read_chunks(body: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    seq = 0
    while chunk := body.read(CHUNK_BYTES):
        yield seq, chunk
        seq += 1


_SELECT_EXPORTS: Final = (
    "SELECT digest, corpus_checksum, case_count, size, uploaded_at FROM corpus_exports "
    "WHERE tenant = ?"
)


class _SqlCorpusStore:
    """The queries, written once; subclasses open transactions and name the placeholder."""

    _placeholder: str = "?"

    def _transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A connection in one transaction, committed when the block completes."""
        raise NotImplementedError

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self._placeholder)

    def put(self, tenant: str, export: StoredExport, manifest: bytes, body: IO[bytes]) -> bool:
        with self._transaction() as db:
            inserted = db.execute(
                self._sql(
                    "INSERT INTO corpus_exports (tenant, digest, corpus_checksum, case_count, "
                    "size, manifest, uploaded_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (tenant, digest) DO NOTHING"
                ),
                (
                    tenant,
                    export.digest,
                    export.corpus_checksum,
                    export.case_count,
                    export.size,
                    manifest,
                    export.uploaded_at,
                ),
            ).rowcount
            if inserted != 1:
                return False  # held already: exports are immutable
            for seq, chunk in _read_chunks(body):
                db.execute(
                    self._sql(
                        "INSERT INTO corpus_chunks (tenant, digest, seq, data) VALUES (?, ?, ?, ?)"
                    ),
                    (tenant, export.digest, seq, chunk),
                )
        return True

    def get(self, tenant: str, digest: str) -> StoredExport | None:
        with self._transaction() as db:
            row = db.execute(
                self._sql(_SELECT_EXPORTS + " AND digest = ?"),
                (tenant, digest),
            ).fetchone()
        return None if row is None else _export(row)

    def chunks(self, tenant: str, digest: str) -> Iterator[bytes]:
        # One short transaction per chunk: a slow reader holds no lock and no more than 1 MiB.
        seq = 0
        while True:
            with self._transaction() as db:
                row = db.execute(
                    self._sql(
                        "SELECT data FROM corpus_chunks WHERE tenant = ? AND digest = ? AND seq = ?"
                    ),
                    (tenant, digest, seq),
                ).fetchone()
            if row is None:
                return
            yield bytes(row[0])
            seq += 1

    def list(self, tenant: str) -> list[StoredExport]:
        with self._transaction() as db:
            rows = db.execute(
                self._sql(_SELECT_EXPORTS + " ORDER BY uploaded_at, digest"),
                (tenant,),
            ).fetchall()
        return [_export(row) for row in rows]

    def close(self) -> None:
        """Nothing is kept open between operations."""


def _export(row: Sequence[Any]) -> StoredExport:
    digest, checksum, case_count, size, uploaded_at = row
    return StoredExport(str(digest), str(checksum), int(case_count), int(size), str(uploaded_at))


class SqliteCorpusStore(_SqlCorpusStore):
    """The tables in the service's SQLite file (WAL mode, set by the service's storage);
    ``BEGIN IMMEDIATE`` serializes writers with it."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._path = path
        # On a read-only filesystem (the service's storage found one) exports are served,
        # not stored: the file is opened immutable, and a write fails as SQLite's READONLY.
        self._read_only = read_only

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        mode = "ro&immutable=1" if self._read_only else "rwc"
        connection = sqlite3.connect(
            f"{self._path.resolve().as_uri()}?mode={mode}",
            uri=True,
            timeout=60,
            isolation_level=None,
        )
        try:
            connection.execute("PRAGMA busy_timeout = 60000")
            connection.execute("PRAGMA synchronous = FULL")
            connection.execute("BEGIN" if self._read_only else "BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        finally:
            connection.close()

    def initialize(self) -> None:
        if self._read_only or self._has_tables():
            # Nothing to create (a write a file that is briefly not writable would refuse),
            # or nothing can be: reads answer from what is there.
            return
        with self._transaction() as db:
            for statement in SCHEMA:
                db.execute(statement.format(blob="BLOB"))

    def _has_tables(self) -> bool:
        if not self._path.exists():
            return False
        connection = sqlite3.connect(f"{self._path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        finally:
            connection.close()
        return {"corpus_exports", "corpus_chunks"} <= names


class PostgresCorpusStore(_SqlCorpusStore):
    """The tables in the service's PostgreSQL database; one connection per operation (exports
    are few and large: a pool would not pay)."""

    _placeholder = "%s"

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        with psycopg.connect(self._dsn) as connection, connection.transaction():
            yield connection

    def initialize(self) -> None:
        with self._transaction() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (tenant_lock_key("-corpus-schema-"),))
            for statement in SCHEMA:
                db.execute(statement.format(blob="BYTEA"))


def open_corpus_store(location: str, *, read_only: bool = False) -> CorpusStore:
    """The store in the service's database: a ``postgresql://`` DSN or a SQLite file (which
    the service's storage created; ``read_only`` when it is on a read-only filesystem)."""
    if location.startswith(("postgresql://", "postgres://")):
        store: CorpusStore = PostgresCorpusStore(location)
    else:
        store = SqliteCorpusStore(Path(location), read_only=read_only)
    store.initialize()
    return store
