"""A loopback HTTP server that misbehaves on purpose, one scripted answer per connection.

Each behaviour is a function ``(conn, request, server)`` writing raw bytes, so it can do what
no well-behaved framework would: drip the status line, never end a chunked body, promise
512 MiB, ask to be retried tomorrow, redirect anywhere. Every loop stops when the server
closes (at the latest ``hard_stop`` seconds after it started), so a client that fails to
bound itself makes its test fail instead of hanging the suite.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Behaviour = Callable[[socket.socket, bytes, "HostileServer"], None]


@dataclass
class HostileServer:
    behaviour: Behaviour
    tls: ssl.SSLContext | None = None
    #: Hand the behaviour the bare TCP connection: no TLS, no request read.
    raw: bool = False
    hard_stop: float = 60.0
    requests: list[bytes] = field(default_factory=list)
    sent: int = 0  # bytes the streaming behaviours (drips, endless answers) sent

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._deadline = time.monotonic() + self.hard_stop
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def running(self) -> bool:
        return not self.stopped.is_set() and time.monotonic() < self._deadline

    def count(self, n: int) -> None:
        with self._lock:
            self.sent += n

    def send_slowly(self, conn: socket.socket, data: bytes, interval: float) -> None:
        for i in range(len(data)):
            if not self.running():
                return
            conn.sendall(data[i : i + 1])
            self.count(1)
            time.sleep(interval)

    def close(self) -> None:
        self.stopped.set()
        self._listener.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while self.running():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.hard_stop)
            if self.raw:
                self.behaviour(conn, b"", self)
                return
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            request = _read_request(conn)
            with self._lock:
                self.requests.append(request)
            self.behaviour(conn, request, self)
        except OSError:
            pass
        finally:
            conn.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                rest += chunk
    return head + b"\r\n\r\n" + rest


# --- behaviours --------------------------------------------------------------------------


def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Behaviour:
    def behave(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
        lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    return behave


def drip_status_line(interval: float) -> Behaviour:
    def behave(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
        server.send_slowly(conn, b"HTTP/1.1 200 " + b"O" * 60000, interval)

    return behave


def drip_handshake(interval: float) -> Behaviour:
    """(raw) Read the ClientHello, then answer one TLS record header and body a byte at a time."""

    def behave(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
        conn.recv(65536)
        server.send_slowly(conn, b"\x16\x03\x03\x40\x00" + b"\x02" * 0x4000, interval)

    return behave


def drip_headers(interval: float) -> Behaviour:
    def behave(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
        server.send_slowly(conn, b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 60000, interval)

    return behave


def drip_body(interval: float) -> Behaviour:
    def behave(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        server.send_slowly(conn, b"x" * 100000, interval)

    return behave


def silent(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
    while server.running():
        time.sleep(0.05)


def endless_chunked(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    while server.running():
        conn.sendall(chunk)
        server.count(0x10000)


def declared(size: int, status: int = 200) -> Behaviour:
    """Announce ``size`` bytes, then stream them (until the server stops)."""

    def behave(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
        conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Length: {size}\r\n\r\n".encode())
        block = b"x" * 65536
        while server.running():
            conn.sendall(block)
            server.count(len(block))

    return behave


def undeclared_stream(conn: socket.socket, _request: bytes, server: HostileServer) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
    block = b"x" * 65536
    while server.running():
        conn.sendall(block)
        server.count(len(block))


def nested_json(depth: int) -> Behaviour:
    return answer(200, b"[" * depth + b"]" * depth, {"Content-Type": "application/json"})


# --- TLS for tests -----------------------------------------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def mint_tls(
    directory: Path, hostname: str = "localhost", *, ip: bool = True
) -> tuple[ssl.SSLContext, Path]:
    """A server context for ``hostname`` (and 127.0.0.1 unless ``ip`` is False), and the CA
    file that trusts it: a self-signed certificate, so the CA file is the certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(hostname)]
                + ([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))] if ip else [])
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / f"{hostname}.pem"
    key_path = directory / f"{hostname}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context, cert_path


def route(paths: dict[str, Behaviour], default: Behaviour) -> Behaviour:
    """The behaviour for the request's path (its part before ``?``), else ``default``."""

    def behave(conn: socket.socket, request: bytes, server: HostileServer) -> None:
        target = request.split(b" ", 2)[1].decode("ascii", "replace") if b" " in request else ""
        paths.get(target.split("?", 1)[0], default)(conn, request, server)

    return behave
