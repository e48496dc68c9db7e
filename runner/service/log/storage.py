"""Storage of the publication service: SQLite (default) and PostgreSQL behind one interface.

Tables: ``tokens`` (SHA-256 of each bearer token, its tenant and role, when it was created and
revoked), ``envelopes`` (exact bytes by tenant and digest, the log index of their entry and
when they were published), ``log_entries`` (the append-only per-tenant log), ``run_pointers``
(write-once: which envelope is a run's, per part of the run) and ``signed_heads`` (each
tenant's last signed checkpoint).

The log is written only in :meth:`Storage.transaction`, which the sequencer of
:mod:`runner.service.log.sequencer` opens once per batch: SQLite takes ``BEGIN IMMEDIATE`` (one
writer across processes), PostgreSQL a transaction-scoped advisory lock per tenant, in sorted
order.

Faults are mapped in one place: a full disk raises :class:`StorageFullError` (HTTP 507), a
store that cannot be written or reached now :class:`StorageUnavailableError` (HTTP 503). A
connection that saw an error is closed and never reused, so a store that recovers (a
permission restored, space freed, a database back) serves again without a restart.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import os
import queue
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final, NoReturn, Protocol

import psycopg
from psycopg import errors as pg_errors

SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS tokens (
        token_hash TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL,
        created_at TEXT, revoked_at TEXT)""",
    """CREATE TABLE IF NOT EXISTS envelopes (
        tenant TEXT NOT NULL, digest TEXT NOT NULL, data {blob} NOT NULL,
        log_index BIGINT NOT NULL, published_at TEXT, PRIMARY KEY (tenant, digest))""",
    """CREATE TABLE IF NOT EXISTS log_entries (
        tenant TEXT NOT NULL, log_index BIGINT NOT NULL, entry {blob} NOT NULL,
        PRIMARY KEY (tenant, log_index))""",
    """CREATE TABLE IF NOT EXISTS run_pointers (
        tenant TEXT NOT NULL, run_id TEXT NOT NULL, part TEXT NOT NULL, digest TEXT NOT NULL,
        PRIMARY KEY (tenant, run_id, part))""",
    """CREATE TABLE IF NOT EXISTS signed_heads (
        tenant TEXT PRIMARY KEY, size BIGINT NOT NULL, root {blob} NOT NULL,
        note TEXT NOT NULL)""",
)
#: Columns added after the first release, added to an older store when missing.
ADDED_COLUMNS: Final = (
    ("tokens", "created_at", "TEXT"),
    ("tokens", "revoked_at", "TEXT"),
    ("envelopes", "published_at", "TEXT"),
)
#: The first release kept run pointers in ``runs (tenant, run_id, digest)``: whole runs only.
_LEGACY_RUNS_COPY: Final = (
    "INSERT INTO run_pointers (tenant, run_id, part, digest) "
    "SELECT tenant, run_id, '', digest FROM runs"
)
#: The part of a run an unsharded or merged envelope stands for (a shard's is its index).
WHOLE_RUN: Final = ""


class Role(StrEnum):
    OPERATOR = "operator"  # writes envelopes for its tenant (and may read them back)
    TENANT = "tenant"  # reads its own tenant's envelopes and log


class StorageError(Exception):
    """The store could not do what was asked; the message says why in the operator's terms."""


class StorageFullError(StorageError):
    """The disk (or the database server's) is full: HTTP 507, nothing was stored."""


class StorageUnavailableError(StorageError):
    """The store cannot be written or reached right now: HTTP 503, retry later."""


class DigestCollisionError(StorageError):
    """Stored bytes under a digest differ from new bytes with the same digest (corruption)."""


def utc_now() -> str:
    """The server clock as RFC 3339 UTC (a publication or upload time is the operator's
    statement, not part of anything signed)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class TokenRecord:
    token_hash: str
    tenant: str
    role: Role
    created_at: str | None
    revoked_at: str | None


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One envelope integrated into a tenant's log."""

    tenant: str
    log_index: int
    entry: bytes
    digest: str
    data: bytes
    published_at: str


