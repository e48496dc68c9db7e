"""HTTP connection guards for ``serve``: read deadlines, a connection cap, quiet error logs.

uvicorn (0.54) has no header or body read timeout (its ``timeout_keep_alive`` runs only
between requests, and any byte cancels it: ``httptools_impl.py``, ``data_received`` ->
``_unset_keepalive_if_required``), and its ``limit_concurrency`` counts idle connections and
answers 503 only after a complete request head, while every socket still holds a descriptor.
A client that opens sockets and sends nothing, or a byte a second, holds them for ever; at
the descriptor limit asyncio logs a traceback for every failed ``accept()``.

:func:`guarded_protocol` subclasses uvicorn's httptools protocol (handed to
``uvicorn.Config(http=...)``):

* **header deadline**: armed when a connection opens and at the first byte of each later
  request; a request head not complete by then closes the connection;
* **head size**: a request head over :data:`MAX_HEAD_BYTES` closes the connection;
* **body deadline**: armed when the head is complete, disarmed when the body is; a body not
  received by then closes the connection (a 1 byte/s drip included);
* **one write per response**: each request's response goes through :class:`CombinedWrites`
  (:mod:`runner.service.combined_writes`), so its status line, headers and body leave in one
  ``send()``;
* **connection cap**: over the cap, the connection idle the longest (no request head yet, or
  waiting between requests) is closed to make room; when every connection is in the middle
  of a request, the newcomer is closed. The cap stays below the process's descriptor limit
  (:func:`raise_open_file_limit`) by the reserve and the listen backlog, so neither
  ``accept()`` nor the storage runs out of descriptors.

The subclass uses uvicorn's protocol callbacks, which are not a public API: ``pyproject.toml``
pins uvicorn below the next minor release and ``tests/publish/test_hostile_clients.py``
checks every guard end to end, so an upgrade that breaks one fails the tests. No server that
runs the app in this process offers all of these as public options, and nginx in front has
no deadline for a dripped body: docs/publishing.md ("The ASGI server, and why") maps each
guard to uvicorn's, hypercorn's, granian's and nginx's options with the upstream lines.

:class:`QuietLog` lets each kind of event-loop error or server warning through at most once
per interval with a count of those suppressed and no traceback, so a flood cannot fill the
disk the store lives on.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from runner.service.combined_writes import CombinedWrites

log = structlog.get_logger("attested-replay.serve")

#: Descriptors kept free for the database, the journal, logs and TLS material.
RESERVED_DESCRIPTORS: Final = 64
#: The listen backlog. The event loop accepts the pending connections, up to this many, in one
#: go before any of them reaches the cap below (asyncio's ``_accept_connection``, libuv's
#: ``uv__server_io`` under uvloop), so the cap keeps this many descriptors free as well.
LISTEN_BACKLOG: Final = 128
#: The largest request head (request line and headers) read: httptools itself has no limit.
MAX_HEAD_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Seconds a client has to send a request head and a body; seconds an idle keep-alive
    connection stays open; the most connections open at once."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0
    keep_alive: float = 5.0
    max_connections: int = 1024


def raise_open_file_limit() -> int:
    """Raise the soft descriptor limit to the hard one; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # not allowed: the cap below follows the soft limit we have
    return soft


def connection_cap(limits: ConnectionLimits, open_file_limit: int) -> int:
    """The connections allowed at once: the configured maximum, below the descriptor limit
    with room for the storage and for one burst of accepts."""
    room = open_file_limit - RESERVED_DESCRIPTORS - LISTEN_BACKLOG
    return max(1, min(limits.max_connections, room))


class _Registry:
    """The open connections of one server, and those idle in order of idleness."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: set[HttpToolsProtocol] = set()
        self.idle: dict[HttpToolsProtocol, None] = {}  # insertion order = idle since


def guarded_protocol(limits: ConnectionLimits, cap: int) -> type[HttpToolsProtocol]:
    """An httptools protocol class enforcing ``limits`` with at most ``cap`` connections."""
    registry = _Registry(cap)

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _between_requests = False
        _head_bytes = 0  # bytes received since the current request head began

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def _set_idle(self, *, idle: bool) -> None:
            registry.idle.pop(self, None)
            if idle:
                registry.idle[self] = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            registry.open.add(self)
            if len(registry.open) > registry.cap:
                victim = next(iter(registry.idle), None)
                if victim is None:  # every connection is busy: the newcomer waits elsewhere
                    transport.close()
                    return
                registry.idle.pop(victim)
                victim.transport.close()
            self._set_idle(idle=True)
            self._arm(limits.header_timeout)

        def data_received(self, data: bytes) -> None:
            if self._between_requests:
                self._between_requests = False
                self._head_bytes = 0
                self._arm(limits.header_timeout)
            in_head = self._head_bytes >= 0
            super().data_received(data)
            if in_head and self._head_bytes >= 0:  # the head is still not complete
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    self.transport.close()

        def on_headers_complete(self) -> None:
            self._head_bytes = -1  # counting stops until the next request begins
            self._set_idle(idle=False)
            self._arm(limits.body_timeout)
            previous = self.cycle
            super().on_headers_complete()
            if self.cycle is not previous:  # a new request's cycle (not an upgrade)
                # Its task has not run yet: every write of its response goes through this.
                self.cycle.transport = CombinedWrites(self.transport, self.loop)

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._between_requests = True
            self._set_idle(idle=True)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            registry.open.discard(self)
            registry.idle.pop(self, None)
            super().connection_lost(exc)

    return GuardedHttpToolsProtocol


class QuietLog:
    """Lets each message through at most once per ``interval`` seconds, with the count of
    those suppressed since; used as the event loop's exception handler and as a filter on
    uvicorn's error logger."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def admit(self, message: str) -> int | None:
        """None when ``message`` is to be suppressed, else how many were suppressed before."""
        now = self._clock()
        with self._lock:
            last = self._last.get(message)
            if last is not None and now - last < self._interval:
                self._suppressed[message] = self._suppressed.get(message, 0) + 1
                return None
            if len(self._last) > 1000:  # a bounded memory of messages
                self._last.clear()
            self._last[message] = now
            return self._suppressed.pop(message, 0)

    def loop_exception(self, _loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """An asyncio exception handler: one line, no traceback."""
        message = str(context.get("message", "event loop error"))
        suppressed = self.admit(message)
        if suppressed is None:
            return
        error = context.get("exception")
        log.warning(
            "event_loop_error",
            message=message,
            error=None if error is None else f"{type(error).__name__}: {error}",
            suppressed_since_last=suppressed,
        )

    def filter(self, record: logging.LogRecord) -> bool:
        """A :class:`logging.Filter` callable: rate-limited, and stripped of tracebacks."""
        suppressed = self.admit(str(record.msg))
        if suppressed is None:
            return False
        record.exc_info = None
        record.exc_text = None
        if suppressed:
            record.msg = f"{record.msg} ({suppressed} more suppressed)"
        return True
