"""Large buffers handed back to the kernel when they are freed (glibc's malloc only).

A replay streams gigabytes through buffers of a megabyte or two: the read window, each batch
decoded from it, a run's latency tail. glibc serves a request of at least its *mmap
threshold* (128 KiB at start) with a mapping of its own, unmapped on ``free``; but freeing
such a mapping raises the threshold to the freed size ("dynamic mmap threshold",
``malloc/malloc.c``, ``_int_free`` / ``munmap_chunk``, glibc 2.36), so from the first freed
megabyte on every buffer of that size comes from the ``brk`` heap instead. There, buffers of
varying sizes freed in varying order leave holes that stay resident: at 4M cases the heap
kept about 10 MB free but resident after a few runs (``docs/performance.md``, "Replay
memory"). Setting the threshold with ``mallopt(M_MMAP_THRESHOLD, ...)`` turns the dynamic
adjustment off (``do_set_mmap_threshold`` sets ``no_dyn_threshold``): every buffer of 128 KiB
or more is mapped and unmapped again, and the resident set is what is live. That costs a
mapping and its page faults per buffer (about 8% of a replay's CPU at 4M cases), so a replay
pins it only while it streams the run records, where the megabyte buffers come and go
(:func:`large_buffers_unmapped`), not for the cases' pass (whose forked children read and
drop a buffer a megabyte, and keep nothing).

Elsewhere (musl, macOS, Windows) nothing is changed: the replay is the same, only its peak
memory may be higher.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

#: ``M_MMAP_THRESHOLD`` of glibc's ``malloc.h``.
_M_MMAP_THRESHOLD: Final = -3
#: glibc's default threshold (``DEFAULT_MMAP_THRESHOLD_MIN``), kept while pinned.
MMAP_THRESHOLD_BYTES: Final = 128 * 1024
#: Where glibc's own adjustment stops on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``, 32
#: MiB): what the threshold is set to once the replay's streaming is over, so that the rest
#: of the process takes its buffers from the heap, as glibc's raised threshold would.
RELEASED_THRESHOLD_BYTES: Final = 32 * 1024 * 1024


def pin_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` from now on (and in the
    children this process forks); True if it was set, False when the C library is not glibc
    or refused."""
    return _set_threshold(MMAP_THRESHOLD_BYTES)


@contextmanager
def large_buffers_unmapped() -> Iterator[bool]:
    """Within: the threshold pinned (:func:`pin_mmap_threshold`; yields whether it was).
    After: :data:`RELEASED_THRESHOLD_BYTES`, so that what the process does next does not pay
    a mapping and its page faults for every buffer of 128 KiB (glibc offers no way back to
    its dynamic threshold)."""
    pinned = pin_mmap_threshold()
    try:
        yield pinned
    finally:
        if pinned:
            _set_threshold(RELEASED_THRESHOLD_BYTES)


def _set_threshold(size: int) -> bool:
    if not _glibc():
        return False
    import ctypes  # only here: most commands never need it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, size))


def _glibc() -> bool:
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name here
        return False
    return version is not None and version.startswith("glibc ")
