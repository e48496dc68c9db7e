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
or more is mapped and unmapped again, and the resident set is what is live.

Elsewhere (musl, macOS, Windows) nothing is changed: the replay is the same, only its peak
memory may be higher.
"""

from __future__ import annotations

import os
from typing import Final

#: ``M_MMAP_THRESHOLD`` of glibc's ``malloc.h``.
_M_MMAP_THRESHOLD: Final = -3
#: glibc's default threshold (``DEFAULT_MMAP_THRESHOLD_MIN``), kept from now on.
MMAP_THRESHOLD_BYTES: Final = 128 * 1024


def pin_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES` for the rest of this
    process (and the children it forks); True if it was set, False when the C library is
    not glibc or refused."""
    if not _glibc():
        return False
    import ctypes  # only here: most commands never need it

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def _glibc() -> bool:
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name here
        return False
    return version is not None and version.startswith("glibc ")
