"""Fixtures for the publication tests: envelopes, storages, a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import structlog
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.envelope.model import Binding, Envelope, Evidence, Workload
from attestation.transparency.checkpoint import VerifierKey
from runner.publish.checkpoint import CheckpointSigner
from runner.publish.server import create_app
from runner.publish.storage import PostgresStorage, Role, SqliteStorage, Storage
from runner.publish.tokens import create_token

LOG_NAME = "publish.test"
PG_DSN_VARIABLE = "ATTESTED_REPLAY_TEST_PG_DSN"


def make_envelope(tenant: str, run_id: str, seed: int = 0) -> bytes:
    """Canonical bytes of a schema-valid envelope (the service does not verify SNP evidence)."""

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


def sha256_name(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class LiveServer:
    """uvicorn serving an ASGI app in a thread on a loopback port (port 0 picks a free one)."""

    def __init__(self, app: Any, port: int = 0) -> None:
        self._config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="error", lifespan="off"
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
        yield f"{dsn}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


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


@pytest.fixture
def signer() -> CheckpointSigner:
    return CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate())


@contextmanager
def running_service(
    storage: Storage,
    signer: CheckpointSigner,
    *,
    wrap: Callable[[Any], Any] | None = None,
    port: int = 0,
) -> Iterator[Service]:
    app: Any = create_app(storage, signer, log_name=LOG_NAME)
    server = LiveServer(wrap(app) if wrap else app, port=port).start()
    try:
        yield Service(storage=storage, verifier_key=signer.verifier_key, url=server.url, tokens={})
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


@contextmanager
def subprocess_service(storage: Storage, database: str, state_dir: Path) -> Iterator[Service]:
    """``attested-replay serve`` in its own process (its own core and GIL) on a free port."""
    port = free_port()
    command = [
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
        # Locking, not durability, is under test here; an fsync per commit would dominate.
        "--sqlite-synchronous",
        "normal",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = requests.get(f"{url}/v1/log/public-key", timeout=1)
                break
            except requests.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = process.stdout.read().decode() if process.stdout else ""
                    raise RuntimeError(f"serve did not start: {output}") from None
                time.sleep(0.05)
        key = VerifierKey.parse(answer.text)
        assert (state_dir / "log-key.pub").read_text().strip() == key.encode()
        yield Service(storage=storage, verifier_key=key, url=url, tokens={})
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # never leave a server running after the test
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


@pytest.fixture
def served_process(storage: Storage, tmp_path: Path) -> Iterator[Service]:
    if isinstance(storage, SqliteStorage):
        database = str(storage.path)
    else:
        assert isinstance(storage, PostgresStorage)
        database = storage.dsn
    with subprocess_service(storage, database, tmp_path / "server-state") as running:
        yield running
