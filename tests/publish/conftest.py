"""Fixtures for the publication tests: envelopes, storages, a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import psycopg
import pytest
import requests
import structlog
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.envelope.merged import MergedEnvelope
from attestation.envelope.model import Binding, Envelope, Evidence, ShardPosition, Workload
from attestation.transparency.checkpoint import VerifierKey
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.heads import JOURNAL_FILE, HeadJournal
from runner.service.log.sequencer import PublicationLog
from runner.service.log.storage import PostgresStorage, Role, SqliteStorage, Storage
from runner.service.server import Service as AppService
from runner.service.server import create_app
from runner.service.tokens import create_token

LOG_NAME = "publish.test"
PG_DSN_VARIABLE = "ATTESTED_REPLAY_TEST_PG_DSN"


def make_envelope(
    tenant: str, run_id: str, seed: int = 0, shard: tuple[int, int] | None = None
) -> bytes:
    """Canonical bytes of a schema-valid envelope (the service does not verify SNP evidence);
    ``shard``: (index, count) for a shard envelope."""

    def digest(label: str) -> str:
        return "sha256:" + hashlib.sha256(f"{label}-{seed}".encode()).hexdigest()

    workload = Workload(name="replay", version="1.0.0", code_digest=digest("code"))
    binding = Binding(
        run_id=run_id,
        tenant=tenant,
        corpus_checksum=digest("corpus"),
        evaluation_digest=digest("evaluation"),
        workload=workload,
        result_digest=digest("result"),
        shard=None if shard is None else ShardPosition(index=shard[0], count=shard[1]),
    )
    envelope = Envelope(
        api_version="attested-replay.dev/v1",
        kind="AttestationEnvelope",
        run_id=run_id,
        tenant=tenant,
        binding=binding,
        report_data=hashlib.sha512(f"rd-{seed}".encode()).hexdigest(),
        measurement=hashlib.sha384(f"m-{seed}".encode()).hexdigest(),
        host_data=hashlib.sha256(f"hd-{seed}".encode()).hexdigest(),
        platform="simulated",
        evidence=Evidence(
            report=base64.b64encode(bytes(1184)).decode(),
            provider="simulated",
            cert_chain="",
        ),
    )
    return envelope.canonical_bytes()


def make_merged_envelope(tenant: str, run_id: str, shards: list[bytes]) -> bytes:
    """A merged envelope over ``shards`` (schema-valid; the service checks no more)."""
    parsed = [Envelope.model_validate_json(data) for data in shards]
    binding = parsed[0].binding
    return MergedEnvelope(
        api_version="attested-replay.dev/v1",
        kind="MergedAttestationEnvelope",
        run_id=run_id,
        tenant=tenant,
        shard_count=len(parsed),
        corpus_checksum=binding.corpus_checksum,
        evaluation_digest=binding.evaluation_digest,
        workload=binding.workload,
        result_digest=binding.result_digest,
        shards=tuple(parsed),
    ).canonical_bytes()


def sha256_name(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class LiveServer:
    """uvicorn serving an ASGI app in a thread on a loopback port (port 0 picks a free one)."""

    def __init__(self, app: Any, port: int = 0) -> None:
        self._config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="error", lifespan="on"
        )
        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = port

    def _run(self) -> None:
        asyncio.run(self._server.serve())

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        sockets = self._server.servers[0].sockets
        self.port = sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@dataclass
class Service:
    """A running service with its storage, log key and one token per (tenant, role)."""

    storage: Storage
    verifier_key: VerifierKey
    url: str
    tokens: dict[tuple[str, str], str]
    app_service: AppService | None = None

    def token(self, tenant: str, role: str = "operator") -> str:
        key = (tenant, role)
        if key not in self.tokens:
            self.tokens[key] = create_token(self.storage, tenant, Role(role))
        return self.tokens[key]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def running_in_ci(environ: Mapping[str, str]) -> bool:
    """CI systems set ``CI`` (GitHub and GitLab to ``true``, others to ``1`` or ``yes``)."""
    return environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


def _postgres_dsn() -> str:
    dsn = os.environ.get(PG_DSN_VARIABLE)
    if not dsn:
        # In CI a missing database must fail the PostgreSQL half of the suite, never hide it.
        if running_in_ci(os.environ):
            pytest.fail(f"CI is set but {PG_DSN_VARIABLE} is unset: .ci/services.sh did not run")
        pytest.skip(f"{PG_DSN_VARIABLE} is unset (run `. .ci/services.sh` to start PostgreSQL)")
    return dsn


@contextmanager
def postgres_schema(prefix: str = "publish") -> Iterator[str]:
    """A DSN whose connections use a new, empty schema of their own, dropped afterwards.

    The PostgreSQL cluster of ``.ci/services.sh`` is shared by every test run on the machine
    (several engineers, several sessions): a run must never touch another run's tables.
    """
    dsn = _postgres_dsn()
    schema = f"{prefix}_{uuid.uuid4().hex}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{separator}application_name={schema}&options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


def application_name(dsn: str) -> str:
    """The application name a :func:`postgres_schema` DSN connects with (its schema's)."""
    return dsn.split("application_name=", 1)[1].split("&", 1)[0]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "sqlite":
        store: Storage = SqliteStorage(tmp_path / "publish.sqlite3")
        store.initialize()
        yield store
        store.close()
        return
    with postgres_schema() as dsn:
        store = PostgresStorage(dsn, pool_size=24)
        store.initialize()
        try:
            yield store
        finally:
            store.close()
            shutil.rmtree(state_dir_for(store), ignore_errors=True)


@pytest.fixture
def signer() -> CheckpointSigner:
    return CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate())


