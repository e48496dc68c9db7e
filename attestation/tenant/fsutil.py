"""File writes that never leave a half-written file behind.

Every write goes to a temporary file beside its target (a random name, created with
``O_EXCL`` so it never opens a file that exists), is fsynced and then renamed over the
target; on any failure the temporary file is removed and the target is untouched. The
temporary file is created and written with ``os`` calls rather than ``tempfile.mkstemp``,
``os.fdopen`` and ``pathlib``: ``tenant fetch`` writes one file per envelope, and those
layers cost about as much CPU as checking the envelope.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Final

#: Names tried before giving up (``tempfile.TMP_MAX``); with 48 random bits a second try is
#: already improbable, so running out means something else creates these names.
_NAME_ATTEMPTS: Final = tempfile.TMP_MAX
#: A new file for writing only, never an existing one or a symbolic link's target, and not
#: inherited by the processes this one starts.
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _create_temporary(path: Path, *, create_parent: bool) -> tuple[int, str]:
    """A new empty file (mode 0600) beside ``path`` and its name, open for writing. With
    ``create_parent``, a missing directory of ``path`` is created first."""
    directory, name = os.path.split(os.fspath(path))
    for _attempt in range(_NAME_ATTEMPTS):
        temporary = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")  # noqa: PTH118
        try:
            return os.open(temporary, _CREATE, 0o600), temporary
        except FileExistsError:
            continue
        except FileNotFoundError:
            # Only a missing directory; checked after the fact so that the usual case (the
            # directory exists) costs no system call.
            if not create_parent or not directory or os.path.isdir(directory):  # noqa: PTH112
                raise
            Path(directory).mkdir(parents=True, exist_ok=True)
            return _create_temporary(path, create_parent=False)
    raise FileExistsError(errno.EEXIST, f"no unused temporary file name beside {path}")


#: A temporary file's name: ``.<target name>.<12 hex digits>.tmp``.
_TEMPORARY_SUFFIX_LENGTH: Final = len(".000000000000.tmp")


def remove_temporaries(directory: Path, names: Collection[str]) -> int:
    """Remove the temporary files that writes of the files ``names`` in ``directory`` left
    behind (their writer was killed: no ``except`` ran), and return how many. Only for when
    no such write can still be running."""
    removed = 0
    with os.scandir(directory) as found:
        for entry in found:
            name = entry.name
            if (
                name.startswith(".")
                and name.endswith(".tmp")
                and name[1:-_TEMPORARY_SUFFIX_LENGTH] in names
            ):
                _discard(entry.path)
                removed += 1
    return removed


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a write may be short (a signal, a full quota mid-way): go on from there
        view = view[os.write(fd, view) :]


def _finish(fd: int, mode: int) -> None:
    """Give the written file its mode (exactly, whatever the umask) and make it durable; the
    mode first, so that the fsync covers it too."""
    os.fchmod(fd, mode)
    os.fsync(fd)


def _discard(temporary: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)  # noqa: PTH108 - os calls only, see the module docstring


@contextlib.contextmanager
def _renamed_over(temporary: str, path: Path, *, sync_directory: bool) -> Iterator[None]:
    """Rename ``temporary`` over ``path`` when the block succeeds (then sync the directory,
    if asked); remove ``temporary`` and leave ``path`` untouched when it raises."""
    try:
        yield
        os.replace(temporary, path)  # noqa: PTH105 - os calls only (module docstring)
    except BaseException:
        _discard(temporary)
        raise
    if sync_directory:
        fsync_directory(path.parent)


@contextlib.contextmanager
def atomic_output(
    path: Path, *, mode: int = 0o644, sync_directory: bool = True
) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` only if the ``with`` block completes: written to a
    temporary file in the same directory (created if missing), fsynced, then renamed over
    the target. On any exception the temporary file is removed and ``path`` is untouched.

    The rename is durable once the directory is synced too; a caller writing many files into
    one directory passes ``sync_directory=False`` and calls :func:`fsync_directory` once after
    the batch (before anything that records the files as written)."""
    fd, temporary = _create_temporary(path, create_parent=True)
    with (
        _renamed_over(temporary, path, sync_directory=sync_directory),
        os.fdopen(fd, "wb") as handle,
    ):
        yield handle
        handle.flush()
        _finish(fd, mode)


def atomic_write(
    path: Path, data: bytes, *, mode: int = 0o644, sync_directory: bool = True
) -> None:
    """Write ``data`` to ``path`` atomically, as :func:`atomic_output` does. Readers see the
    old file or the new one."""
    fd, temporary = _create_temporary(path, create_parent=True)
    with _renamed_over(temporary, path, sync_directory=sync_directory):
        try:
            _write_all(fd, data)
            _finish(fd, mode)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    """:func:`atomic_write` for UTF-8 text."""
    atomic_write(path, text.encode("utf-8"), mode=mode)


def atomic_write_all(files: Sequence[tuple[Path, bytes]], *, mode: int = 0o644) -> None:
    """Write several files as one output: every temporary file is written and fsynced before
    the first rename, so a failure (a full disk) leaves none of them; the renames follow in
    order (put the file whose presence signals completion last)."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files:
            fd, temporary = _create_temporary(path, create_parent=False)
            staged.append((temporary, path))
            try:
                _write_all(fd, data)
                _finish(fd, mode)
            finally:
                os.close(fd)
        for temporary, path in staged:
            os.replace(temporary, path)  # noqa: PTH105 - os calls only (module docstring)
    except BaseException:
        for temporary, _ in staged:
            _discard(temporary)
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
