"""Degraded storage against a real ``serve`` process: a database file that is briefly not
writable, a full disk, a read-only filesystem, a PostgreSQL connection cut. The service
answers JSON 503/507 that the publisher shows and spools on, and heals without a restart.

The filesystems are real: a tmpfs of a few MiB for the full disk (``mount -t tmpfs -o
size=...``, grown with ``remount``) and a read-only bind mount, so these tests need root
(as CI runs); elsewhere they skip, and fail when ``CI`` is set.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import requests

from attestation.tenant.http import RetryPolicy
from attestation.transparency.checkpoint import VerifierKey, verify_signed_checkpoint
from attestation.transparency.merkle import leaf_hash
from runner.errors import PublishError
from runner.publish.client import flush_spool, publish_envelope
from runner.publish.spool import Spool
from runner.service.corpus_store import open_corpus_store
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.merkle import MerkleTree
from runner.service.log.storage import (
    PostgresStorage,
    Role,
    SqliteStorage,
    Storage,
    StorageFullError,
    StorageUnavailableError,
    classify_database_error,
)
from runner.service.tokens import create_token
from tests.publish.conftest import (
    LOG_NAME,
    ServeProcess,
    application_name,
    free_port,
    make_envelope,
    postgres_schema,
    running_in_ci,
    running_service,
    serve_command,
    serve_process,
    state_dir_for,
)

FAST = RetryPolicy(attempts=3, backoff_factor=0.05, backoff_max=0.2)
ORIGIN = f"{LOG_NAME}/t/acme"


def _need_root() -> None:
    if os.geteuid() == 0:
        return
    if running_in_ci(os.environ):
        pytest.fail("CI is set but these tests need root (mounts, capabilities)")
    pytest.skip("needs root: mounts a tmpfs and drops capabilities")


@contextmanager
def _mount_point(prefix: str) -> Iterator[Path]:
    """An empty directory to mount on, outside pytest's directory tree (a mount inside it would
    outlive a crashed test run in the way of pytest's cleanup), removed once unmounted."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):  # still mounted (a lazy unmount that failed)
            path.rmdir()


@contextmanager
def _mounted(target: Path, *options: str) -> Iterator[Path]:
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *options, str(target)], check=True, capture_output=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", "--lazy", str(target)], check=False, capture_output=True)


def _deployment(root: Path) -> tuple[Path, str, str]:
    """A database as a first start of ``serve`` leaves it, with two tokens."""
    database = root / "publish.sqlite3"
    storage = SqliteStorage(database)
    storage.initialize()
    open_corpus_store(str(database)).close()
    operator = create_token(storage, "acme", Role.OPERATOR)
    reader = create_token(storage, "acme", Role.TENANT)
    storage.close()
    return database, operator, reader


def _put(url: str, token: str, data: bytes) -> requests.Response:
    digest = hashlib.sha256(data).digest()
    return requests.put(
        f"{url}/v1/tenants/acme/envelopes/sha256:{digest.hex()}",
        data=data,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Digest": f"sha-256=:{base64.b64encode(digest).decode()}:",
        },
        timeout=30,
    )


def _publish(url: str, token: str, seed: int, spool: Path) -> int | None:
    return publish_envelope(
        url,
        make_envelope("acme", f"run-{seed}", seed),
        tenant="acme",
        run_id=f"run-{seed}",
        token=token,
        spool_dir=spool,
        retry=FAST,
    ).log_index


def _consistent(server: ServeProcess, reader: str, storage: Storage, size: int) -> None:
    """The served head covers exactly the stored entries, each envelope once."""
    note = requests.get(
        f"{server.url}/v1/tenants/acme/log/checkpoint",
        headers={"Authorization": f"Bearer {reader}"},
        timeout=30,
    ).text
    key = VerifierKey.parse(requests.get(f"{server.url}/v1/log/public-key", timeout=30).text)
    head = verify_signed_checkpoint(note, key, origin=ORIGIN)
    entries = storage.log_entries("acme", 0, size + 10)
    assert head.size == len(entries) == size
    assert head.root == MerkleTree([leaf_hash(e) for e in entries]).root()


