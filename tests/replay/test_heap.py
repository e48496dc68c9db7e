"""runner.heap: with glibc's mmap threshold pinned, a buffer of 128 KiB or more allocated after
a larger one was freed is still mapped on its own (so freeing it unmaps it); unpinned, glibc
raised the threshold at that free and serves the buffer from the heap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.heap import large_buffers_unmapped, pin_mmap_threshold

_GLIBC = (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc ")

# Prints the bytes glibc holds in mappings of their own while a 1 MiB buffer is live, after a
# 4 MiB one was freed (mallinfo2: glibc 2.33 and later).
_MAPPED_AFTER_A_FREE = """
import ctypes, sys
from runner.heap import large_buffers_unmapped, pin_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
def mapped_after_a_free():
    before = libc.mallinfo2().hblkhd
    big = bytes(4 << 20)
    del big
    buffer = bytes(1 << 20)
    return libc.mallinfo2().hblkhd - before

if sys.argv[1] == "pinned":
    assert pin_mmap_threshold()
if sys.argv[1] == "within":
    with large_buffers_unmapped() as pinned:
        assert pinned
        print(mapped_after_a_free())
elif sys.argv[1] == "after":
    with large_buffers_unmapped():
        pass
    print(mapped_after_a_free())
else:
    print(mapped_after_a_free())
"""


def _mapped_after_a_free(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _MAPPED_AFTER_A_FREE, mode],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return int(done.stdout)


@pytest.mark.skipif(not _GLIBC, reason="the threshold is glibc's; elsewhere nothing is set")
def test_a_pinned_threshold_keeps_megabyte_buffers_mapped() -> None:
    assert _mapped_after_a_free("pinned") >= 1 << 20
    assert _mapped_after_a_free("dynamic") == 0


@pytest.mark.skipif(not _GLIBC, reason="the threshold is glibc's; elsewhere nothing is set")
def test_large_buffers_are_unmapped_only_within_the_block() -> None:
    assert _mapped_after_a_free("within") >= 1 << 20
    assert _mapped_after_a_free("after") == 0


@pytest.mark.skipif(not _GLIBC, reason="the threshold is glibc's; elsewhere nothing is set")
def test_pinning_is_accepted_again() -> None:
    assert pin_mmap_threshold() is True
    assert pin_mmap_threshold() is True


def test_nothing_is_pinned_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_glibc(name: str) -> str:
        raise ValueError(name)

    monkeypatch.setattr(os, "confstr", not_glibc)
    assert pin_mmap_threshold() is False
    with large_buffers_unmapped() as pinned:
        assert pinned is False