@dataclass(frozen=True, slots=True)
class RunPointer:
    """``run_id``'s ``part`` (:data:`WHOLE_RUN`, or a shard index as text) is ``digest``."""

    tenant: str
    run_id: str
    part: str
    digest: str


@dataclass(frozen=True, slots=True)
class ListedEntry:
    log_index: int
    entry: bytes
    published_at: str | None


class LogTransaction(Protocol):
    """The log's reads and writes inside one transaction (or, for reads, one snapshot)."""

    def head(self, tenant: str) -> str | None:
        """The tenant's last signed checkpoint note, if any."""
        ...

    def entries_since(self, tenant: str, start: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` (index, entry) rows with index >= ``start``, in index order."""
        ...

    def size(self, tenant: str) -> int:
        """One more than the largest log index stored (0 for none)."""
        ...

    def envelopes(self, tenant: str, digests: Sequence[str]) -> dict[str, tuple[bytes, int]]:
        """Bytes and log index of those of ``digests`` that are stored."""
        ...

    def run_parts(self, tenant: str, run_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """Every pointer of those runs that have one: run ID -> part -> envelope digest."""
        ...

    def append(self, rows: Sequence[EntryRow]) -> None: ...
    def set_run_pointers(self, pointers: Sequence[RunPointer]) -> None: ...
    def put_head(self, tenant: str, size: int, root: bytes, note: str) -> None: ...


class Storage(Protocol):
    read_only: bool

    def initialize(self) -> None: ...
    def transaction(
        self, tenants: Sequence[str]
    ) -> contextlib.AbstractContextManager[LogTransaction]:
        """A write transaction holding the append locks of ``tenants``; commits on success."""
        ...

    def snapshot(self) -> contextlib.AbstractContextManager[LogTransaction]:
        """A consistent read-only view (the writing methods must not be called)."""
        ...

    def tenants(self) -> list[str]:
        """Every tenant with log entries or a signed head."""
        ...

    def add_token(self, token_hash: str, tenant: str, role: Role) -> None: ...
    def token(self, token_hash: str) -> TokenRecord | None: ...
    def tokens(self) -> list[TokenRecord]: ...
    def revoke_tokens(self, hash_prefix: str) -> list[TokenRecord]:
        """Revoke every unrevoked token whose hash starts with ``hash_prefix``; return them."""
        ...

    def envelope(self, tenant: str, digest: str) -> tuple[bytes, int] | None:
        """Bytes and log index of a stored envelope."""
        ...

    def run_digest(self, tenant: str, run_id: str, part: str = WHOLE_RUN) -> str | None: ...
    def run_shards(self, tenant: str, run_id: str) -> list[int]:
        """The shard indices of ``run_id`` that have an envelope, in ascending order."""
        ...

    def log_entries(self, tenant: str, start: int, end: int) -> list[bytes]:
        """Entries with ``start <= index < end``, in index order."""
        ...

    def listing(self, tenant: str, start: int, limit: int) -> list[ListedEntry]:
        """Up to ``limit`` entries from ``start`` with their publication times."""
        ...

    def log_size(self, tenant: str) -> int: ...
    def close(self) -> None:
        """Close every connection (SQLite: after moving the WAL into the database file)."""
        ...


def tenant_lock_key(tenant: str) -> int:
    """A signed 64-bit PostgreSQL advisory-lock key for one tenant's log."""
    return int.from_bytes(
        hashlib.sha256(b"attested-replay log " + tenant.encode()).digest()[:8], "big", signed=True
    )


def storage_error_from_os(exc: OSError, what: str) -> StorageError:
    """A filesystem error (the head journal, the state directory) in storage terms."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFullError(f"{what}: the disk is full ({exc.strerror})")
    return StorageUnavailableError(f"{what}: {exc.strerror or exc}")


def classify_database_error(exc: BaseException) -> StorageError | None:
    """A database driver's error as a storage fault, or None for anything else (a bug)."""
    if isinstance(exc, sqlite3.Error):
        return _sqlite_fault(exc, None)
    if isinstance(exc, psycopg.Error):
        return _pg_fault(exc)
    return None


_SELECT_TOKENS: Final = "SELECT token_hash, tenant, role, created_at, revoked_at FROM tokens"
_SIZE: Final = "SELECT COALESCE(MAX(log_index) + 1, 0) FROM log_entries WHERE tenant = %s"
_LISTING: Final = (
    "SELECT l.log_index, l.entry, e.published_at FROM log_entries l "
    "LEFT JOIN envelopes e ON e.tenant = l.tenant AND e.log_index = l.log_index "
    "WHERE l.tenant = %s AND l.log_index >= %s ORDER BY l.log_index LIMIT %s"
)


def _token(row: Sequence[object]) -> TokenRecord:
    created, revoked = row[3], row[4]
    return TokenRecord(
        token_hash=str(row[0]),
        tenant=str(row[1]),
        role=Role(str(row[2])),
        created_at=None if created is None else str(created),
        revoked_at=None if revoked is None else str(revoked),
    )


def _listed(row: Sequence[object]) -> ListedEntry:
    index, entry, published_at = row
    return ListedEntry(
        int(str(index)), _bytes(entry), None if published_at is None else str(published_at)
    )


def _bytes(value: object) -> bytes:
    assert isinstance(value, bytes | memoryview)  # BLOB, BYTEA
    return bytes(value)


class _StoreReads:
    """The reads both stores answer with the same SQL, written with ``%s`` placeholders
    (SQLite's ``?`` is substituted); :meth:`_rows` runs one statement on a connection."""

    def _rows(self, statement: str, parameters: Sequence[object]) -> list[Sequence[object]]:
        raise NotImplementedError

    def tenants(self) -> list[str]:
        rows = self._rows(
            "SELECT DISTINCT tenant FROM log_entries UNION SELECT tenant FROM signed_heads", ()
        )
        return sorted(str(row[0]) for row in rows)

    def token(self, token_hash: str) -> TokenRecord | None:
        rows = self._rows(_SELECT_TOKENS + " WHERE token_hash = %s", (token_hash,))
        return _token(rows[0]) if rows else None

    def tokens(self) -> list[TokenRecord]:
        rows = self._rows(_SELECT_TOKENS + " ORDER BY tenant, created_at, token_hash", ())
        return [_token(row) for row in rows]

    def envelope(self, tenant: str, digest: str) -> tuple[bytes, int] | None:
        rows = self._rows(
            "SELECT data, log_index FROM envelopes WHERE tenant = %s AND digest = %s",
            (tenant, digest),
        )
        return (_bytes(rows[0][0]), int(str(rows[0][1]))) if rows else None

    def run_digest(self, tenant: str, run_id: str, part: str = WHOLE_RUN) -> str | None:
        rows = self._rows(
            "SELECT digest FROM run_pointers WHERE tenant = %s AND run_id = %s AND part = %s",
            (tenant, run_id, part),
        )
        return str(rows[0][0]) if rows else None

    def run_shards(self, tenant: str, run_id: str) -> list[int]:
        rows = self._rows(
            "SELECT part FROM run_pointers WHERE tenant = %s AND run_id = %s AND part <> %s",
            (tenant, run_id, WHOLE_RUN),
        )
        return sorted(int(str(row[0])) for row in rows)

    def log_entries(self, tenant: str, start: int, end: int) -> list[bytes]:
        rows = self._rows(
            "SELECT entry FROM log_entries WHERE tenant = %s AND log_index >= %s "
            "AND log_index < %s ORDER BY log_index",
            (tenant, start, end),
        )
        return [_bytes(row[0]) for row in rows]

    def listing(self, tenant: str, start: int, limit: int) -> list[ListedEntry]:
        return [_listed(row) for row in self._rows(_LISTING, (tenant, start, limit))]

    def log_size(self, tenant: str) -> int:
        rows = self._rows(_SIZE, (tenant,))
        return int(str(rows[0][0])) if rows else 0


class _Statements(Protocol):
    """One connection's statement runner, with ``%s`` placeholders in either database."""

    def rows(self, statement: str, parameters: Sequence[object]) -> list[Sequence[object]]: ...
    def run(self, statement: str, parameters: Sequence[object]) -> None: ...
    def run_many(self, statement: str, rows: Sequence[Sequence[object]]) -> None: ...


#: At most this many values in one ``IN (...)`` list (SQLite before 3.32 allowed 999
#: parameters a statement; a batch's lists are far shorter).
_IN_LIST_CHUNK: Final = 500


def _chunks(values: Sequence[str]) -> Iterator[list[str]]:
    unique = list(dict.fromkeys(values))
    for start in range(0, len(unique), _IN_LIST_CHUNK):
        yield unique[start : start + _IN_LIST_CHUNK]


def _in_list(count: int) -> str:
    return "(" + ", ".join(["%s"] * count) + ")"


class _Transaction:
    """The log's statements in one write (or snapshot) transaction, the same SQL on either
    database: ``statements`` runs them on the transaction's connection."""

    def __init__(self, statements: _Statements) -> None:
        self._db = statements

    def head(self, tenant: str) -> str | None:
        rows = self._db.rows("SELECT note FROM signed_heads WHERE tenant = %s", (tenant,))
        return str(rows[0][0]) if rows else None

    def entries_since(self, tenant: str, start: int, limit: int) -> list[tuple[int, bytes]]:
        rows = self._db.rows(
            "SELECT log_index, entry FROM log_entries WHERE tenant = %s AND log_index >= %s "
            "ORDER BY log_index LIMIT %s",
            (tenant, start, limit),
        )
        return [(int(str(index)), _bytes(entry)) for index, entry in rows]

    def size(self, tenant: str) -> int:
        rows = self._db.rows(_SIZE, (tenant,))
        return int(str(rows[0][0])) if rows else 0

    def envelopes(self, tenant: str, digests: Sequence[str]) -> dict[str, tuple[bytes, int]]:
        rows = self._rows_in(
            "SELECT digest, data, log_index FROM envelopes", "digest", tenant, digests
        )
        return {str(d): (_bytes(data), int(str(i))) for d, data, i in rows}

    def run_parts(self, tenant: str, run_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        select = "SELECT run_id, part, digest FROM run_pointers"
        for run_id, part, digest in self._rows_in(select, "run_id", tenant, run_ids):
            found.setdefault(str(run_id), {})[str(part)] = str(digest)
        return found

    def _rows_in(
        self, select: str, column: str, tenant: str, values: Sequence[str]
    ) -> list[Sequence[object]]:
        """``select`` of ``tenant``'s rows whose ``column`` is one of ``values`` (each once),
        in ``IN`` lists of at most :data:`_IN_LIST_CHUNK` parameters."""
        rows: list[Sequence[object]] = []
        for chunk in _chunks(values):
            listed = _in_list(len(chunk))  # placeholders only: the values are parameters
            statement = f"{select} WHERE tenant = %s AND {column} IN {listed}"
            rows += self._db.rows(statement, (tenant, *chunk))
        return rows

    def append(self, rows: Sequence[EntryRow]) -> None:
        self._db.run_many(
            "INSERT INTO log_entries (tenant, log_index, entry) VALUES (%s, %s, %s)",
            [(r.tenant, r.log_index, r.entry) for r in rows],
        )
        self._db.run_many(
            "INSERT INTO envelopes (tenant, digest, data, log_index, published_at) "
            "VALUES (%s, %s, %s, %s, %s)",
            [(r.tenant, r.digest, r.data, r.log_index, r.published_at) for r in rows],
        )

    def set_run_pointers(self, pointers: Sequence[RunPointer]) -> None:
        self._db.run_many(
            "INSERT INTO run_pointers (tenant, run_id, part, digest) VALUES (%s, %s, %s, %s)",
            [(p.tenant, p.run_id, p.part, p.digest) for p in pointers],
        )

    def put_head(self, tenant: str, size: int, root: bytes, note: str) -> None:
        self._db.run(
            "INSERT INTO signed_heads (tenant, size, root, note) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (tenant) DO UPDATE SET size = excluded.size, root = excluded.root, "
            "note = excluded.note",
            (tenant, size, root, note),
        )


class _SqliteStatements:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def rows(self, statement: str, parameters: Sequence[object]) -> list[Sequence[object]]:
        return list(self._db.execute(statement.replace("%s", "?"), parameters).fetchall())

    def run(self, statement: str, parameters: Sequence[object]) -> None:
        self._db.execute(statement.replace("%s", "?"), parameters)

    def run_many(self, statement: str, rows: Sequence[Sequence[object]]) -> None:
        self._db.executemany(statement.replace("%s", "?"), rows)


class _PostgresStatements:
    def __init__(self, db: Connection) -> None:
        self._db = db

    def rows(self, statement: str, parameters: Sequence[object]) -> list[Sequence[object]]:
        return list(self._db.execute(statement, parameters).fetchall())

    def run(self, statement: str, parameters: Sequence[object]) -> None:
        self._db.execute(statement, parameters)

    def run_many(self, statement: str, rows: Sequence[Sequence[object]]) -> None:
        with self._db.cursor() as cursor:
            cursor.executemany(statement, rows)


# -- SQLite ---------------------------------------------------------------------------------

#: SQLite result codes (``sqlite3.Error.sqlite_errorname``, extended codes start with these)
#: that describe the store's state rather than the statement.
_SQLITE_UNAVAILABLE: Final = (
    "SQLITE_READONLY",
    "SQLITE_CANTOPEN",
    "SQLITE_IOERR",
    "SQLITE_PERM",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_PROTOCOL",
    "SQLITE_NOTADB",
    "SQLITE_CORRUPT",
)


def _sqlite_fault(exc: sqlite3.Error, path: Path | None) -> StorageError | None:
    name = getattr(exc, "sqlite_errorname", "") or ""
    where = f"the SQLite store {path}" if path else "the SQLite store"
    if name.startswith("SQLITE_FULL"):
        return StorageFullError(f"the disk holding {where} is full ({exc})")
    if name.startswith(_SQLITE_UNAVAILABLE):
        return StorageUnavailableError(f"{where} cannot be used now ({name}: {exc})")
    return None


def _reraise_sqlite(exc: sqlite3.Error, path: Path) -> NoReturn:
    fault = _sqlite_fault(exc, path)
    if fault is None:
        raise exc  # a constraint or programming error: not the store's state
    raise fault from exc


def _filesystem_is_read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _unmerged_wal(database: Path) -> bool:
    """Whether ``database`` (on a read-only filesystem) has commits in a non-empty ``-wal``
    file, which SQLite can read there only through an existing ``-shm`` file.

    Raises:
        StorageUnavailableError: a non-empty WAL without its ``-shm`` file: refused, never
            read without those commits.
    """
    wal = Path(f"{database}-wal")
    try:
        size = wal.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    if not Path(f"{database}-shm").exists():
        raise StorageUnavailableError(
            f"the SQLite store {database} is on a read-only filesystem and its write-ahead log "
            f"{wal} holds {size} bytes of commits not yet merged into the database (the last "
            f"writer stopped uncleanly), but its {database.name}-shm file is missing, without "
            "which SQLite cannot read the log on a read-only filesystem. Nothing is lost: "
            "remount the directory read-write and start serve once (or run `sqlite3 "
            f"{database} 'PRAGMA wal_checkpoint(TRUNCATE)'`) to merge it, then stop it and "
            "remount read-only"
        )
    return True


