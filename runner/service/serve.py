"""``attested-replay serve``: state directory, storage, log key, the app and its HTTP server.

The sequence (:func:`serve`): bind the listening socket first (a busy port fails before
anything is created), warn about plain HTTP on a non-loopback address, open the state (log
key, database; on a read-only filesystem with the key files in place, the service starts and
serves reads), start the log's own process (:mod:`runner.service.log.process`: head journal,
sequencer, fork guard), which checks every tenant's log against its last signed head, print
where everything is, then serve with the connection guards of :mod:`runner.service.guard` on
uvloop's event loop until SIGTERM or SIGINT (or until the listening socket is lost:
:func:`watch_listener`, or the log's process exits: exit 9). Stopping integrates what is
queued, moves SQLite's WAL into the database file and closes the storage, then exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import structlog
import uvicorn
import uvloop
from starlette.routing import BaseRoute

from attestation.contracts import DEFAULT_MAX_CORPUS_EXPORT_BYTES
from attestation.tenant.fsutil import atomic_write_text
from attestation.tenant.http import is_loopback
from attestation.transparency.checkpoint import CheckpointError
from runner.errors import ListenerLostError, LogProcessExitedError, UsageError
from runner.log import DEFAULT_LOG_LEVEL
from runner.service.corpus_routes import corpus_routes
from runner.service.corpus_store import open_corpus_store
from runner.service.guard import (
    LISTEN_BACKLOG,
    ConnectionLimits,
    QuietLog,
    connection_cap,
    guarded_protocol,
    raise_open_file_limit,
)
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.heads import JOURNAL_FILE, JournalError
from runner.service.log.process import LogProcess, LogProcessSpec
from runner.service.log.storage import Storage, StorageError, is_postgres_location, open_storage
from runner.service.panel import panel_routes
from runner.service.ratelimit import Rate, RateLimiter
from runner.service.server import PublicationApp, Service, create_app
from runner.service.witnesses import WitnessEndpoint, WitnessSubmitter

DEFAULT_LOG_NAME: Final = "attested-replay.local"
SIGNING_KEY_FILE: Final = "log-signing-key.pem"
PUBLIC_KEY_FILE: Final = "log-key.pub"
DATABASE_FILE: Final = "publish.sqlite3"
#: Requests per second one token may make (bursts of twice that), unless --rate-limit says.
DEFAULT_RATE_LIMIT: Final = "5000/s"
#: Failed authentications per second one client address may make.
FAILED_AUTH_RATE: Final = Rate(per_second=50.0, burst=100.0)

log = structlog.get_logger("attested-replay.serve")


def default_state_dir() -> Path:
    """Where ``serve`` keeps its database and log signing key: durable data, so under the
    XDG data directory (not the cache), unless ``ATTESTED_REPLAY_STATE_DIR`` says otherwise."""
    state = os.environ.get("ATTESTED_REPLAY_STATE_DIR")
    if state:
        return Path(state) / "server"
    data_home = os.environ.get("XDG_DATA_HOME")
    base = Path(data_home) if data_home else Path.home() / ".local" / "share"
    return base / "attested-replay" / "server"


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    state_dir: Path
    database: str | None = None  # SQLite path or postgresql:// DSN; default: state_dir file
    signing_key: Path | None = None  # default: state_dir/log-signing-key.pem, made on first start
    log_name: str = DEFAULT_LOG_NAME
    sqlite_synchronous: str = "FULL"
    adopt_database_heads: bool = False
    rate_limit: Rate | None = field(default_factory=lambda: Rate.parse(DEFAULT_RATE_LIMIT))
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    max_corpus_export_bytes: int = DEFAULT_MAX_CORPUS_EXPORT_BYTES
    log_level: str = DEFAULT_LOG_LEVEL  # the log process's, as the command's --log-level
    witnesses: tuple[WitnessEndpoint, ...] = ()  # each new checkpoint goes to these

    def storage_location(self) -> str:
        return self.database or str(self.state_dir / DATABASE_FILE)

    def journal_path(self) -> Path:
        return self.state_dir / JOURNAL_FILE

    def signing_key_path(self) -> Path:
        return self.signing_key or self.state_dir / SIGNING_KEY_FILE


def open_service(config: ServiceConfig) -> tuple[Storage, CheckpointSigner]:
    """Open the log key and storage, creating them on first start; export the public key.

    Nothing is written that is already in place, so a service whose state is complete starts
    on a read-only filesystem."""
    if not config.state_dir.is_dir():
        config.state_dir.mkdir(parents=True, mode=0o700)
    key_file = config.signing_key_path()
    try:
        signer = CheckpointSigner.load_or_create(
            config.log_name, key_file, create=config.signing_key is None
        )
    except CheckpointError as exc:
        raise UsageError(str(exc)) from exc
    public = config.state_dir / PUBLIC_KEY_FILE
    text = signer.verifier_key.encode() + "\n"
    if not public.is_file() or public.read_text(encoding="utf-8") != text:
        atomic_write_text(public, text)
    return open_storage(
        config.storage_location(), sqlite_synchronous=config.sqlite_synchronous
    ), signer


def build_service(
    config: ServiceConfig,
    storage: Storage,
    signer: CheckpointSigner,
    *,
    owns_storage: bool,
    on_lost: Callable[[str], None] | None = None,
) -> Service:
    """The service over ``storage``, its log in a process of its own
    (:mod:`runner.service.log.process`; its head journal in the state directory), with
    rate limits. ``on_lost(message)``: the log's process exited."""
    publication_log = LogProcess(
        LogProcessSpec(
            storage_location=config.storage_location(),
            sqlite_synchronous=config.sqlite_synchronous,
            signing_key=config.signing_key_path().absolute(),
            key_id=signer.verifier_key.key_id,
            log_name=config.log_name,
            journal=config.journal_path().absolute(),
            adopt_database_heads=config.adopt_database_heads,
            log_level=config.log_level,
        ),
        on_lost=on_lost,
    )
    return Service(
        storage,
        signer,
        publication_log,
        rate_limiter=None if config.rate_limit is None else RateLimiter(config.rate_limit),
        failure_limiter=RateLimiter(FAILED_AUTH_RATE),
        owns_storage=owns_storage,
    )


