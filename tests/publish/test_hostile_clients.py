"""Hostile clients against a real ``attested-replay serve`` process: slow headers, slow bodies,
idle connections by the hundred, oversized heads, token floods. None of them stops a
legitimate publish, and none of them fills the log."""

from __future__ import annotations

import base64
import hashlib
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from attestation.tenant.http import RetryPolicy
from runner.cli import main
from runner.publish.client import publish_envelope
from runner.service.log.storage import SqliteStorage
from runner.service.ratelimit import Rate, RateLimiter
from tests.publish.conftest import Deployment, ServeProcess, connect, make_envelope

FAST = RetryPolicy(backoff_factor=0.05, backoff_max=0.5)


def _publish(server: ServeProcess, deployment: Deployment, seed: int) -> int | None:
    outcome = publish_envelope(
        server.url,
        make_envelope("acme", f"run-{seed}", seed),
        tenant="acme",
        run_id=f"run-{seed}",
        token=deployment.operator,
        spool_dir=deployment.root / "spool",
        retry=FAST,
    )
    return outcome.log_index


def _get_retrying(url: str, token: str) -> requests.Response:
    """GET as a reading client does while the service is at its connection limit: the guard
    resets connections beyond the limit, and a client retries (the publisher does too)."""
    for _ in range(10):
        try:
            return requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        except requests.ConnectionError:
            time.sleep(0.2)
    return requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _seconds_until_closed(sock: socket.socket, drip: list[bytes], every: float) -> float:
    """Send ``drip`` one piece every ``every`` seconds until the server closes the connection;
    the seconds it took (a drip that ends first fails the test)."""
    started = time.monotonic()
    with sock:
        sock.settimeout(every)
        for piece in drip:
            try:
                if sock.recv(1) == b"":
                    return time.monotonic() - started
            except TimeoutError:
                pass
            except ConnectionResetError:
                return time.monotonic() - started
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - started
    pytest.fail(f"the server kept the connection open for {time.monotonic() - started:.0f} s")


def test_slow_heads_slow_bodies_and_silence_are_cut_off(deployment: Deployment) -> None:
    server = deployment.serve("--header-timeout", "2", "--body-timeout", "3")
    digest = "sha256:" + "0" * 64
    head = (
        f"PUT /v1/tenants/acme/envelopes/{digest} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {deployment.operator}\r\nContent-Length: 5000\r\n\r\n"
    ).encode()
    cases = {
        # nothing at all, one byte of the request line per 0.5 s, one header line per 0.5 s,
        # then a complete head and a body at 2 bytes per second
        "silent": [b""] * 40,
        "request line drip": [bytes([b]) for b in b"PUT /v1/tenants/acme/envelopes HTTP/1.1"],
        "header drip": [b"PUT / HTTP/1.1\r\n", *[f"X-{n}: y\r\n".encode() for n in range(40)]],
        "body drip": [head, *[b"{"] * 40],
    }
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        took = dict(
            zip(
                cases,
                pool.map(
                    lambda drip: _seconds_until_closed(connect(server), drip, 0.5), cases.values()
                ),
                strict=True,
            )
        )
    # Closed at the deadline (2 s for heads, 3 s for the body once the head is in), never at
    # the end of a 20-second drip.
    for case in ("silent", "request line drip", "header drip"):
        assert 1.5 <= took[case] < 8, (case, took)
    assert 2.5 <= took["body drip"] < 9, took
    assert _publish(server, deployment, 1) == 0  # and the service serves on
    output = server.output()
    assert "Traceback" not in output


def test_hundreds_of_idle_connections_do_not_stop_a_publish(deployment: Deployment) -> None:
    """300 connections that never send a byte, reopened as soon as the server drops one,
    against a server allowed 256 descriptors: the legitimate publisher still gets through."""
    server = deployment.serve("--header-timeout", "60", open_files=256)
    stop = threading.Event()
    held: list[socket.socket] = []
    failures: list[str] = []

    def flood() -> None:
        while not stop.is_set():
            for position, sock in enumerate(list(held)):
                sock.setblocking(False)
                try:
                    dropped = sock.recv(1) == b""
                except BlockingIOError:
                    dropped = False
                except OSError:
                    dropped = True
                if dropped:
                    sock.close()
                    try:
                        held[position] = connect(server)
                    except OSError as exc:
                        failures.append(str(exc))
            stop.wait(0.05)

    flooder = threading.Thread(target=flood, daemon=True)
    try:
        held.extend(connect(server) for _ in range(300))
        flooder.start()
        started = time.monotonic()
        indices = [_publish(server, deployment, seed) for seed in range(3)]
        took = time.monotonic() - started
        checkpoint = _get_retrying(
            f"{server.url}/v1/tenants/acme/log/checkpoint", deployment.reader
        )
    finally:
        stop.set()
        if flooder.is_alive():
            flooder.join()
        for sock in held:
            sock.close()
    assert indices == [0, 1, 2]
    assert took < 30, took  # bounded, where an unguarded server never answers
    assert checkpoint.status_code == 200
    output = server.output()
    assert "Traceback" not in output
    assert len(output) < 20_000  # no log line per refused accept


