"""``serve`` runs on uvloop, which closes a listening socket after an accept error it does not
handle and says nothing; the watchdog (service.watch_listener) stops the server then, so
``serve`` exits 9 instead of serving on without accepting a connection."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace
from typing import Any, cast

import pytest
import uvicorn
import uvloop

from runner.service import serve as service


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def test_uvloop_detaches_the_socket_object_of_a_server_it_closes() -> None:
    """What the watchdog relies on: once uvloop closes a server made from a socket object, that
    object's descriptor reads -1 (it is detached, not left open)."""
    sock = _listening()

    async def scenario() -> tuple[int, int]:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=sock)
        serving = sock.fileno()
        server.close()
        await server.wait_closed()
        return serving, sock.fileno()

    try:
        serving, closed = uvloop.run(scenario())
    finally:
        sock.close()
    assert serving >= 0
    assert closed == -1


def _watch(sock: socket.socket, server: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setattr(service, "LISTENER_CHECK_SECONDS", 0.01)
    lost: list[str] = []

    async def scenario() -> None:
        await asyncio.wait_for(
            service.watch_listener(cast("uvicorn.Server", server), sock, lost), timeout=30
        )

    uvloop.run(scenario())
    return lost


def test_a_listener_closed_under_the_server_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = _listening()
    server = SimpleNamespace(should_exit=False)
    sock.detach()  # as uvloop leaves it after an accept error
    lost = _watch(sock, server, monkeypatch)
    assert server.should_exit is True
    assert lost == ["the listening socket was closed after an accept error; stopping"]


def test_a_server_shutting_down_is_not_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = _listening()
    server = SimpleNamespace(should_exit=False)

    async def shut_down_soon() -> None:
        await asyncio.sleep(0.05)
        server.should_exit = True  # uvicorn sets it first, then closes the listener
        sock.close()

    async def both() -> list[str]:
        monkeypatch.setattr(service, "LISTENER_CHECK_SECONDS", 0.01)
        lost: list[str] = []
        await asyncio.gather(
            service.watch_listener(cast("uvicorn.Server", server), sock, lost), shut_down_soon()
        )
        return lost

    assert uvloop.run(both()) == []
    assert server.should_exit is True


def test_serve_exits_9_when_its_listener_is_lost() -> None:
    from runner.errors import ListenerLostError
    from runner.exit_codes import exit_code_for

    assert exit_code_for(ListenerLostError("lost")) == 9
