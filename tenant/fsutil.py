"""File writes that never leave a half-written file behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_output(
    path: Path, *, mode: int = 0o644, sync_directory: bool = True
) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` only if the ``with`` block completes: written to a
    temporary file in the same directory, fsynced, then renamed over the target. On any
    exception the temporary file is removed and ``path`` is untouched.

    The rename is durable once the directory is synced too; a caller writing many files into
    one directory passes ``sync_directory=False`` and calls :func:`fsync_directory` once after
    the batch (before anything that records the files as written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(mode)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if sync_directory:
        fsync_directory(path.parent)


def atomic_write(
    path: Path, data: bytes, *, mode: int = 0o644, sync_directory: bool = True
) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic_output`). Readers see the old
    file or the new one."""
    with atomic_output(path, mode=mode, sync_directory=sync_directory) as handle:
        handle.write(data)


def atomic_write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    """:func:`atomic_write` for UTF-8 text."""
    atomic_write(path, text.encode("utf-8"), mode=mode)


def atomic_write_all(files: Sequence[tuple[Path, bytes]], *, mode: int = 0o644) -> None:
    """Write several files as one output: every temporary file is written and fsynced before
    the first rename, so a failure (a full disk) leaves none of them; the renames follow in
    order (put the file whose presence signals completion last)."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            tmp = Path(tmp_name)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            tmp.chmod(mode)
        for tmp, path in staged:
            tmp.replace(path)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise
    for directory in dict.fromkeys(path.parent for _, path in staged):
        fsync_directory(directory)


@contextlib.contextmanager
def staged_directory(target: Path) -> Iterator[Path]:
    """Build a directory output in a sibling temporary directory and rename it to ``target``
    (absent, or an empty directory) only when the block succeeds; on any failure nothing is
    left behind."""
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield work
        work.chmod(0o755)  # mkdtemp's 0700 is for the work in progress, not the result
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    fsync_directory(target.parent)


def fsync_directory(directory: Path) -> None:
    """Make the renames into ``directory`` durable."""
    # The rename is durable only once the directory entry is; not every platform allows it.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
