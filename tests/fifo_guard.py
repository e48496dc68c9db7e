"""FIFOs for tests that must prove a reader never blocks on them.

A reader that opened the FIFO would block until a writer appears, hanging the suite. The guard
plays that writer after ``grace`` seconds: the blocked reader then gets a line of garbage and
end of file, and its test fails on the wrong error instead of hanging. A reader that refuses
the FIFO without opening it never notices the guard.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def fifo(path: Path, *, grace: float = 10.0) -> Iterator[Path]:
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        while not done.wait(grace):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader (yet): nobody is blocked
                    continue
                return
            with contextlib.suppress(OSError):
                os.write(fd, b"written by the test's guard: the reader blocked on a FIFO\n")
            os.close(fd)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join()