def build_app(service: Service, config: ServiceConfig) -> PublicationApp:
    """The service's app with the corpus-export and trust-panel routes."""
    store = open_corpus_store(config.storage_location(), read_only=service.storage.read_only)
    extra: Sequence[BaseRoute] = [
        *corpus_routes(service, store, max_bytes=config.max_corpus_export_bytes),
        *panel_routes(service, store),
    ]
    return create_app(service, extra_routes=extra)


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound before any state is created."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: cannot resolve it ({exc.strerror})") from exc
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        what = "is in use" if exc.errno == 98 else f"cannot be bound ({exc.strerror})"  # EADDRINUSE
        raise UsageError(f"--port {port}: address {host}:{port} {what}") from exc
    sock.set_inheritable(True)
    return sock


@contextmanager
def _clean_exit_on_signals() -> Iterator[None]:
    """uvicorn handles SIGTERM and SIGINT while it serves, then restores the handlers it found
    and re-raises the signal (``uvicorn/server.py``, ``capture_signals``): with the default
    handlers that kills the process before any cleanup. The handlers it finds are these, which
    do nothing, so ``serve`` returns and closes the storage."""
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(
    config: ServiceConfig,
    *,
    host: str,
    port: int,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """Run the publication service until SIGTERM or SIGINT (see the module docstring)."""
    if (tls_cert is None) != (tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    sock = bind_socket(host, port)
    try:
        _serve_on(sock, config, host=host, tls_cert=tls_cert, tls_key=tls_key, say=say)
    finally:
        sock.close()


def _serve_on(
    sock: socket.socket,
    config: ServiceConfig,
    *,
    host: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    say: Callable[[str], None],
) -> None:
    scheme = "https" if tls_cert else "http"
    bound_port = sock.getsockname()[1]
    if tls_cert is None and not is_loopback(host):
        warning = (
            f"WARNING: serving plain HTTP on {host}:{bound_port}, which is not a loopback "
            "address: bearer tokens and envelopes cross the network unencrypted. Give "
            "--tls-cert and --tls-key, or put a TLS-terminating proxy in front."
        )
        sys.stderr.write(warning + "\n")
        sys.stderr.flush()
        log.warning("plain_http_on_network", host=host, port=bound_port)
    cap = connection_cap(config.limits, raise_open_file_limit())
    try:
        storage, signer = open_service(config)
    except StorageError as exc:  # a startup error with its reason, never a traceback
        raise UsageError(f"cannot open the database: {exc}") from exc
    lost: list[str] = []
    servers: list[uvicorn.Server] = []

    def log_process_lost(message: str) -> None:  # in the log process's reader thread
        lost.append(message)
        for running in servers:
            running.should_exit = True  # uvicorn looks at it every 0.1 s

    service = build_service(config, storage, signer, owns_storage=True, on_lost=log_process_lost)
    try:
        app = build_app(service, config)
        service.start()
    except (JournalError, StorageError, CheckpointError) as exc:
        service.stop()
        raise UsageError(str(exc)) from exc
    except BaseException:
        service.stop()
        raise
    location = config.storage_location()
    shown = "PostgreSQL" if is_postgres_location(location) else location
    say(f"listening on {scheme}://{host}:{bound_port}")
    say(f"database: {shown}{' (read-only)' if storage.read_only else ''}")
    say(f"head journal: {config.journal_path()}")
    say(f"log key: {config.signing_key_path()} (key ID {signer.verifier_key.key_id.hex()})")
    say(f"log verifier key (tenants pin this): {signer.verifier_key.encode()}")
    for tenant, reason in sorted(service.log.refusals().items()):
        say(f"REFUSED log of tenant {tenant}: {reason}")
    if config.witnesses:
        service.witnesses = WitnessSubmitter(
            config.witnesses,
            tenants=storage.tenants,
            signed_head=service.log.signed_head,
            consistency_proof=service.log.consistency_proof,
        )
        service.witnesses.start()
        for witness in config.witnesses:
            say(f"witness: {witness.url} ({witness.key.name})")
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            http=guarded_protocol(config.limits, cap),
            timeout_keep_alive=int(max(1, config.limits.keep_alive)),
            backlog=LISTEN_BACKLOG,
            log_level="warning",
            access_log=False,
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
            # The log key, tokens and envelopes stay in this process: no reloader, no workers.
            workers=None,
        )
    )
    servers.append(server)
    if lost:
        server.should_exit = True
    quiet = QuietLog()
    logging.getLogger("uvicorn.error").addFilter(quiet.filter)
    listener_lost: list[str] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(quiet.loop_exception)
        watchdog = asyncio.create_task(watch_listener(server, sock, listener_lost))
        try:
            await server.serve(sockets=[sock])
        finally:
            watchdog.cancel()

    try:
        # uvloop: the event loop's own cost per request is a third lower than asyncio's
        # (docs/publishing.md, "The ASGI server, and why").
        with _clean_exit_on_signals(), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run())
    finally:
        if service.witnesses is not None:
            service.witnesses.stop()
        service.stop()  # after a lifespan shutdown this only closes what is still open
    if listener_lost:
        raise ListenerLostError(listener_lost[0])
    if lost:
        raise LogProcessExitedError(lost[0])


#: How often :func:`watch_listener` looks at the listening socket.
LISTENER_CHECK_SECONDS: Final = 1.0


async def watch_listener(server: uvicorn.Server, sock: socket.socket, lost: list[str]) -> None:
    """Stop ``server`` when its listening socket was closed under it.

    uvloop closes a listening socket when ``accept()`` fails with anything but the errors
    libuv handles itself (``EAGAIN``, ``ECONNABORTED``; ``EMFILE`` and ``ENFILE`` by
    dropping the pending connections), and says nothing (``handles/streamserver.pyx``,
    ``_fatal_error``): the server would go on without accepting a connection. It detaches
    the socket object it was given when it does, so its descriptor reads -1. Then this logs
    the fault, appends its message to ``lost`` and shuts the server down cleanly (the
    storage is closed), and ``serve`` exits 9 for its supervisor to start it again."""
    while not server.should_exit:
        await asyncio.sleep(LISTENER_CHECK_SECONDS)
        if sock.fileno() == -1 and not server.should_exit:
            message = "the listening socket was closed after an accept error; stopping"
            log.error("listener_lost", error=message)
            lost.append(message)
            server.should_exit = True
