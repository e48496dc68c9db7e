"""Backups that restore: a stopped server's database file is whole, ``server backup`` copies a
running one, ``pg_dump`` copies PostgreSQL, and restoring an old copy is caught by the guard."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import requests

from attestation.tenant.http import RetryPolicy
from attestation.transparency.checkpoint import VerifierKey, verify_signed_checkpoint
from attestation.transparency.merkle import leaf_hash
from runner.cli import main
from runner.publish.client import publish_envelope
from runner.service.log.merkle import MerkleTree
from runner.service.log.storage import PostgresStorage, Role, SqliteStorage
from runner.service.tokens import create_token
from tests.publish.conftest import (
    LOG_NAME,
    ServeProcess,
    make_envelope,
    postgres_schema,
    serve_process,
)

FAST = RetryPolicy(backoff_factor=0.05, backoff_max=0.5)
ORIGIN = f"{LOG_NAME}/t/acme"


def _publish(url: str, token: str, seeds: range, spool: Path) -> list[str]:
    notes = []
    for seed in seeds:
        outcome = publish_envelope(
            url,
            make_envelope("acme", f"run-{seed}", seed),
            tenant="acme",
            run_id=f"run-{seed}",
            token=token,
            spool_dir=spool,
            retry=FAST,
        )
        assert outcome.checkpoint is not None
        notes.append(outcome.checkpoint)
    return notes


def _checkpoint(server: ServeProcess, token: str) -> requests.Response:
    return requests.get(
        f"{server.url}/v1/tenants/acme/log/checkpoint",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _entries(database: Path) -> list[bytes]:
    with sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = db.execute(
            "SELECT log_index, entry FROM log_entries WHERE tenant = 'acme' ORDER BY log_index"
        ).fetchall()
    assert [index for index, _entry in rows] == list(range(len(rows)))  # no gap
    return [bytes(entry) for _index, entry in rows]


@pytest.fixture
def sqlite_deployment(tmp_path: Path) -> tuple[Path, str]:
    database = tmp_path / "publish.sqlite3"
    storage = SqliteStorage(database)
    storage.initialize()
    token = create_token(storage, "acme", Role.OPERATOR)
    storage.close()
    return database, token


def test_sigterm_leaves_a_database_file_that_holds_every_entry(
    sqlite_deployment: tuple[Path, str], tmp_path: Path
) -> None:
    database, token = sqlite_deployment
    state = tmp_path / "state"
    with serve_process(str(database), state) as server:
        notes = _publish(server.url, token, range(20), tmp_path / "spool")
        assert server.stop(signal.SIGTERM) == 0  # a clean stop, not death by the signal
    assert "Traceback" not in server.output()
    wal = Path(f"{database}-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # moved into the database file
    copy = tmp_path / "copy" / "publish.sqlite3"
    copy.parent.mkdir()
    shutil.copyfile(database, copy)  # the file alone, as a naive backup copies it
    assert len(_entries(copy)) == 20
    with serve_process(str(copy), state) as server:  # the copy carries on the signed log
        assert _checkpoint(server, token).text == notes[-1]


def test_server_backup_copies_a_running_service_and_an_old_copy_is_refused(
    sqlite_deployment: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database, token = sqlite_deployment
    state = tmp_path / "state"
    backup = tmp_path / "backup.sqlite3"
    with serve_process(str(database), state) as server:
        _publish(server.url, token, range(10), tmp_path / "spool")
        publishing = threading.Thread(
            target=_publish, args=(server.url, token, range(10, 30), tmp_path / "spool")
        )
        publishing.start()  # the backup is taken while envelopes keep arriving
        capsys.readouterr()
        assert main(["server", "backup", "--db", str(database), "--out", str(backup)]) == 0
        publishing.join()
        final = _checkpoint(server, token).text
    assert capsys.readouterr().out.startswith(f"backup of {database} written to {backup}")
    copied = _entries(backup)
    assert 10 <= len(copied) <= 30
    with sqlite3.connect(backup) as db:  # one committed state: its head covers its entries
        (note,) = db.execute("SELECT note FROM signed_heads WHERE tenant = 'acme'").fetchone()
    head = verify_signed_checkpoint(note, _key(state), origin=ORIGIN)
    assert head.size == len(copied)
    assert head.root == MerkleTree([leaf_hash(e) for e in copied]).root()
    assert verify_signed_checkpoint(final, _key(state), origin=ORIGIN).size == 30

    # A backup never overwrites, and PostgreSQL is pg_dump's job.
    assert main(["server", "backup", "--db", str(database), "--out", str(backup)]) == 9
    assert "exists; a backup never overwrites a file" in capsys.readouterr().err
    assert main(["server", "backup", "--db", "postgresql://x/y", "--out", "z"]) == 9
    assert "back up PostgreSQL with pg_dump" in capsys.readouterr().err

    # Restoring the backup under the running log's state: the service refuses, by name.
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, database)
    with serve_process(str(database), state, ready="/v1/health") as server:
        refused = _checkpoint(server, token)
        assert refused.status_code == 503
        assert (
            f"the store holds {len(copied)} entries but a checkpoint of size 30 was signed"
            in refused.json()["error"]
        )
        assert "REFUSED log of tenant acme" in server.output()


def test_pg_dump_and_pg_restore_as_documented(tmp_path: Path) -> None:
    """docs/publishing.md, Backups: ``pg_dump --format=custom`` of the running service's
    database, ``pg_restore`` into a new one; the service carries on from the copy."""
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"))
    if not binaries:
        pytest.skip("pg_dump is not installed (.ci/services.sh installs PostgreSQL)")
    bindir = Path(binaries[-1]).parent
    with postgres_schema() as dsn:
        storage = PostgresStorage(dsn)
        storage.initialize()
        token = create_token(storage, "acme", Role.OPERATOR)
        storage.close()
        state = tmp_path / "state"
        with serve_process(dsn, state) as server:
            notes = _publish(server.url, token, range(5), tmp_path / "spool")
            dump = tmp_path / "publish.dump"
            schema = dsn.rsplit("%3D", 1)[1]
            base = dsn.split("?", 1)[0]
            subprocess.run(
                [
                    str(bindir / "pg_dump"),
                    "--format=custom",
                    f"--schema={schema}",
                    "--file",
                    str(dump),
                    base,
                ],
                check=True,
                env={**os.environ, "PGCONNECT_TIMEOUT": "10"},
            )
        with _new_database(base) as restored:
            subprocess.run(
                [str(bindir / "pg_restore"), "--no-owner", f"--dbname={restored}", str(dump)],
                check=True,
            )
            copy = f"{restored}?options=-csearch_path%3D{schema}"
            with serve_process(copy, state) as server:
                assert _checkpoint(server, token).text == notes[-1]
                assert len(_publish(server.url, token, range(5, 7), tmp_path / "spool")) == 2


@contextmanager
def _new_database(base: str) -> Iterator[str]:
    """A new database in the shared cluster (a name of its own), dropped afterwards."""
    name = f"restore_{uuid.uuid4().hex}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{base.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(base, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _key(state: Path) -> VerifierKey:
    return VerifierKey.parse((state / "log-key.pub").read_text())