def test_an_oversized_request_head_is_cut_off(deployment: Deployment) -> None:
    server = deployment.serve()
    sock = connect(server)
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
    closed = False
    try:
        for _ in range(200):  # 200 KiB of headers, 1 KiB at a time
            sock.sendall(b"X-Padding: " + b"p" * 1010 + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    if not closed:
        sock.settimeout(10)
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
    sock.close()
    assert closed
    assert requests.get(f"{server.url}/v1/health", timeout=10).json() == {"status": "ok"}


def test_rate_limits_per_token_and_for_failed_authentication(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    server = deployment.serve("--rate-limit", "10/s")
    path = f"{server.url}/v1/tenants/acme/log/checkpoint"

    def burst(token: str, count: int) -> list[requests.Response]:
        with requests.Session() as session:
            return [
                session.get(path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
                for _ in range(count)
            ]

    answers = burst(deployment.reader, 40)  # a burst of 20 is allowed, then 10 per second
    limited = [a for a in answers if a.status_code == 429]
    assert limited, [a.status_code for a in answers]
    assert {a.status_code for a in answers} == {200, 429}
    assert limited[0].json() == {
        "error": "too many requests with this token: at most 10 per second",
        "reason": "rate-limited",
    }
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert burst(deployment.operator, 1)[0].status_code == 200  # another token is unaffected
    with ThreadPoolExecutor(max_workers=8) as pool:  # failed authentications: 100, then 50/s
        guesses = [
            a.status_code for batch in pool.map(burst, ["arp_guess"] * 8, [80] * 8) for a in batch
        ]
    assert guesses.count(401) >= 100
    assert 429 in guesses
    assert set(guesses) == {401, 429}

    token_file = deployment.root / "reader.token"
    token_file.write_text(deployment.reader + "\n")
    capsys.readouterr()
    revoke = ["token", "revoke", "--db", str(deployment.database), "--token-file"]
    assert main([*revoke, str(token_file)]) == 0
    assert capsys.readouterr().out.startswith("revoked ")
    time.sleep(2.5)  # the service caches a valid token for at most 2 s
    answer = burst(deployment.reader, 1)[0]
    assert (answer.status_code, answer.json()["reason"]) == (401, "unauthenticated")
    assert main([*revoke, str(token_file)]) == 9  # nothing left to revoke


def test_token_buckets() -> None:
    now = [0.0]
    rate = Rate.parse("10/s")
    assert rate == Rate(per_second=10.0, burst=20.0)
    limiter = RateLimiter(rate, clock=lambda: now[0])
    assert [limiter.acquire("a") for _ in range(20)] == [0.0] * 20  # the burst
    assert limiter.acquire("a") == pytest.approx(0.1)  # then one per 0.1 s
    assert limiter.acquire("b") == 0.0  # another key has its own bucket
    now[0] += 0.25
    assert limiter.acquire("a") == 0.0
    assert Rate.parse("120/min") == Rate(per_second=2.0, burst=4.0)
    assert Rate.parse("0") is None
    for bad in ("fast", "10/day", "-1/s", "nan/s"):
        with pytest.raises(ValueError, match="is not a rate: write N/s, N/min or N/h"):
            Rate.parse(bad)


def test_plain_http_on_a_network_address_is_announced(deployment: Deployment) -> None:
    server = deployment.serve("--host", "0.0.0.0")
    assert requests.get(f"{server.url}/v1/health", timeout=10).status_code == 200
    output = server.output()
    assert "WARNING: serving plain HTTP on 0.0.0.0:" in output
    assert "which is not a loopback address" in output
    assert "listening on http://0.0.0.0:" in output


def test_content_digest_mismatch_is_refused_before_anything_is_stored(
    deployment: Deployment,
) -> None:
    server = deployment.serve()
    data = make_envelope("acme", "run-1", 1)
    digest = hashlib.sha256(data).digest()
    answer = requests.put(
        f"{server.url}/v1/tenants/acme/envelopes/sha256:{digest.hex()}",
        data=data,
        headers={
            "Authorization": f"Bearer {deployment.operator}",
            "Content-Digest": f"sha-256=:{base64.b64encode(bytes(32)).decode()}:",
        },
        timeout=30,
    )
    assert answer.status_code == 422
    assert SqliteStorage(deployment.database).log_size("acme") == 0
