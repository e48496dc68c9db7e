"""Storage behaviour the HTTP tests cannot provoke: failed statements, an older store's schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner.service.log.storage import (
    WHOLE_RUN,
    EntryRow,
    RunPointer,
    SqliteStorage,
    Storage,
)

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def _append(storage: Storage, index: int, digest: str, run_id: str) -> None:
    with storage.transaction(["acme"]) as txn:
        txn.append(
            [EntryRow("acme", index, b"entry-%d" % index, digest, b"{}", "2026-12-01T00:00:00Z")]
        )
        txn.set_run_pointers([RunPointer("acme", run_id, WHOLE_RUN, digest)])


def test_a_failed_statement_rolls_back_and_the_next_transaction_works(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "publish.sqlite3")
    storage.initialize()
    with sqlite3.connect(storage.path) as db:
        # A real statement failure inside the write transaction (as a full disk would give).
        db.execute(
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON run_pointers WHEN NEW.run_id = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    try:
        with pytest.raises(sqlite3.IntegrityError, match="injected failure"):
            _append(storage, 0, DIGEST_A, "boom")
        # Nothing of the failed transaction is left, and the storage keeps working.
        assert storage.log_size("acme") == 0
        assert storage.envelope("acme", DIGEST_A) is None
        _append(storage, 0, DIGEST_B, "run-1")
        assert storage.log_size("acme") == 1
        assert storage.run_digest("acme", "run-1") == DIGEST_B
        assert storage.run_digest("acme", "boom") is None
        [listed] = storage.listing("acme", 0, 10)
        assert (listed.log_index, listed.entry, listed.published_at) == (
            0,
            b"entry-0",
            "2026-12-01T00:00:00Z",
        )
    finally:
        storage.close()


def test_a_store_of_the_first_release_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "publish.sqlite3"
    with sqlite3.connect(path) as db:  # the first release's schema, with one run and one token
        db.execute("CREATE TABLE tokens (token_hash TEXT PRIMARY KEY, tenant TEXT, role TEXT)")
        db.execute(
            "CREATE TABLE envelopes (tenant TEXT NOT NULL, digest TEXT NOT NULL, data BLOB NOT "
            "NULL, log_index BIGINT NOT NULL, PRIMARY KEY (tenant, digest))"
        )
        db.execute(
            "CREATE TABLE runs (tenant TEXT NOT NULL, run_id TEXT NOT NULL, digest TEXT NOT NULL, "
            "PRIMARY KEY (tenant, run_id))"
        )
        db.execute("INSERT INTO runs VALUES ('acme', 'run-1', ?)", (DIGEST_A,))
        db.execute("INSERT INTO tokens VALUES ('ab' || 'cd', 'acme', 'tenant')")
        db.execute("INSERT INTO envelopes VALUES ('acme', ?, x'7b7d', 0)", (DIGEST_A,))
    storage = SqliteStorage(path)
    storage.initialize()
    try:
        assert storage.run_digest("acme", "run-1") == DIGEST_A
        token = storage.token("abcd")
        assert token is not None
        assert (token.tenant, token.created_at, token.revoked_at) == ("acme", None, None)
        assert storage.envelope("acme", DIGEST_A) == (b"{}", 0)
    finally:
        storage.close()
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "runs" not in tables
    assert {"run_pointers", "signed_heads"} <= tables


def test_a_batch_larger_than_one_statement_is_written_and_read_back_whole(
    storage: Storage,
) -> None:
    """A batch of 250 rows: every row is written once and every lookup finds exactly what it
    asked for (a repeated digest, one never stored, another part of a stored run)."""
    count = 250
    digests = [f"sha256:{n:064x}" for n in range(count)]
    rows = [
        EntryRow("acme", n, b"entry-%d" % n, digests[n], b"{%d}" % n, "2026-12-01T00:00:00Z")
        for n in range(count)
    ]
    pointers = [RunPointer("acme", f"run-{n}", str(n % 3), digests[n]) for n in range(count)]
    with storage.transaction(["acme"]) as txn:
        assert txn.envelopes("acme", digests) == {}
        txn.append(rows)
        txn.set_run_pointers(pointers)
    with storage.transaction(["acme"]) as txn:
        asked = [*digests[::2], DIGEST_A, digests[0]]  # a repeat and one never stored
        assert txn.envelopes("acme", asked) == {
            digests[n]: (b"{%d}" % n, n) for n in range(0, count, 2)
        }
        asked_runs = [f"run-{n}" for n in range(count)] + ["run-1", "never-stored"]
        assert txn.run_parts("acme", asked_runs) == {
            f"run-{n}": {str(n % 3): digests[n]} for n in range(count)
        }
        assert txn.entries_since("acme", 240, 100) == [
            (n, b"entry-%d" % n) for n in range(240, 250)
        ]
    assert storage.log_size("acme") == count
