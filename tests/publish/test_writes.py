"""One ``send()`` per response (:class:`runner.service.combined_writes.CombinedWrites`): the held
first write, in isolation and through a real ``serve`` process (pipelined requests, an
interim ``100 Continue``)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
from collections.abc import Iterable, Iterator

import pytest

from attestation.transparency.checkpoint import VerifierKey
from runner.publish.client import publish_envelope
from runner.service.combined_writes import COPY_BELOW, CombinedWrites
from tests.publish.conftest import Deployment, connect, make_envelope


class RecordingTransport(asyncio.Transport):
    """What reached the socket, one item per ``write``; ``closed`` once closed."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[bytes | str] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.events.append(bytes(data))

    def close(self) -> None:
        self.closing = True
        self.events.append("close")

    def abort(self) -> None:
        self.closing = True
        self.events.append("abort")

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def _turns(loop: asyncio.AbstractEventLoop, count: int = 2) -> None:
    for _ in range(count):
        loop.run_until_complete(asyncio.sleep(0))


def test_the_head_and_the_first_body_bytes_leave_in_one_write(
    loop: asyncio.AbstractEventLoop,
) -> None:
    real = RecordingTransport()
    combined = CombinedWrites(real, loop)
    combined.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n")
    assert real.events == []
    assert combined.get_write_buffer_size() == 7 + 43
    combined.write(b"{}")
    assert real.events == [b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}"]
    combined.write(b"more")
    combined.write(b"and more")
    assert real.events[1:] == [b"more", b"and more"]
    _turns(loop)
    assert len(real.events) == 3  # the next turn's flush found nothing held


def test_a_large_body_goes_out_beside_the_head_without_a_copy(
    loop: asyncio.AbstractEventLoop,
) -> None:
    lines: list[tuple[bytes, ...]] = []

    class WritevTransport(RecordingTransport):
        def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
            lines.append(tuple(bytes(data) for data in list_of_data))

    real = WritevTransport()
    combined = CombinedWrites(real, loop)
    body = bytes(COPY_BELOW)
    combined.write(b"head")
    combined.write(body)
    assert (real.events, lines) == ([], [(b"head", body)])
    combined.write(b"tail")
    assert real.events == [b"tail"]


def test_a_lone_first_write_leaves_on_the_next_turn(loop: asyncio.AbstractEventLoop) -> None:
    real = RecordingTransport()
    combined = CombinedWrites(real, loop)
    combined.write(memoryview(b"HTTP/1.1 100 Continue\r\n\r\n"))
    assert real.events == []
    _turns(loop)
    assert real.events == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    combined.write(b"HTTP/1.1 201 Created\r\n\r\n")
    assert real.events[1:] == [b"HTTP/1.1 201 Created\r\n\r\n"]


def test_closing_sends_what_is_held_first_and_abort_discards_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    real = RecordingTransport()
    combined = CombinedWrites(real, loop)
    combined.write(b"head")
    combined.close()
    assert real.events == [b"head", "close"]
    _turns(loop)
    assert real.events == [b"head", "close"]

    aborted = RecordingTransport()
    combined = CombinedWrites(aborted, loop)
    combined.write(b"head")
    combined.abort()
    _turns(loop)
    assert aborted.events == ["abort"]


def test_a_held_write_is_dropped_once_the_connection_is_closing(
    loop: asyncio.AbstractEventLoop,
) -> None:
    real = RecordingTransport()
    combined = CombinedWrites(real, loop)
    combined.write(b"head")
    real.close()  # e.g. the guard's deadline closed the connection itself
    _turns(loop)
    assert real.events == ["close"]


def _read_response(sock: socket.socket, buffered: bytes) -> tuple[int, bytes, bytes]:
    """(status, body, bytes after it) of the next response on ``sock``."""
    data = buffered
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed mid-head: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed mid-body"
        rest += chunk
    return status, rest[:length], rest[length:]


def test_pipelined_requests_and_an_interim_100_continue_through_serve(
    deployment: Deployment,
) -> None:
    token = deployment.operator
    server = deployment.serve()
    with connect(server) as sock:
        sock.sendall(b"GET /v1/log/public-key HTTP/1.1\r\nhost: x\r\n\r\n" * 2)
        first, body, rest = _read_response(sock, b"")
        second, again, rest = _read_response(sock, rest)
        assert (first, second, rest) == (200, 200, b"")
        assert body == again
        assert VerifierKey.parse(body.decode().strip()).encode() == body.decode().strip()

        data = make_envelope("acme", "run-1", 1)
        digest = hashlib.sha256(data).digest()
        sock.sendall(
            (
                f"PUT /v1/tenants/acme/envelopes/sha256:{digest.hex()} HTTP/1.1\r\n"
                "host: x\r\n"
                f"authorization: Bearer {token}\r\n"
                f"content-digest: sha-256=:{base64.b64encode(digest).decode()}:\r\n"
                f"content-length: {len(data)}\r\n"
                "expect: 100-continue\r\n\r\n"
            ).encode()
        )
        interim, nothing, rest = _read_response(sock, b"")
        assert (interim, nothing, rest) == (100, b"", b"")
        sock.sendall(data)
        status, receipt, rest = _read_response(sock, b"")
        assert (status, rest) == (201, b"")
        assert json.loads(receipt)["logIndex"] == 0


def test_an_answer_larger_than_the_copy_bound_arrives_whole_through_serve(
    deployment: Deployment,
) -> None:
    operator, reader = deployment.operator, deployment.reader
    published: list[bytes] = []
    server = deployment.serve()
    while sum(map(len, published)) < 2 * COPY_BELOW:
        run_id = f"run-{len(published)}"
        data = make_envelope("acme", run_id, len(published))
        publish_envelope(
            server.url,
            data,
            tenant="acme",
            run_id=run_id,
            token=operator,
            spool_dir=deployment.root / "spool",
        )
        published.append(data)
    with connect(server) as sock:
        sock.sendall(
            (
                f"GET /v1/tenants/acme/log/envelopes?start=0&end={len(published)} HTTP/1.1\r\n"
                f"host: x\r\nauthorization: Bearer {reader}\r\n\r\n"
            ).encode()
        )
        status, body, rest = _read_response(sock, b"")
    assert (status, rest) == (200, b"")
    assert len(body) > COPY_BELOW
    answer = json.loads(body)
    assert [base64.b64decode(item) for item in answer["envelopes"]] == published
