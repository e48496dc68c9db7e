"""The simulated AMD kept in a directory: created once, loaded afterwards, never replaced.

The simulated root must stay the same across runs, because a tenant may have pinned it. A
corrupt or incomplete directory is an error naming the file, never a reason to mint a new root
silently. Creation is safe against concurrent processes: the files are written into a fresh
temporary directory beside the target, which is then renamed into place in one step; a process
that loses the race discards its own directory and loads the winner's. Private keys and the
seed are written with mode 0600, the directory with 0700.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from attestation.errors import MalformedError
from attestation.simulated_amd.amd import PRIVATE_STATE_KEYS, STATE_KEYS, SimulatedAmd

_PRIVATE_MODE: Final = 0o600
_PUBLIC_MODE: Final = 0o644
_DIR_MODE: Final = 0o700
_START_OVER: Final = "refusing to create a new root over it; move the directory away to start over"


class StateError(Exception):
    """The state directory exists but is incomplete, unreadable or corrupt."""


def load(directory: Path) -> SimulatedAmd:
    """Load an existing state directory.

    Raises:
        StateError: naming the missing, unreadable or corrupt file.
    """
    state: dict[str, str] = {}
    for name in STATE_KEYS:
        path = directory / name
        try:
            state[name] = path.read_text(encoding="ascii")
        except FileNotFoundError:
            raise StateError(
                f"simulated AMD state is incomplete: {path} is missing ({_START_OVER})"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StateError(f"simulated AMD state file {path} is unreadable: {exc}") from exc
    try:
        return SimulatedAmd.from_state(state)
    except MalformedError as exc:
        raise StateError(
            f"simulated AMD state in {directory} is corrupt: {exc} ({_START_OVER})"
        ) from exc


def store(amd: SimulatedAmd, directory: Path) -> bool:
    """Write ``amd`` to ``directory`` unless it exists; True when this call created it.

    Raises:
        OSError: the directory cannot be created.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        for name, text in amd.to_state().items():
            mode = _PRIVATE_MODE if name in PRIVATE_STATE_KEYS else _PUBLIC_MODE
            _write_new(staging / name, text.encode("ascii"), mode)
        staging.chmod(_DIR_MODE)
        try:
            # rename(2) refuses a non-empty target: exactly one creator wins.
            staging.rename(directory)
        except OSError as exc:
            if exc.errno not in {errno.EEXIST, errno.ENOTEMPTY} or not directory.is_dir():
                raise
            return False
        return True
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def load_or_create(
    directory: Path, *, factory: Callable[[], SimulatedAmd] | None = None
) -> SimulatedAmd:
    """The simulated AMD in ``directory``, created by ``factory`` (default
    :meth:`SimulatedAmd.generate`) on first use.

    Raises:
        OSError: the directory cannot be created.
        StateError: it exists but cannot be loaded.
    """
    if not directory.exists():
        store((factory or SimulatedAmd.generate)(), directory)
    return load(directory)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    # A fresh file in the private staging directory: the directory rename publishes it, so
    # the file itself needs no rename, only to be on disk before the directory is.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
