"""Checks of the paths a user typed, made before any work.

Every command checks its input and output paths first, so that a typo is reported at once in
the user's words (``--out results: is a directory``) instead of after a long replay, and
nothing is created on the way: an output's directory must exist (it is never created
silently), an existing output must be a regular file (outputs are written by an atomic
rename, which would replace a directory entry such as a symbolic link or a device), and the
directory must accept a new file (probed by creating and removing one, which also catches a
read-only file system). Each check raises :class:`~attestation.tenant.errors.TenantUsageError` (exit
9) with a message that starts with the option or argument name and the path as typed.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from attestation.tenant.errors import TenantUsageError


def _fail(label: str, path: Path, problem: str) -> TenantUsageError:
    return TenantUsageError(f"{label} {path}: {problem}")


def _stat(path: Path, label: str, *, follow: bool = True) -> os.stat_result | None:
    """``stat`` of ``path``, None when it does not exist; other failures name the path."""
    try:
        return path.stat() if follow else path.lstat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        blocking = next(
            (
                parent
                for parent in reversed(path.parents)
                if parent.exists() and not parent.is_dir()
            ),
            None,
        )
        problem = "a parent of this path is not a directory"
        raise _fail(
            label, path, problem if blocking is None else f"{blocking} is not a directory"
        ) from None
    except OSError as exc:
        raise _fail(label, path, exc.strerror or str(exc)) from None


def check_input_file(path: Path, label: str) -> Path:
    """An existing, readable file (a FIFO or device is left to the reader, which bounds it)."""
    info = _stat(path, label)
    if info is None:
        raise _fail(label, path, "no such file")
    if stat.S_ISDIR(info.st_mode):
        raise _fail(label, path, "is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise _fail(label, path, "permission denied (not readable)")
    return path


def check_input_dir(path: Path, label: str) -> Path:
    """An existing directory whose entries can be read."""
    info = _stat(path, label)
    if info is None:
        raise _fail(label, path, "no such directory")
    if not stat.S_ISDIR(info.st_mode):
        raise _fail(label, path, "is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise _fail(label, path, "permission denied (not readable)")
    return path


def check_output_file(path: Path, label: str, *, in_place: bool = False) -> Path:
    """A file that can be written: its directory exists and accepts a new file; an existing
    target is a regular file (or, with ``in_place``, anything writable that is not a
    directory: files such as ``/dev/termination-log`` are written in place, not renamed)."""
    info = _stat(path, label, follow=in_place)
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise _fail(label, path, "is a directory; give a file name")
        if in_place:
            if not os.access(path, os.W_OK):
                raise _fail(label, path, "permission denied (not writable)")
            return path
        if stat.S_ISLNK(info.st_mode):
            raise _fail(
                label,
                path,
                "is a symbolic link; the output is written by renaming a new file over it, "
                "so give the path it points to",
            )
        if not stat.S_ISREG(info.st_mode):
            raise _fail(label, path, "exists and is not a regular file")
    _require_writable_directory(path.parent, label, path)
    return path


def check_output_dir(path: Path, label: str, *, create: bool, empty: bool = False) -> Path:
    """A directory to write into: existing (and, with ``empty``, empty), or, with
    ``create``, absent with an existing writable parent (only the last component is ever
    created, by the caller, after its work succeeded or when it starts writing)."""
    info = _stat(path, label)
    if info is None:
        if not create:
            raise _fail(label, path, "no such directory")
        _require_writable_directory(path.parent, label, path)
        return path
    if not stat.S_ISDIR(info.st_mode):
        raise _fail(label, path, "exists and is not a directory")
    if empty and any(path.iterdir()):
        raise _fail(label, path, "is not empty; give a new or empty directory")
    _require_writable_directory(path, label, path)
    return path


def _require_writable_directory(directory: Path, label: str, path: Path) -> None:
    shown = directory
    info = _stat(directory, label)
    if info is None:
        raise _fail(label, path, f"directory {shown} does not exist")
    if not stat.S_ISDIR(info.st_mode):
        raise _fail(label, path, f"{shown} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".attested-replay-probe-", dir=directory)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise _fail(label, path, f"cannot create files in {shown}: {reason}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        Path(probe).unlink()