def _chmod_store(database: Path, mode: int) -> None:
    """The database and, where they exist, its WAL and shared-memory files (SQLite creates
    them with the database file's mode, so an operator's repair covers all three)."""
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        if path.exists():
            path.chmod(mode)


def test_a_read_only_blip_recovers_without_restart(tmp_path: Path) -> None:
    _need_root()
    database, operator, reader = _deployment(tmp_path)
    spool = tmp_path / "spool"
    _chmod_store(database, 0o444)  # not writable when the service starts, for a while
    try:
        with serve_process(str(database), tmp_path / "state", honour_file_modes=True) as server:
            answer = _put(server.url, operator, make_envelope("acme", "run-1", 1))
            assert answer.status_code == 503
            assert answer.headers["Retry-After"] == "5"
            assert answer.json()["reason"] == "storage-unavailable"
            assert answer.json()["error"].startswith("nothing was stored: the SQLite store")
            with pytest.raises(PublishError, match="HTTP 503: nothing was stored") as caught:
                _publish(server.url, operator, 2, spool)
            assert "kept in the spool" in str(caught.value)
            _chmod_store(database, 0o644)
            # The same process, the store writable again: the connections SQLite had opened
            # read-only were all dropped, so new envelopes and the spooled one go through.
            assert _publish(server.url, operator, 3, spool) == 0
            report = flush_spool(spool_dir=spool, token=operator, retry=FAST)
            assert ([o.log_index for o in report.delivered], report.failed) == ([1], ())
            _chmod_store(database, 0o444)  # a connection opened while writable stays so
            assert _put(server.url, operator, make_envelope("acme", "run-1", 1)).status_code == 201
            storage = SqliteStorage(database)
            _consistent(server, reader, storage, 3)
            storage.close()
            assert server.stop() == 0
    finally:
        _chmod_store(database, 0o644)


def test_a_full_disk_answers_507_and_the_spool_delivers_later(tmp_path: Path) -> None:
    _need_root()
    spool = tmp_path / "spool"
    with (
        _mount_point("attested-replay-full-") as mount_point,
        _mounted(mount_point, "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs"),
    ):
        database, operator, reader = _deployment(mount_point)
        with serve_process(str(database), mount_point / "state", log_dir=tmp_path) as server:
            published = 0
            refusal = None
            for seed in range(400):  # ~3 KB each: a 1 MiB disk fills long before
                try:
                    _publish(server.url, operator, seed, spool)
                except PublishError as exc:
                    refusal = str(exc)
                    break
                published += 1
            assert refusal is not None
            assert "envelope upload answered HTTP 507: nothing was stored: " in refusal
            assert "is full" in refusal
            full = _put(server.url, operator, make_envelope("acme", "run-999", 999))
            assert (full.status_code, full.json()["reason"]) == (507, "storage-full")
            assert "Retry-After" not in full.headers
            for seed in range(published + 1, published + 4):  # more arrive: spooled at once
                with pytest.raises(PublishError, match="HTTP 507"):
                    _publish(server.url, operator, seed, spool)
            assert len(Spool(spool).items()) == 4
            # Reads still work on a full disk.
            checkpoint = requests.get(
                f"{server.url}/v1/tenants/acme/log/checkpoint",
                headers={"Authorization": f"Bearer {reader}"},
                timeout=30,
            )
            assert checkpoint.status_code == 200
            subprocess.run(
                ["mount", "-o", "remount,size=16m", str(mount_point)], check=True
            )  # space again: the same process takes the spool
            report = flush_spool(spool_dir=spool, token=operator, retry=FAST)
            assert report.failed == ()
            assert len(report.delivered) == 4
            storage = SqliteStorage(database)
            _consistent(server, reader, storage, published + 4)
            assert storage.log_size("acme") == published + 4
            storage.close()
            assert server.stop() == 0
        output = server.output()
        assert "Traceback" not in output
        assert output.count("storage_fault") <= 3  # logged once per kind and interval


