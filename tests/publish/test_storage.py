"""Storage behaviour that the HTTP tests cannot provoke: a write that fails inside SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner.publish.storage import RunPointer, SqliteStorage

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def test_a_failed_run_pointer_write_leaves_the_connection_usable(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "publish.sqlite3")
    storage.initialize()
    with sqlite3.connect(storage.path) as db:
        # A real statement failure inside the write transaction (as a full disk would give).
        db.execute(
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON runs WHEN NEW.run_id = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    try:
        with pytest.raises(sqlite3.IntegrityError, match="injected failure"):
            storage.set_run("acme", "boom", DIGEST_A)
        # The same thread's connection is reused: it must not be stuck in that transaction.
        assert storage.set_run("acme", "run-1", DIGEST_A) is RunPointer.CREATED
        assert storage.set_run("acme", "run-1", DIGEST_A) is RunPointer.UNCHANGED
        assert storage.set_run("acme", "run-1", DIGEST_B) is RunPointer.CONFLICT
        assert storage.run_digest("acme", "boom") is None
        assert storage.run_digest("acme", "run-1") == DIGEST_A
    finally:
        storage.close()