def _readonly(exc: sqlite3.Error) -> bool:
    return (getattr(exc, "sqlite_errorname", "") or "").startswith("SQLITE_READONLY")


def _create_schema(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("BEGIN IMMEDIATE")
    for statement in SCHEMA:
        connection.execute(statement.format(blob="BLOB"))
    for table, column, kind in ADDED_COLUMNS:
        columns = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
        if column not in columns:
            connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    legacy = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
    ).fetchone()
    if legacy is not None:
        connection.execute(_LEGACY_RUNS_COPY)
        connection.execute("DROP TABLE runs")
    connection.execute("COMMIT")


def _has_current_schema(connection: sqlite3.Connection) -> bool:
    names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    return {"signed_heads", "run_pointers"} <= names and "runs" not in names


class SqliteStorage(_StoreReads):
    """One SQLite file in WAL mode; ``BEGIN IMMEDIATE`` serializes writers across processes.

    On a read-only filesystem the file is opened read-only: reads are served, writes fail as
    unavailable. Immutable (no locks, no WAL) after a clean stop, which leaves the WAL empty
    or gone; after an unclean one (SIGKILL, OOM, power loss, a kernel remount-ro after an I/O
    error) the last commits are only in the ``-wal`` file, so the database is opened
    read-only *with* its WAL, which SQLite reads through the existing ``-shm`` file (a
    private copy of its index when the file cannot be written; sqlite.org/wal.html, "Read-Only
    Databases", 3.22.0 and later). Without the ``-shm`` that cannot be done on a read-only
    filesystem, and :meth:`initialize` refuses to start, naming the WAL and how to merge it:
    opening immutable would silently drop those commits.
    """

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"SQLite synchronous mode must be FULL or NORMAL, not {synchronous!r}")
        self.path = path
        # FULL fsyncs the WAL on every commit: an acknowledged envelope survives power loss.
        # NORMAL survives process crashes only; a throughput knob for disposable stores.
        self._synchronous = synchronous
        self.read_only = False
        #: Read-only and immutable: no unmerged WAL (see the class docstring).
        self._immutable = False
        # Writers of this process queue here instead of in SQLite's busy handler, which sleeps
        # in steps of up to 100 ms; BEGIN IMMEDIATE still serializes other processes.
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._all: set[sqlite3.Connection] = set()
        self._in_use: set[sqlite3.Connection] = set()
        self._all_lock = threading.Lock()

    def _open(self, mode: str) -> sqlite3.Connection:
        # mode=rw: a file this process may not write fails loudly here, instead of SQLite
        # quietly opening it read-only and the connection failing every later write for good.
        uri = f"{self.path.resolve().as_uri()}?mode={mode}"
        if self.read_only:
            immutable = "&immutable=1" if self._immutable else ""
            uri = f"{self.path.resolve().as_uri()}?mode=ro{immutable}"
        connection = sqlite3.connect(
            uri, uri=True, timeout=60, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute("PRAGMA busy_timeout = 60000")
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
        except BaseException:
            connection.close()
            raise
        return connection

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # One long-lived connection per thread: opening one per operation would make every
        # "last" close checkpoint and delete the WAL, which dominates under load.
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        try:
            with self._all_lock:
                if connection is not None and connection not in self._all:
                    connection = None  # closed by _forget_all: this thread opens a new one
                if connection is None:
                    connection = self._open("rw")
                    self._local.connection = connection
                    self._all.add(connection)
                self._in_use.add(connection)
            try:
                yield connection
            finally:
                with self._all_lock:
                    self._in_use.discard(connection)
        except sqlite3.Error as exc:
            # Never reuse a connection that saw an error: it may be in a failed transaction,
            # on a file that was replaced, or opened when the file was not writable.
            if connection is not None:
                self._drop(connection)
            if _readonly(exc):
                # While any connection of this process has the file open read-only, SQLite
                # opens every new one read-only too: all of them go, not only this one.
                self._forget_all()
            _reraise_sqlite(exc, self.path)

    def _drop(self, connection: sqlite3.Connection) -> None:
        self._local.connection = None
        with self._all_lock:
            self._all.discard(connection)
        with contextlib.suppress(sqlite3.Error):
            connection.close()

    def _forget_all(self) -> None:
        """Close every idle connection; those in use are closed by their threads' next use
        (a connection no longer in ``_all`` is replaced there)."""
        with self._all_lock:
            idle = self._all - self._in_use
            self._all -= idle
        for connection in idle:
            with contextlib.suppress(sqlite3.Error):
                connection.close()

    def initialize(self) -> None:
        if self.path.exists() and _filesystem_is_read_only(self.path.parent):
            self.read_only = True
            self._immutable = not _unmerged_wal(self.path)
            with self._connect() as db:
                db.execute("SELECT count(*) FROM signed_heads").fetchone()
            return
        try:
            connection = self._open("rwc")
        except sqlite3.Error as exc:
            _reraise_sqlite(exc, self.path)
        try:
            _create_schema(connection)
        except sqlite3.Error as exc:
            if connection.in_transaction:
                connection.rollback()
            # A file that is not writable right now (a permission being repaired) but holds a
            # current schema: reads are served, and every write fails as unavailable until
            # the file is writable again, on a fresh connection each time.
            if not _readonly(exc) or not _has_current_schema(connection):
                _reraise_sqlite(exc, self.path)
        finally:
            connection.close()

    @contextlib.contextmanager
    def transaction(self, tenants: Sequence[str]) -> Iterator[LogTransaction]:
        del tenants  # BEGIN IMMEDIATE locks the whole database
        with self._immediate() as db:
            yield _Transaction(_SqliteStatements(db))

    @contextlib.contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``) under the write lock: committed when the
        block ends, rolled back when it raises."""
        self._check_writable()
        with self._write_lock, self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise

    def _check_writable(self) -> None:
        if self.read_only:
            raise StorageUnavailableError(
                f"the SQLite store {self.path} is on a read-only filesystem"
            )

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LogTransaction]:
        with self._connect() as db:
            db.execute("BEGIN")  # deferred: one read snapshot for every statement below
            try:
                yield _Transaction(_SqliteStatements(db))
            finally:
                if db.in_transaction:
                    db.execute("COMMIT")

    def _rows(self, statement: str, parameters: Sequence[object]) -> list[Sequence[object]]:
        with self._connect() as db:
            return list(db.execute(statement.replace("%s", "?"), parameters).fetchall())

    def _write(self, statement: str, parameters: Sequence[object]) -> None:
        self._check_writable()
        with self._write_lock, self._connect() as db:
            db.execute(statement, parameters)

    def add_token(self, token_hash: str, tenant: str, role: Role) -> None:
        self._write(
            "INSERT INTO tokens (token_hash, tenant, role, created_at) VALUES (?, ?, ?, ?)",
            (token_hash, tenant, role.value, utc_now()),
        )

    def revoke_tokens(self, hash_prefix: str) -> list[TokenRecord]:
        revoked_at = utc_now()
        with self._immediate() as db:
            rows = db.execute(
                _SELECT_TOKENS + " WHERE substr(token_hash, 1, ?) = ? AND revoked_at IS NULL",
                (len(hash_prefix), hash_prefix),
            ).fetchall()
            db.executemany(
                "UPDATE tokens SET revoked_at = ? WHERE token_hash = ?",
                [(revoked_at, row[0]) for row in rows],
            )
        return [_token((*row[:4], revoked_at)) for row in rows]

    def close(self) -> None:
        with self._all_lock:
            connections, self._all = self._all, set()
        self._local = threading.local()
        if connections and not self.read_only:
            # Move the WAL into the database file, so that the file alone holds every entry
            # (a copy of a stopped server's database is then complete).
            with contextlib.suppress(sqlite3.Error):
                next(iter(connections)).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for connection in connections:
            with contextlib.suppress(sqlite3.Error):
                connection.close()


# -- PostgreSQL -----------------------------------------------------------------------------

Connection = psycopg.Connection[tuple[object, ...]]


def _pg_fault(exc: psycopg.Error) -> StorageError | None:
    if isinstance(exc, pg_errors.DiskFull | pg_errors.OutOfMemory):
        return StorageFullError(f"the PostgreSQL server is out of space ({exc.sqlstate}: {exc})")
    if isinstance(
        exc,
        psycopg.OperationalError
        | pg_errors.ReadOnlySqlTransaction
        | pg_errors.AdminShutdown
        | pg_errors.CannotConnectNow
        | pg_errors.InsufficientPrivilege,
    ):
        return StorageUnavailableError(f"the PostgreSQL store is unavailable ({exc})")
    return None


def _reraise_pg(exc: psycopg.Error) -> NoReturn:
    fault = _pg_fault(exc)
    if fault is None:
        raise exc  # a constraint or programming error: not the store's state
    raise fault from exc


class PostgresStorage(_StoreReads):
    """PostgreSQL through psycopg 3 with a small connection pool. A connection that saw an
    error is closed, never returned to the pool."""

    read_only = False

    def __init__(self, dsn: str, *, pool_size: int = 16) -> None:
        self.dsn = dsn
        self._idle: queue.LifoQueue[Connection] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(pool_size)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        with self._slots:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                try:
                    connection = psycopg.connect(self.dsn)
                except psycopg.Error as exc:
                    _reraise_pg(exc)
            healthy = False
            try:
                with connection.transaction():
                    yield connection
                healthy = True
            except psycopg.Error as exc:
                _reraise_pg(exc)
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
            for table, column, kind in ADDED_COLUMNS:
                db.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
            legacy = db.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_name = 'runs' "
                "AND table_schema = current_schema()"
            ).fetchone()
            if legacy is not None:
                db.execute(_LEGACY_RUNS_COPY)
                db.execute("DROP TABLE runs")

    @contextlib.contextmanager
    def transaction(self, tenants: Sequence[str]) -> Iterator[LogTransaction]:
        with self._connect() as db:
            for tenant in sorted(set(tenants)):  # one order everywhere: no deadlock
                db.execute("SELECT pg_advisory_xact_lock(%s)", (tenant_lock_key(tenant),))
            yield _Transaction(_PostgresStatements(db))

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LogTransaction]:
        with self._connect() as db:
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield _Transaction(_PostgresStatements(db))

    def _rows(self, statement: str, parameters: Sequence[object]) -> list[Sequence[object]]:
        with self._connect() as db:
            return list(db.execute(statement, parameters).fetchall())

    def add_token(self, token_hash: str, tenant: str, role: Role) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT INTO tokens (token_hash, tenant, role, created_at) VALUES (%s, %s, %s, %s)",
                (token_hash, tenant, role.value, utc_now()),
            )

    def revoke_tokens(self, hash_prefix: str) -> list[TokenRecord]:
        with self._connect() as db:
            rows = db.execute(
                "UPDATE tokens SET revoked_at = %s WHERE starts_with(token_hash, %s) "
                "AND revoked_at IS NULL RETURNING token_hash, tenant, role, created_at, revoked_at",
                (utc_now(), hash_prefix),
            ).fetchall()
        return sorted((_token(row) for row in rows), key=lambda t: t.token_hash)

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def is_postgres_location(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def open_storage(location: str, *, sqlite_synchronous: str = "FULL") -> Storage:
    """A ``postgresql://`` or ``postgres://`` DSN opens PostgreSQL; anything else is SQLite."""
    if is_postgres_location(location):
        storage: Storage = PostgresStorage(location)
    else:
        storage = SqliteStorage(Path(location), synchronous=sqlite_synchronous)
    storage.initialize()
    return storage
