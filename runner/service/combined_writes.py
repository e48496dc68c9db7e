"""One ``send()`` per response: the status line and headers go out with the first body bytes.

uvicorn's httptools cycle (0.54, ``httptools_impl.py``, ``RequestResponseCycle.send``)
writes a response's status line and headers with one ``transport.write`` and its body with
another, and uvloop sends each at once (``TCP_NODELAY``): two ``send()`` system calls and two
segments per response, which the client reads separately. On loopback a ``send()`` does the
receiving side's TCP work as well; at hundreds of publishes a second the two writes were a
fifth of the time the server held the interpreter lock (``py-spy record --gil``).

:class:`CombinedWrites` stands in for the transport of one request's cycle. It holds the
cycle's first write and sends it together with the second; a first write with no second in
the same turn of the event loop (an interim ``100 Continue``, a response still being built)
is sent on the loop's next turn, and closing, aborting or anything else that ends the byte
stream sends it first. Every later write goes straight through, so the bytes leave in the
order they were written. A body of :data:`COPY_BELOW` bytes or more is not joined to the head
but handed over beside it (``writelines``: one ``writev()`` under uvloop), so a bundle of
envelopes is not copied for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

#: A body shorter than this is joined to the held head (one buffer: uvloop's fastest write);
#: a longer one goes out beside it in one ``writev()``, so a large answer is not copied.
COPY_BELOW: Final = 64 * 1024


class CombinedWrites(asyncio.Transport):
    """``transport`` for one request/response cycle, its first two writes sent as one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._writes = 0
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._writes += 1
        if self._writes == 1:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
            return
        held, self._held = self._held, None
        if held is None:
            self._transport.write(data)
        elif len(data) < COPY_BELOW:
            self._transport.write(held + data)
        else:  # one writev(), without copying a large body (uvloop's writelines)
            self._transport.writelines((held, data))

    def flush(self) -> None:
        """Send the held write, if any (the loop's next turn calls this)."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None  # abort discards what is buffered: so does this
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:  # noqa: ANN401 - as asyncio
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.flush()
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()