def state_dir_for(storage: Storage) -> Path:
    """Where an in-process service over ``storage`` keeps its head journal: one directory per
    database, so that a restarted service finds the heads it signed."""
    if isinstance(storage, SqliteStorage):
        return storage.path.parent / "server-state"
    assert isinstance(storage, PostgresStorage)
    schema = hashlib.sha256(storage.dsn.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"attested-replay-test-state-{schema}"


def make_service(
    storage: Storage,
    signer: CheckpointSigner,
    *,
    state_dir: Path | None = None,
    adopt_database_heads: bool = False,
) -> AppService:
    """The service over ``storage`` (its head journal in ``state_dir``), not started."""
    directory = state_dir or state_dir_for(storage)
    directory.mkdir(parents=True, exist_ok=True)
    journal = HeadJournal(directory / JOURNAL_FILE, signer.verifier_key)
    publication_log = PublicationLog(
        storage, signer, journal, log_name=LOG_NAME, adopt_database_heads=adopt_database_heads
    )
    return AppService(storage, signer, publication_log)


@contextmanager
def running_service(
    storage: Storage,
    signer: CheckpointSigner,
    *,
    wrap: Callable[[Any], Any] | None = None,
    port: int = 0,
    state_dir: Path | None = None,
    adopt_database_heads: bool = False,
) -> Iterator[Service]:
    service = make_service(
        storage, signer, state_dir=state_dir, adopt_database_heads=adopt_database_heads
    )
    app: Any = create_app(service)
    server = LiveServer(wrap(app) if wrap else app, port=port).start()
    try:
        yield Service(
            storage=storage,
            verifier_key=signer.verifier_key,
            url=server.url,
            tokens={},
            app_service=service,
        )
    finally:
        server.stop()


@pytest.fixture
def service(storage: Storage, signer: CheckpointSigner) -> Iterator[Service]:
    with running_service(storage, signer) as running:
        yield running


@pytest.fixture
def envelope_for() -> Callable[..., bytes]:
    """``envelope_for(tenant, run_id, seed=0)`` -> canonical envelope bytes."""
    return make_envelope


@pytest.fixture
def serve() -> Callable[..., Any]:
    """``serve(storage, signer, wrap=None, port=0)``: a context manager yielding a Service."""
    return running_service


@pytest.fixture(autouse=True)
def _quiet_structlog() -> Iterator[None]:
    # Thousands of per-request info events would dominate the concurrency tests' runtime, and
    # a CLI call inside a test points structlog at a capture stream that closes with the test.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    yield
    structlog.reset_defaults()


@dataclass
class ServeProcess:
    """``attested-replay serve`` in a process of its own; its output goes to ``log``."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send ``sig`` and return the exit status (killed after ``timeout`` seconds)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:  # never leave a server running after the test
                self.process.kill()
                self.process.wait()
                raise
        return self.process.returncode


def serve_command(database: str, state_dir: Path, port: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "runner",
        "--log-level",
        "warning",
        "serve",
        "--port",
        str(port),
        "--db",
        database,
        "--state-dir",
        str(state_dir),
        "--log-name",
        LOG_NAME,
        *extra,
    ]


@contextmanager
def serve_process(
    database: str,
    state_dir: Path,
    *extra: str,
    open_files: int | None = None,
    honour_file_modes: bool = False,
    ready: str = "/v1/log/public-key",
    log_dir: Path | None = None,
) -> Iterator[ServeProcess]:
    """``serve`` on a free loopback port with ``extra`` options and at most ``open_files``
    descriptors; ``honour_file_modes``: without root's power to write a file whose mode
    forbids it (CAP_DAC_OVERRIDE), as a service account would run. Yields once the server
    answers ``ready``; its output goes to a file in ``log_dir`` (default: beside the state)."""
    port = free_port()
    log_file = (log_dir or state_dir.parent) / f"serve-{port}.log"
    command = serve_command(database, state_dir, port, *extra)
    if open_files is not None:  # util-linux prlimit: the limit is in place before serve runs
        command = ["prlimit", f"--nofile={open_files}:{open_files}", *command]
    if honour_file_modes:  # util-linux setpriv: the capabilities are gone before serve runs
        dropped = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--bounding-set={dropped}", f"--inh-caps={dropped}", *command]
    with log_file.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, cwd=log_file.parent
        )
    running = ServeProcess(process, f"http://127.0.0.1:{port}", log_file)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"{running.url}{ready}", timeout=1)
                break
            except (requests.ConnectionError, requests.Timeout):  # not listening, or starting
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start: {running.output()}") from None
                time.sleep(0.05)
        yield running
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@contextmanager
def subprocess_service(storage: Storage, database: str, state_dir: Path) -> Iterator[Service]:
    """``attested-replay serve`` in its own process (its own core and GIL) on a free port."""
    # Locking, not durability, is under test here; an fsync per commit would dominate.
    with serve_process(database, state_dir, "--sqlite-synchronous", "normal") as running:
        key = VerifierKey.parse(requests.get(f"{running.url}/v1/log/public-key", timeout=5).text)
        assert (state_dir / "log-key.pub").read_text().strip() == key.encode()
        yield Service(storage=storage, verifier_key=key, url=running.url, tokens={})
        assert running.stop() == 0


@pytest.fixture
def served_process(storage: Storage, tmp_path: Path) -> Iterator[Service]:
    if isinstance(storage, SqliteStorage):
        database = str(storage.path)
    else:
        assert isinstance(storage, PostgresStorage)
        database = storage.dsn
    with subprocess_service(storage, database, tmp_path / "server-state") as running:
        yield running


class Deployment:
    """A SQLite store with an operator and a reader token of tenant ``acme``, and the
    ``serve`` processes started on it (stopped when the deployment closes)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.database = root / "publish.sqlite3"
        storage = SqliteStorage(self.database)
        storage.initialize()
        self.operator = create_token(storage, "acme", Role.OPERATOR)
        self.reader = create_token(storage, "acme", Role.TENANT)
        storage.close()

    def serve(self, *extra: str, open_files: int | None = None) -> ServeProcess:
        return self._stack.enter_context(
            serve_process(str(self.database), self.root / "state", *extra, open_files=open_files)
        )

    def __enter__(self) -> Self:
        self._stack = ExitStack()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stack.close()


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    with Deployment(tmp_path) as made:
        yield made


def connect(server: ServeProcess) -> socket.socket:
    """A raw TCP connection to a ``serve`` process on loopback."""
    port = int(server.url.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=30)
