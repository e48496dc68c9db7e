"""Opening an input file without trusting what sits at its path.

A path the operator controls can name a FIFO (``open`` for reading blocks until a writer
appears: forever), a device (``/dev/zero`` never ends; opening some devices has side effects),
a socket, a directory, or a symbolic link to any of them. Where a regular file is expected:

* the path is ``stat``-ed first, so nothing but a regular file is ever opened;
* it is opened with ``O_NONBLOCK`` (returns at once even if the file was swapped for a FIFO
  in between) and ``O_NOFOLLOW`` where a symbolic link has no business (configfs);
* the open descriptor is checked again (``fstat``: a regular file, the same device and inode
  as the path's), and only then made blocking for the reads;
* :func:`read_regular` reads at most one byte past its limit.

The errors are :class:`OSError` subclasses carrying ``errno`` and a readable ``strerror``
("is a FIFO, not a regular file"), so callers that already report ``OSError`` name the file
and the problem without special cases. Standard library only.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time
from pathlib import Path
from typing import BinaryIO, Final

_STREAM_CHUNK: Final = 64 * 1024
#: The UTF-8 encoding of U+FEFF, which a file of "plain UTF-8" must not start with.
UTF8_BOM: Final = b"\xef\xbb\xbf"


class NotRegularFileError(OSError):
    """The path names something other than a regular file (or a symbolic link where none may
    be)."""


class FileTooLargeError(OSError):
    """The file is larger than the reader's limit."""


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _refuse(path: Path, mode: int) -> NotRegularFileError:
    return NotRegularFileError(errno.EINVAL, f"is {_kind(mode)}, not a regular file", str(path))


def open_regular(path: Path, *, follow_symlinks: bool = True) -> BinaryIO:
    """``path`` opened for binary reading, only if it is a regular file (see the module doc).

    Raises:
        FileNotFoundError: the path does not exist.
        NotRegularFileError: it is a FIFO, device, socket or directory, or (with
            ``follow_symlinks=False``) a symbolic link.
        OSError: any other failure to open it.
    """
    before = path.stat(follow_symlinks=follow_symlinks)
    if not stat.S_ISREG(before.st_mode):
        raise _refuse(path, before.st_mode)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise NotRegularFileError(errno.ELOOP, "is a symbolic link", str(path)) from None
        raise
    try:
        _check_same_regular(path, fd, before)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_same_regular(path: Path, fd: int, before: os.stat_result) -> None:
    now = os.fstat(fd)
    if not stat.S_ISREG(now.st_mode):
        raise _refuse(path, now.st_mode)
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        raise NotRegularFileError(errno.ESTALE, "was replaced while being opened", str(path))


def read_regular(path: Path, limit: int, *, follow_symlinks: bool = True) -> bytes:
    """All of regular file ``path``, which must hold at most ``limit`` bytes.

    Raises:
        FileTooLargeError: the file holds more than ``limit`` bytes (at most ``limit + 1``
            were read to find out).
        OSError: as :func:`open_regular`.
    """
    with open_regular(path, follow_symlinks=follow_symlinks) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(errno.EFBIG, f"is larger than {limit} bytes", str(path))
    return data


def read_input(path: Path, limit: int, *, wait: float) -> bytes:
    """An input the user named: a regular file (as :func:`read_regular`), or a FIFO, socket
    or character device such as the pipe of a shell's ``<(command)``, read until its end for
    at most ``wait`` seconds in all: a FIFO that never gets a writer cannot hold the reader.

    Raises:
        FileTooLargeError: more than ``limit`` bytes.
        TimeoutError: the stream did not end within ``wait`` seconds.
        NotRegularFileError: a directory or a block device.
        OSError: any other failure to open or read it.
    """
    mode = path.stat().st_mode
    if stat.S_ISREG(mode):
        return read_regular(path, limit)
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        raise _refuse(path, mode)
    # O_NONBLOCK: opening a FIFO for reading returns at once, writer or not.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        return _read_stream(fd, path, limit, wait)
    finally:
        os.close(fd)


def _read_stream(fd: int, path: Path, limit: int, wait: float) -> bytes:
    deadline = time.monotonic() + wait
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    errno.ETIMEDOUT,
                    f"did not end within {wait:g} s (a FIFO without a writer?)",
                    str(path),
                )
            continue
        try:
            chunk = os.read(fd, min(_STREAM_CHUNK, limit + 1 - size))
        except BlockingIOError:
            continue
        if not chunk:
            # End of file: a FIFO reports it once a writer has come and gone (poll wakes up
            # only then, so "no writer yet" is waited for, not mistaken for an empty file).
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise FileTooLargeError(errno.EFBIG, f"is larger than {limit} bytes", str(path))