def test_serve_starts_on_a_read_only_filesystem(tmp_path: Path) -> None:
    _need_root()
    live = tmp_path / "live"
    live.mkdir()
    database, operator, reader = _deployment(live)
    with serve_process(str(database), live / "state") as server:
        _publish(server.url, operator, 0, tmp_path / "spool")
        last = _publish(server.url, operator, 1, tmp_path / "spool")
        assert server.stop() == 0
    assert last == 1
    with (
        _mount_point("attested-replay-ro-") as frozen,
        _mounted(frozen, "--bind", str(live)),
        _mounted(frozen, "-o", "remount,bind,ro"),
        serve_process(
            str(frozen / "publish.sqlite3"), frozen / "state", log_dir=tmp_path
        ) as server,
    ):
        assert "database: " in server.output()
        assert "(read-only)" in server.output()
        checkpoint = requests.get(
            f"{server.url}/v1/tenants/acme/log/checkpoint",
            headers={"Authorization": f"Bearer {reader}"},
            timeout=30,
        )
        assert checkpoint.status_code == 200
        assert checkpoint.text.startswith(f"{ORIGIN}\n2\n")
        refused = _put(server.url, operator, make_envelope("acme", "run-5", 5))
        assert (refused.status_code, refused.json()["reason"]) == (503, "storage-unavailable")
        assert "read-only filesystem" in refused.json()["error"]
        assert server.stop() == 0


@pytest.fixture
def postgres() -> Iterator[PostgresStorage]:
    with postgres_schema() as dsn:
        storage = PostgresStorage(dsn)
        storage.initialize()
        try:
            yield storage
        finally:
            storage.close()
            shutil.rmtree(state_dir_for(storage), ignore_errors=True)


@pytest.mark.postgres
def test_a_lost_postgresql_connection_recovers_without_restart(
    postgres: PostgresStorage, signer: CheckpointSigner
) -> None:
    with running_service(postgres, signer) as service:
        token = service.token("acme")
        assert _put(service.url, token, make_envelope("acme", "run-0", 0)).status_code == 201
        with psycopg.connect(postgres.dsn, autocommit=True) as admin:
            # Every connection of this service, cut as a server restart or failover would.
            cut = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (application_name(postgres.dsn),),
            ).fetchall()
        assert cut  # the pool held connections
        statuses = [
            _put(service.url, token, make_envelope("acme", f"run-{n}", n)).status_code
            for n in range(1, 20)
        ]
        assert set(statuses) <= {201, 503}
        assert statuses[-1] == 201  # the dead connections were dropped, new ones made
        assert postgres.log_size("acme") == 1 + statuses.count(201)


def test_database_driver_faults_are_classified() -> None:
    assert isinstance(classify_database_error(psycopg.errors.DiskFull("full")), StorageFullError)
    for unavailable in (
        psycopg.errors.ReadOnlySqlTransaction("standby"),
        psycopg.errors.AdminShutdown("restart"),
        psycopg.OperationalError("connection lost"),
    ):
        assert isinstance(classify_database_error(unavailable), StorageUnavailableError)
    assert classify_database_error(psycopg.errors.UniqueViolation("dup")) is None
    assert classify_database_error(ValueError("bug")) is None


