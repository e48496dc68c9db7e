"""The witness's HTTP interface (C2SP tlog-witness), on the standard library's server.

``POST /add-checkpoint`` cosigns (200, the cosignature line) or refuses with the status
:mod:`runner.witness.protocol` gives (409 with ``text/x.tlog.size``: the size cosigned).
``GET /<hex SHA-256 of the origin>/checkpoint`` serves the latest cosigned checkpoint with the
log's signature and the witness's cosignature (404 for an origin never cosigned).

Bounded: a body needs a Content-Length of at most
:data:`~runner.witness.protocol.MAX_REQUEST_BYTES`; every read and write has
:data:`IO_TIMEOUT_SECONDS`; at most :data:`MAX_CONNECTIONS` connections are served at once
(more are answered 503 and closed). A witness meant for the Internet belongs behind a reverse
proxy with its own limits (docs/witness.md).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

import structlog

from attestation.transparency.checkpoint import VerifierKey
from runner.witness.cosigner import Cosigner
from runner.witness.protocol import (
    MAX_REQUEST_BYTES,
    AddCheckpoint,
    Cosigned,
    WitnessRefusal,
    judge,
    log_key_for,
    parse_add_checkpoint,
)
from runner.witness.store import WitnessStore

IO_TIMEOUT_SECONDS: Final = 10.0
MAX_CONNECTIONS: Final = 64
SIZE_CONTENT_TYPE: Final = "text/x.tlog.size"

log = structlog.get_logger("runner.witness")


class Witness:
    """What the handler needs: the key, the state and the logs followed (name -> log key)."""

    def __init__(
        self, cosigner: Cosigner, store: WitnessStore, logs: Mapping[str, VerifierKey]
    ) -> None:
        self.cosigner = cosigner
        self.store = store
        self.logs = dict(logs)

    def add_checkpoint(self, body: bytes) -> str:
        """The cosignature line for an ``add-checkpoint`` body, or :class:`WitnessRefusal`."""
        request = parse_add_checkpoint(body)
        key = log_key_for(request.checkpoint.origin, self.logs)

        def check(pending: AddCheckpoint, latest: Cosigned | None) -> None:
            judge(pending, key, latest)

        return self.store.advance(
            request, check, lambda accepted: self.cosigner.cosign(accepted.checkpoint)
        )


class _Handler(BaseHTTPRequestHandler):
    server: WitnessServer
    timeout = IO_TIMEOUT_SECONDS
    protocol_version = "HTTP/1.1"
    server_version = "attested-replay-witness"
    sys_version = ""

    def do_POST(self) -> None:
        if self.path != "/add-checkpoint":
            self._answer(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {self.path[:80]}\n")
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.isdigit():
            self._answer(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required\n")
            return
        length = int(length_text)
        if length > MAX_REQUEST_BYTES:
            self._answer(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body of {length} bytes exceeds {MAX_REQUEST_BYTES}\n",
            )
            return
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            return
        try:
            line = self.server.witness.add_checkpoint(body)
        except WitnessRefusal as refusal:
            log.info("witness_refused", status=refusal.status, reason=str(refusal))
            if refusal.status == HTTPStatus.CONFLICT:
                self._answer(refusal.status, f"{refusal.size}\n", content_type=SIZE_CONTENT_TYPE)
            else:
                self._answer(refusal.status, f"{refusal}\n")
            return
        log.info("witness_cosigned", line=line.strip())
        self._answer(HTTPStatus.OK, line)

    def do_GET(self) -> None:
        parts = self.path.split("/")
        if len(parts) != 3 or parts[0] or parts[2] != "checkpoint":
            self._answer(HTTPStatus.NOT_FOUND, f"no such endpoint: GET {self.path[:80]}\n")
            return
        note = self.server.witness.store.note(parts[1])
        if note is None:
            self._answer(HTTPStatus.NOT_FOUND, "this witness never cosigned that log\n")
            return
        self._answer(HTTPStatus.OK, note)

    def _answer(self, status: int, text: str, *, content_type: str = "text/plain") -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        """Requests are logged as events by the handlers, not as access lines on stderr."""


class WitnessServer(ThreadingHTTPServer):
    """A thread per connection, at most :data:`MAX_CONNECTIONS` at once."""

    daemon_threads = True
    #: Set once the state is open, before :meth:`serve_forever`.
    witness: Witness

    def __init__(self, address: tuple[str, int]) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        if not self._slots.acquire(blocking=False):
            if isinstance(request, socket.socket):
                with contextlib.suppress(OSError):
                    request.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                        b"Connection: close\r\n\r\n"
                    )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
