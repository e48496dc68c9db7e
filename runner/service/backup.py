"""``attested-replay server backup``: a consistent copy of the service's SQLite database.

SQLite's online backup API copies the pages of one committed state while the service keeps
writing. The copy is made beside the destination, checked (``PRAGMA integrity_check``), made
durable and only then renamed to its name, so a file with that name is always a whole backup.
PostgreSQL is backed up with ``pg_dump`` (docs/publishing.md).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from runner.errors import UsageError
from runner.service.log.storage import StorageUnavailableError


def backup_sqlite(database: Path, out: Path) -> dict[str, int]:
    """Copy ``database`` to ``out`` (which must not exist); return each tenant's log size in
    the copy."""
    if not database.is_file():
        raise UsageError(f"--db {database}: no such SQLite database")
    if out.exists():
        raise UsageError(f"--out {out}: exists; a backup never overwrites a file")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: directory {out.parent} does not exist")
    partial = out.with_name(f".{out.name}.partial")
    try:
        _copy(database, partial)
        sizes = _check(partial)
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(partial, out)  # fails if ``out`` appeared meanwhile: never overwritten
        directory = os.open(out.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return sizes


def _copy(database: Path, partial: Path) -> None:
    # Read-only: the backup never writes to (or checkpoints) the live database.
    source = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
    try:
        target = sqlite3.connect(partial)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
        finally:
            target.close()
    except sqlite3.Error as exc:
        raise StorageUnavailableError(f"cannot copy {database}: {exc}") from exc
    finally:
        source.close()


def _check(path: Path) -> dict[str, int]:
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        (verdict,) = connection.execute("PRAGMA integrity_check").fetchone()
        if verdict != "ok":
            raise StorageUnavailableError(f"the copy fails SQLite's integrity check: {verdict}")
        rows = connection.execute(
            "SELECT tenant, COALESCE(MAX(log_index) + 1, 0) FROM log_entries GROUP BY tenant"
        ).fetchall()
    finally:
        connection.close()
    return {str(tenant): int(size) for tenant, size in rows}