def _get(url: str, path: str, token: str, **params: int) -> requests.Response:
    return requests.get(
        f"{url}/v1/tenants/acme{path}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _child_of(pid: int) -> int:
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            if f"\nPPid:\t{pid}\n" in status.read_text():
                return int(status.parent.name)
    raise AssertionError(f"process {pid} has no child")


def _wait_gone(pid: int) -> None:
    """Until ``pid`` is gone or dead (a zombie waiting for its parent to reap it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return
        except OSError:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} is still running")


@contextmanager
def _killed_on_tmpfs(tmp_path: Path, published: int) -> Iterator[tuple[Path, str, str]]:
    """A tmpfs holding a default ``serve`` deployment (state directory, SQLite with FULL
    synchronous) into which ``published`` envelopes were published before ``serve`` was
    killed with SIGKILL: the last commits are in the WAL only. Unmounted afterwards."""
    with (
        _mount_point("attested-replay-killed-") as mount_point,
        _mounted(mount_point, "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs"),
    ):
        state = mount_point / "state"
        state.mkdir(mode=0o700)
        database, operator, reader = _deployment(state)
        with serve_process(str(database), state, log_dir=tmp_path) as server:
            for seed in range(published):
                assert _publish(server.url, operator, seed, tmp_path / "spool") == seed
            # Both processes die at once, as in an OOM kill or a power loss: the log process
            # is stopped first, since a log process that saw serve's socket close before the
            # kernel's SIGKILL (PR_SET_PDEATHSIG) reached it would close its store cleanly.
            child = _child_of(server.process.pid)
            os.kill(child, signal.SIGSTOP)
            server.process.kill()
            server.process.wait()
            _wait_gone(child)
        wal = Path(f"{database}-wal")
        assert wal.stat().st_size > 0  # the commits nobody merged into the database file
        yield mount_point, operator, reader


def test_after_kill_9_a_read_only_remount_serves_every_committed_entry(
    tmp_path: Path,
) -> None:
    """The kernel remounts a filesystem read-only after an I/O error, or an administrator
    does, after serve was killed: the last commits are only in the WAL. They are served,
    never taken for lost entries."""
    _need_root()
    with _killed_on_tmpfs(tmp_path, 5) as (mount_point, operator, reader):
        subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
        state = mount_point / "state"
        with serve_process(str(state / "publish.sqlite3"), state, log_dir=tmp_path) as server:
            output = server.output()
            assert "(read-only)" in output
            assert "REFUSED" not in output
            key = VerifierKey.parse(
                requests.get(f"{server.url}/v1/log/public-key", timeout=30).text
            )
            note = _get(server.url, "/log/checkpoint", reader)
            assert note.status_code == 200
            head = verify_signed_checkpoint(note.text, key, origin=ORIGIN)
            assert head.size == 5
            for index in range(5):
                proof = _get(server.url, "/log/proof/inclusion", reader, index=index, size=5)
                assert proof.status_code == 200, proof.text
                assert proof.json()["logIndex"] == index
            health = requests.get(f"{server.url}/v1/health", timeout=30)
            assert (health.status_code, health.json()) == (200, {"status": "ok"})
            refused = _put(server.url, operator, make_envelope("acme", "run-9", 9))
            assert (refused.status_code, refused.json()["reason"]) == (503, "storage-unavailable")
            assert server.stop() == 0


def test_after_kill_9_a_wal_without_its_shm_refuses_to_start_naming_it(tmp_path: Path) -> None:
    """Without the -shm file SQLite cannot read the WAL on a read-only filesystem: serve
    refuses to start, says the commits are in the WAL and how to merge them (exit 9)."""
    _need_root()
    with _killed_on_tmpfs(tmp_path, 3) as (mount_point, _operator, _reader):
        state = mount_point / "state"
        database = state / "publish.sqlite3"
        Path(f"{database}-shm").unlink()
        subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
        done = subprocess.run(
            serve_command(str(database), state, free_port()),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 9, done.stderr
        size = Path(f"{database}-wal").stat().st_size
        assert done.stderr.endswith(
            f"error: cannot open the database: the SQLite store {database} is on a read-only "
            f"filesystem and its write-ahead log {database}-wal holds {size} bytes of commits "
            "not yet merged into the database (the last writer stopped uncleanly), but its "
            "publish.sqlite3-shm file is missing, without which SQLite cannot read the log on "
            "a read-only filesystem. Nothing is lost: remount the directory read-write and "
            f"start serve once (or run `sqlite3 {database} 'PRAGMA "
            "wal_checkpoint(TRUNCATE)'`) to merge it, then stop it and remount read-only\n"
        )
        assert "Traceback" not in done.stderr
        assert "entries were lost" not in done.stderr
