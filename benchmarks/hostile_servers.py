"""Hostile clients against other servers' public options: the measurements behind
docs/publishing.md ("The ASGI server, and why").

    python benchmarks/hostile_servers.py {nginx,granian,hypercorn} [--python PATH]

``nginx`` (Debian's package) runs in front of ``attested-replay serve`` with the directives
of :data:`NGINX_CONF`; ``granian`` (2.8.7, embedded server) and ``hypercorn`` (0.18.0) serve a
minimal ASGI app that reads the whole body, in a process of its own limited to 256
descriptors, started with ``--python`` (an interpreter where that server and requests are
installed: neither server is a dependency of the project). Then, with a 2 s head and 3 s body
deadline: silence, a request line and a header line dripped every 0.5 s, a body at 2 bytes/s,
200 KiB of headers; and with a 60 s head deadline, silent sockets above each cap and a GET.
Each case prints one line: when the server closed the connection, or that it did not.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import requests

RUNNER: Final = (sys.executable, "-m", "runner")
HEAD_SECONDS: Final = 2
BODY_SECONDS: Final = 3
FLOOD_HEAD_SECONDS: Final = 60
#: Silent sockets of the flood: above each cap, and within the cap plus the listen backlog
#: (128), so that every one connects.
FLOOD_SOCKETS: Final = {"nginx": 300, "hypercorn": 300, "granian": 100}
#: Descriptors of the granian and hypercorn processes, as the hostile-client tests give serve.
OPEN_FILES: Final = 256
#: granian's connection cap: 256 less the 64 + 128 serve keeps free (runner.service.guard).
GRANIAN_BACKPRESSURE: Final = 64
NGINX_WORKER_CONNECTIONS: Final = 128
NGINX_CONF: Final = """daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    client_header_timeout {head}s;
    client_body_timeout {body}s;
    keepalive_timeout 5s;
    client_header_buffer_size 1k;
    large_client_header_buffers 4 16k;
    client_max_body_size 16m;
    reset_timedout_connection on;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    upstream service {{ server 127.0.0.1:{back}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{front} backlog=128;
        location / {{
            proxy_pass http://service;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """Reads a request's whole body, then answers 200 ``ok``."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


def serve_app(kind: str, port: int, head_seconds: int) -> None:
    """In the server's process: ``app`` under granian or hypercorn, with public options."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
    if kind == "granian":
        from granian.http import HTTP1Settings  # type: ignore[import-not-found]
        from granian.server.embed import Server  # type: ignore[import-not-found]

        settings = HTTP1Settings(header_read_timeout=head_seconds * 1000, max_buffer_size=65536)
        server = Server(
            app,
            port=port,
            interface="asgi",
            http="1",
            backpressure=GRANIAN_BACKPRESSURE,
            http1_settings=settings,
        )
        asyncio.run(server.serve())
        return
    from hypercorn.asyncio import serve  # type: ignore[import-not-found]
    from hypercorn.config import Config  # type: ignore[import-not-found]

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.keep_alive_timeout = head_seconds
    config.read_timeout = BODY_SECONDS
    config.h11_max_incomplete_size = 65536
    asyncio.run(serve(app, config))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_up(url: str) -> None:
    for _ in range(300):
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


@contextmanager
def running(kind: str, python: str, head_seconds: int, scratch: Path) -> Iterator[int]:
    """The server under test; yields the port the hostile clients connect to."""
    port = free_port()
    processes: list[subprocess.Popen[bytes]] = []
    log = (scratch / f"{kind}-{head_seconds}.log").open("wb")
    try:
        if kind == "nginx":
            back = free_port()
            state = scratch / f"state-{head_seconds}"
            serve = [*RUNNER, "serve", "--port", str(back), "--state-dir", str(state)]
            processes.append(subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT))
            wait_until_up(f"http://127.0.0.1:{back}/v1/health")
            conf = scratch / f"nginx-{head_seconds}.conf"
            conf.write_text(
                NGINX_CONF.format(
                    dir=scratch,
                    connections=NGINX_WORKER_CONNECTIONS,
                    head=head_seconds,
                    body=BODY_SECONDS,
                    back=back,
                    front=port,
                )
            )
            nginx = ["nginx", "-c", str(conf), "-p", str(scratch)]
            processes.append(subprocess.Popen(nginx, stdout=log, stderr=subprocess.STDOUT))
            wait_until_up(f"http://127.0.0.1:{port}/v1/health")
        else:
            child = [python, __file__, kind, "--serve", str(port), str(head_seconds)]
            processes.append(subprocess.Popen(child, stdout=log, stderr=subprocess.STDOUT))
            wait_until_up(f"http://127.0.0.1:{port}/")
        yield port
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait()
        log.close()


def seconds_until_closed(port: int, drip: list[bytes], every: float = 0.5) -> str:
    """Send ``drip`` one piece every ``every`` seconds until the server closes or answers."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(every)
        for piece in drip:
            try:
                answer = sock.recv(64)
            except TimeoutError:
                answer = None
            except ConnectionResetError:
                answer = b""
            if answer is not None:
                what = "closed" if answer == b"" else f"answered {answer[:12]!r}"
                return f"{what} after {time.monotonic() - started:.1f} s"
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                return f"closed after {time.monotonic() - started:.1f} s"
    return f"STILL OPEN after {time.monotonic() - started:.1f} s, when the drip ended"


def drips(port: int) -> None:
    head = b"PUT /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
    cases = {
        "silence": [b""] * 40,
        "request line drip": [bytes([byte]) for byte in b"PUT /v1/tenants/acme/envelopes HTTP/1.1"],
        "header drip": [b"PUT / HTTP/1.1\r\n", *[f"X-{n}: y\r\n".encode() for n in range(40)]],
        "body at 2 bytes/s": [head, *[b"{"] * 40],
    }
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        outcomes = pool.map(lambda drip: seconds_until_closed(port, drip), cases.values())
        for name, outcome in zip(cases, outcomes, strict=True):
            print(f"{name}: {outcome}")
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(200):
                sock.sendall(b"X-Padding: " + b"p" * 1010 + b"\r\n")
            sock.settimeout(10)
            print(f"200 KiB of headers: answered {sock.recv(12)!r}")
        except OSError as exc:
            print(f"200 KiB of headers: closed while sending ({exc.strerror})")


def flood(port: int, sockets: int) -> None:
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(sockets)]
    try:
        time.sleep(1)
        started = time.monotonic()
        try:
            status = requests.get(f"http://127.0.0.1:{port}/v1/health", timeout=20).status_code
            outcome = f"answered {status}"
        except requests.RequestException as exc:
            outcome = f"failed ({type(exc).__name__})"
        print(
            f"GET beside {sockets} silent sockets: {outcome} after "
            f"{time.monotonic() - started:.1f} s"
        )
    finally:
        for sock in held:
            sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server", choices=["nginx", "granian", "hypercorn"])
    parser.add_argument("--python", default=sys.executable, help="interpreter for the server")
    parser.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_app(args.server, *args.serve)
        return
    if args.server == "nginx" and shutil.which("nginx") is None:
        raise SystemExit("nginx is not installed (Debian: apt-get install nginx-light)")
    if args.server != "nginx":
        found = subprocess.run([args.python, "-c", f"import {args.server}"], check=False)
        if found.returncode:
            raise SystemExit(f"{args.server} is not importable by {args.python}")
    with tempfile.TemporaryDirectory() as scratch:
        with running(args.server, args.python, HEAD_SECONDS, Path(scratch)) as port:
            drips(port)
        with running(args.server, args.python, FLOOD_HEAD_SECONDS, Path(scratch)) as port:
            flood(port, FLOOD_SOCKETS[args.server])
        logged = sum(path.stat().st_size for path in Path(scratch).glob("*.log"))
        print(f"logged: {logged:,} bytes")


if __name__ == "__main__":
    main()
