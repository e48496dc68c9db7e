"""The one HTTP client against servers that misbehave on purpose (tests/hostile_server.py).

No assertion here is about time: a deadline is shown by the error it ends with and by how
many bytes the dripping server managed to send before the client hung up (a count that can
only shrink when the machine is slow). Memory is the peak of Python allocations while the
request runs (tracemalloc), which does not depend on timing either.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from attestation.encoding.json_document import json_nests_deeper
from attestation.tenant.errors import TenantUsageError
from attestation.tenant.http import (
    TRUST_VARIABLES,
    Answer,
    AnswerTooLargeError,
    HttpClient,
    HttpRefusedError,
    HttpUnavailableError,
    Limits,
    RetryAfterTooLongError,
    RetryPolicy,
)
from tests import hostile_server as hs

DEADLINE = 1.0
DRIP = 0.05  # seconds between two dripped bytes
#: What the dripping server can send before a client that keeps its deadline hangs up,
#: three times over (a slow machine only sends fewer).
DRIP_BOUND = 3 * DEADLINE / DRIP
MiB = 1024 * 1024


def _client(
    ca: Path | None = None, *, attempts: int = 2, sleeps: list[float] | None = None
) -> HttpClient:
    record = sleeps if sleeps is not None else []
    return HttpClient(
        ca_bundle=ca, retry=RetryPolicy(attempts=attempts, backoff_factor=0.01), sleep=record.append
    )


@pytest.fixture(params=["http", "https"])
def tls(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[ssl.SSLContext | None, Path | None]:
    """Each behaviour over plain loopback http and over TLS (a CA the client is given)."""
    if request.param == "http":
        return None, None
    return hs.mint_tls(tmp_path)


def _peak_while(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        action()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    "behaviour",
    [hs.drip_status_line(DRIP), hs.drip_headers(DRIP), hs.drip_body(DRIP), hs.silent],
    ids=["status-line", "headers", "body", "silent"],
)
def test_a_drip_ends_at_the_deadline(
    tls: tuple[ssl.SSLContext | None, Path | None], behaviour: hs.Behaviour
) -> None:
    context, ca = tls
    with (
        hs.HostileServer(behaviour, tls=context) as server,
        _client(ca) as client,
        pytest.raises(HttpUnavailableError, match=r"within the 1 s deadline"),
    ):
        client.get(server.url + "/x", limit=Limits(MiB, DEADLINE))
    assert server.sent <= DRIP_BOUND


def test_a_tls_handshake_drip_ends_at_the_deadline(tmp_path: Path) -> None:
    _context, ca = hs.mint_tls(tmp_path)
    with (
        hs.HostileServer(hs.drip_handshake(DRIP), raw=True) as server,
        _client(ca) as client,
        pytest.raises(HttpUnavailableError, match=r"within the 1 s deadline"),
    ):
        client.get(f"https://127.0.0.1:{server.port}/", limit=Limits(MiB, DEADLINE))
    assert server.sent <= DRIP_BOUND


@pytest.mark.parametrize(
    "behaviour",
    [hs.endless_chunked, hs.declared(512 * MiB), hs.undeclared_stream],
    ids=["endless-chunked", "declares-512MiB", "streams-without-length"],
)
def test_an_answer_over_its_cap_is_refused_while_reading(
    tls: tuple[ssl.SSLContext | None, Path | None], behaviour: hs.Behaviour
) -> None:
    context, ca = tls
    with hs.HostileServer(behaviour, tls=context) as server, _client(ca) as client:

        def fetch() -> None:
            with pytest.raises(AnswerTooLargeError, match=str(MiB)):
                client.get(server.url, limit=Limits(MiB, 30))

        peak = _peak_while(fetch)
    assert peak < 3 * MiB


def test_an_error_answer_is_read_only_for_its_message() -> None:
    with hs.HostileServer(hs.declared(512 * MiB, status=404)) as server, _client() as client:
        answer = client.get(server.url, limit=Limits(64 * MiB, 30))
    assert answer.status == 404
    assert answer.body == b"x" * 16384  # MAX_ERROR_ANSWER_BYTES


def test_retry_after_of_a_day_is_refused_at_once() -> None:
    sleeps: list[float] = []
    with (
        hs.HostileServer(hs.answer(503, headers={"Retry-After": "86400"})) as server,
        _client(attempts=4, sleeps=sleeps) as client,
        pytest.raises(RetryAfterTooLongError, match=r"asked to wait 86400 s \(more than 120 s\)"),
    ):
        client.get(server.url, limit=Limits(1024, 600))
    assert len(server.requests) == 1
    assert sleeps == []


def test_retry_after_beyond_the_deadline_is_refused_at_once() -> None:
    sleeps: list[float] = []
    with (
        hs.HostileServer(hs.answer(429, headers={"Retry-After": "60"})) as server,
        _client(attempts=4, sleeps=sleeps) as client,
        pytest.raises(
            HttpUnavailableError, match=r"would start after the 5 s deadline \(wait 60 s\)"
        ),
    ):
        client.get(server.url, limit=Limits(1024, 5))
    assert sleeps == []


def test_transient_answers_are_retried_then_returned() -> None:
    sleeps: list[float] = []
    with (
        hs.HostileServer(hs.answer(503, b"maintenance")) as server,
        _client(attempts=3, sleeps=sleeps) as client,
    ):
        answer = client.get(server.url, limit=Limits(1024, 30))
    assert (answer.status, answer.text()) == (503, "maintenance")
    assert len(server.requests) == 3
    assert len(sleeps) == 2


def test_nothing_listening_is_no_connection() -> None:
    port = hs.free_port()
    with _client(attempts=1) as client, pytest.raises(HttpUnavailableError) as caught:
        client.get(f"http://127.0.0.1:{port}/", limit=Limits(1024, 5))
    assert caught.value.refused


def test_a_redirect_to_plain_http_elsewhere_is_refused_at_the_hop() -> None:
    redirect = hs.answer(302, headers={"Location": "http://203.0.113.7/corpus.tar.gz"})
    with (
        hs.HostileServer(redirect) as server,
        _client() as client,
        pytest.raises(HttpRefusedError, match=r"redirect .* refused: .*not 203\.0\.113\.7"),
    ):
        client.get(server.url, limit=Limits(1024, 5), redirects=5)


def test_redirects_are_not_followed_unless_allowed() -> None:
    with hs.HostileServer(hs.answer(307, headers={"Location": "/elsewhere"})) as server:
        with (
            _client() as client,
            pytest.raises(HttpRefusedError, match="which this call does not follow"),
        ):
            client.get(server.url, limit=Limits(1024, 5))
        with (
            _client() as client,
            pytest.raises(HttpRefusedError, match="which this call does not follow"),
        ):
            client.put(server.url, body=b"{}", limit=Limits(1024, 5))


def test_a_redirect_loop_ends_at_the_hop_limit() -> None:
    with (
        hs.HostileServer(hs.answer(302, headers={"Location": "/again"})) as server,
        _client() as client,
        pytest.raises(HttpRefusedError, match="which this call does not follow"),
    ):
        client.get(server.url, limit=Limits(1024, 5), redirects=3)
    assert len(server.requests) == 4


def test_a_cross_origin_redirect_carries_no_token() -> None:
    with hs.HostileServer(hs.answer(200, b"ok")) as target:
        bounce = hs.answer(302, headers={"Location": target.url + "/z"})
        with (
            hs.HostileServer(bounce) as first,
            HttpClient(token="arp_secret", retry=RetryPolicy(attempts=1)) as client,
        ):
            answer = client.get(first.url, limit=Limits(1024, 5), redirects=1)
    assert answer.body == b"ok"
    assert answer.url == target.url + "/z"
    assert b"Bearer arp_secret" in first.requests[0]
    assert b"arp_secret" not in target.requests[0]


def test_an_untrusted_certificate_is_refused_not_retried(tmp_path: Path) -> None:
    context, _ca = hs.mint_tls(tmp_path)
    with (
        hs.HostileServer(hs.answer(200, b"ok"), tls=context) as server,
        _client(attempts=4) as client,
        pytest.raises(HttpRefusedError, match=r"TLS failed: .*CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get(server.url, limit=Limits(1024, 5))
    assert server.requests == []  # the handshake failed: no request, and no retry


def test_a_certificate_for_another_name_is_refused(tmp_path: Path) -> None:
    context, ca = hs.mint_tls(tmp_path, hostname="other.example", ip=False)
    with (
        hs.HostileServer(hs.answer(200, b"ok"), tls=context) as server,
        _client(ca) as client,
        pytest.raises(HttpRefusedError, match=r"TLS failed: .*CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get(f"https://localhost:{server.port}/", limit=Limits(1024, 5))


def test_an_unreadable_ca_bundle_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(TenantUsageError, match="cannot load the CA bundle"):
        HttpClient(ca_bundle=tmp_path / "absent.pem")


def test_plain_http_off_loopback_is_refused_before_connecting() -> None:
    with (
        _client() as client,
        pytest.raises(TenantUsageError, match=r"not 203\.0\.113\.7"),
    ):
        client.get("http://203.0.113.7/", limit=Limits(1024, 5))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 32"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        ('{"a": 1}'.encode("utf-16-le"), "not UTF-8 JSON: it holds NUL bytes"),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8"),
        (b'{"a": 1, "a": 2}', "appears more than once"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
    ],
    ids=["deep", "bom", "utf-16-le", "utf-16", "duplicate", "nan"],
)
def test_server_json_is_strict(body: bytes, message: str) -> None:
    with pytest.raises(HttpRefusedError, match=message):
        Answer(200, {}, body, "http://127.0.0.1/").json("the answer")


def test_nesting_is_measured_outside_strings() -> None:
    assert not json_nests_deeper(b'{"a": "[[[[[[[[", "b": [1, [2, "]]]]"]]}', 3)
    assert not json_nests_deeper(b'["\\"[[[[", "\\\\"]', 1)  # escaped quotes stay in strings
    assert json_nests_deeper(b'{"a": [[1]]}', 2)
    assert not json_nests_deeper(b'{"a": [[1]]}', 3)
    # At most ``limit`` openers in all: answered without stripping strings, the same way.
    assert not json_nests_deeper(b"[[[]]]", 3)
    assert json_nests_deeper(b"[[[]]]", 2)
    assert not json_nests_deeper(b'["[", "{"]', 3)


@pytest.fixture
def trust_environment(tmp_path: Path) -> Iterator[tuple[dict[str, str], hs.HostileServer]]:
    """Variables that redirect trust in requests/curl/OpenSSL, all pointing somewhere wrong."""
    with hs.HostileServer(hs.answer(200, b"from the proxy")) as proxy:
        netrc = tmp_path / "netrc"
        netrc.write_text("machine 127.0.0.1 login thief password stolen\n", encoding="utf-8")
        env = {
            **{k: v for k, v in os.environ.items() if k not in TRUST_VARIABLES},
            "HTTPS_PROXY": proxy.url,
            "https_proxy": proxy.url,
            "HTTP_PROXY": proxy.url,
            "http_proxy": proxy.url,
            "ALL_PROXY": proxy.url,
            "REQUESTS_CA_BUNDLE": str(tmp_path / "absent.pem"),
            "CURL_CA_BUNDLE": str(tmp_path / "absent.pem"),
            "SSL_CERT_FILE": str(tmp_path / "absent.pem"),
            "NETRC": str(netrc),
            "SSLKEYLOGFILE": str(tmp_path / "keys.log"),
        }
        yield env, proxy


def test_the_environment_redirects_nothing(
    tmp_path: Path, trust_environment: tuple[dict[str, str], hs.HostileServer]
) -> None:
    env, proxy = trust_environment
    context, ca = hs.mint_tls(tmp_path)
    code = (
        "import pathlib, sys\n"
        "from attestation.tenant.http import HttpClient, Limits\n"
        "with HttpClient(ca_bundle=pathlib.Path(sys.argv[1])) as client:\n"
        "    print(client.get(sys.argv[2], limit=Limits(100, 10)).body.decode())\n"
        "    print(client.environment().describe())\n"
    )
    with hs.HostileServer(hs.answer(200, b"from the server"), tls=context) as server:
        done = subprocess.run(
            [sys.executable, "-c", code, str(ca), server.url + "/"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parents[2],
        )
    body, environment = done.stdout.splitlines()
    assert body == "from the server"
    assert proxy.requests == []
    assert not (tmp_path / "keys.log").exists()
    assert b"Authorization" not in server.requests[0]
    assert environment == (
        f"CA bundle {ca} (--ca-bundle); ignored: HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, "
        "https_proxy, http_proxy, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, SSL_CERT_FILE, NETRC, "
        "SSLKEYLOGFILE"
    )


# -- PUT: the same urllib3 pools and deadline sockets as GET (HttpClient.put) ---------------


@pytest.mark.parametrize(
    "behaviour",
    [hs.drip_status_line(DRIP), hs.drip_headers(DRIP), hs.drip_body(DRIP), hs.silent],
    ids=["status-line", "headers", "body", "silent"],
)
def test_a_put_answered_by_a_drip_ends_at_the_deadline(
    tls: tuple[ssl.SSLContext | None, Path | None], behaviour: hs.Behaviour
) -> None:
    context, ca = tls
    with (
        hs.HostileServer(behaviour, tls=context) as server,
        _client(ca) as client,
        pytest.raises(HttpUnavailableError, match=r"within the 1 s deadline"),
    ):
        client.put(server.url + "/x", body=b"{}", limit=Limits(MiB, DEADLINE))
    assert server.sent <= DRIP_BOUND


@pytest.mark.parametrize(
    "behaviour",
    [hs.endless_chunked, hs.declared(512 * MiB), hs.undeclared_stream],
    ids=["endless-chunked", "declares-512MiB", "streams-without-length"],
)
def test_a_put_answer_over_its_cap_is_refused_while_reading(
    tls: tuple[ssl.SSLContext | None, Path | None], behaviour: hs.Behaviour
) -> None:
    context, ca = tls
    with hs.HostileServer(behaviour, tls=context) as server, _client(ca) as client:

        def upload() -> None:
            with pytest.raises(AnswerTooLargeError, match=str(MiB)):
                client.put(server.url, body=b"{}", limit=Limits(MiB, 30))

        peak = _peak_while(upload)
    assert peak < 3 * MiB


def test_a_put_is_retried_on_transient_answers_and_sends_its_body_each_time() -> None:
    sleeps: list[float] = []
    with (
        hs.HostileServer(hs.answer(503, b"maintenance")) as server,
        _client(attempts=3, sleeps=sleeps) as client,
    ):
        answer = client.put(server.url + "/e?x=1", body=b'{"a":1}', limit=Limits(1024, 30))
    assert (answer.status, answer.text()) == (503, "maintenance")
    assert len(server.requests) == 3
    assert all(r.startswith(b"PUT /e?x=1 HTTP/1.1\r\n") for r in server.requests)
    assert all(r.endswith(b'\r\n\r\n{"a":1}') for r in server.requests)
    assert len(sleeps) == 2


def test_a_put_error_answer_is_cut_at_the_error_cap() -> None:
    big = b"e" * (64 * 1024)
    with hs.HostileServer(hs.answer(404, big)) as server, _client() as client:
        answer = client.put(server.url, body=b"{}", limit=Limits(MiB, 30))
    assert answer.status == 404
    assert len(answer.body) == 16 * 1024


def test_a_put_with_nothing_listening_is_no_connection() -> None:
    port = hs.free_port()
    with _client(attempts=1) as client, pytest.raises(HttpUnavailableError) as caught:
        client.put(f"http://127.0.0.1:{port}/", body=b"{}", limit=Limits(1024, 5))
    assert caught.value.refused


def test_a_put_to_an_untrusted_certificate_is_refused_not_retried(tmp_path: Path) -> None:
    context, _ca = hs.mint_tls(tmp_path)
    with (
        hs.HostileServer(hs.answer(200, b"ok"), tls=context) as server,
        _client(attempts=4) as client,
        pytest.raises(HttpRefusedError, match=r"TLS failed: .*CERTIFICATE_VERIFY_FAILED"),
    ):
        client.put(server.url, body=b"{}", limit=Limits(1024, 5))
    assert server.requests == []


def test_a_put_reuses_its_connection_and_reconnects_when_the_server_closed_it() -> None:
    """Two PUTs on one kept-alive connection; after the server closes it, the next PUT opens
    a new one without spending a retry."""
    connections: list[int] = []

    def keep_alive(conn: socket.socket, request: bytes, _server: hs.HostileServer) -> None:
        connections.append(1)
        for _ in range(2):
            conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
            request = conn.recv(65536)
            if not request:
                return
            while b'{"n":' not in request:  # the body may come in a second segment
                request += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        # then the server closes the connection (its keep-alive timeout)

    with hs.HostileServer(keep_alive) as server, _client(attempts=1) as client:
        answers = [
            client.put(server.url, body=b'{"n":%d}' % i, limit=Limits(1024, 5)) for i in range(3)
        ]
        time.sleep(0.2)  # the server has closed the kept-alive connection by now
        answers.append(client.put(server.url, body=b'{"n":3}', limit=Limits(1024, 5)))
    assert [(a.status, a.body) for a in answers] == [(201, b"ok")] * 4
    assert len(connections) == 2


def _scripted(*answers: bytes) -> hs.Behaviour:
    """One connection that answers each request with the next of ``answers`` (raw bytes),
    then waits for the client to go (or for the next request: then it closes)."""

    def behave(conn: socket.socket, _request: bytes, server: hs.HostileServer) -> None:
        for number, raw in enumerate(answers):
            if number:
                request = conn.recv(65536)
                if not request:
                    return
                while b'{"n":' not in request:  # the body may come in a second segment
                    request += conn.recv(65536)
                server.requests.append(request)
            conn.sendall(raw)
        conn.recv(1)

    return behave


def test_a_put_answer_in_chunks_is_joined_and_its_connection_kept() -> None:
    chunked = (
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    connections: list[int] = []

    def count(conn: socket.socket, request: bytes, server: hs.HostileServer) -> None:
        connections.append(1)
        _scripted(chunked, plain)(conn, request, server)

    with hs.HostileServer(count) as server, _client(attempts=1) as client:
        first = client.put(server.url, body=b'{"n":0}', limit=Limits(1024, 5))
        second = client.put(server.url, body=b'{"n":1}', limit=Limits(1024, 5))
    assert (first.status, first.body) == (201, b"abcde")
    assert (second.status, second.body) == (200, b"ok")
    assert connections == [1]


def test_a_put_skips_an_interim_100_and_ends_a_connection_the_answer_closes() -> None:
    """``100 Continue`` is not the answer; an HTTP/1.0 answer without keep-alive ends its
    connection, so the next PUT opens another (without spending a retry)."""
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 201 Created\r\nContent-Length: 3\r\n\r\nyes"
    connections: list[int] = []

    def count(conn: socket.socket, request: bytes, server: hs.HostileServer) -> None:
        connections.append(1)
        _scripted(answer)(conn, request, server)

    with hs.HostileServer(count) as server, _client(attempts=1) as client:
        answers = [client.put(server.url, body=b"{}", limit=Limits(1024, 5)) for _ in range(2)]
    assert [(a.status, a.body) for a in answers] == [(201, b"yes")] * 2
    assert len(connections) == 2


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\n folded: header\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"",
    ],
    ids=[
        "http-2",
        "two-digit-status",
        "folded-header",
        "bad-length",
        "bad-chunk-size",
        "short-body",
        "cut-head",
        "no-answer",
    ],
)
def test_a_malformed_put_answer_is_a_failed_attempt(raw: bytes) -> None:
    def behave(conn: socket.socket, _request: bytes, _server: hs.HostileServer) -> None:
        conn.sendall(raw)

    with (
        hs.HostileServer(behave) as server,
        _client(attempts=2) as client,
        pytest.raises(HttpUnavailableError, match=r"failed after 2 attempts|reading the answer"),
    ):
        client.put(server.url, body=b"{}", limit=Limits(1024, 5))
    assert 1 <= len(server.requests) <= 2


@pytest.mark.parametrize(
    ("url_tail", "headers", "message"),
    [
        ("/a b", {}, "holds a space or a control character"),
        ("/a\x7fb", {}, "holds a space or a control character"),
        ("/", {"X-Injected": "v\r\nEvil: 1"}, "header X-Injected holds a line break"),
        ("/", {"X-Nul": "v\x00"}, "header X-Nul holds a line break or NUL"),
        ("/", {"Bad Name": "v"}, "is not a header name"),
        ("/", {"X-Text": "\u2603"}, "header X-Text is not Latin-1 text"),
    ],
    ids=["space", "delete", "crlf", "nul", "name", "not-latin-1"],
)
def test_a_put_that_would_change_its_own_framing_is_refused_before_sending(
    url_tail: str, headers: dict[str, str], message: str
) -> None:
    with hs.HostileServer(hs.answer(201, b"ok")) as server, _client(attempts=3) as client:
        with pytest.raises(HttpRefusedError, match=message):
            client.put(server.url + url_tail, body=b"{}", headers=headers, limit=Limits(1024, 5))
        assert server.requests == []


@pytest.mark.parametrize("size", [0, 100, 64 * 1024, 64 * 1024 + 1, 300_000])
def test_a_put_sends_its_body_whole_whatever_its_size(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    with hs.HostileServer(hs.answer(201, b"ok")) as server, _client(attempts=1) as client:
        answer = client.put(server.url + "/e", body=body, limit=Limits(1024, 30))
    assert (answer.status, answer.body) == (201, b"ok")
    [request] = server.requests
    head, _, sent = request.partition(b"\r\n\r\n")
    assert sent == body
    assert f"Content-Length: {size}".encode() in head.split(b"\r\n")
    assert head.split(b"\r\n")[1] == f"Host: 127.0.0.1:{server.port}".encode()


def test_a_refused_connection_names_no_internal_object() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with _client(attempts=1) as client, pytest.raises(HttpUnavailableError) as failed:
        client.get(f"http://127.0.0.1:{port}/x", limit=Limits(1024, 10))
    message = str(failed.value)
    assert message.endswith(
        f"GET http://127.0.0.1:{port}/x: Failed to establish a new connection: "
        "[Errno 111] Connection refused"
    )
    assert "_Connection" not in message
    assert "host=" not in message
