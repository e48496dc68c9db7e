"""Persistence of the simulated AMD (``attestation.simulated.SimulatedAmd``).

The simulated root must stay the same across runs, because a tenant may have pinned it. It is
created once under ``<state dir>/simulated-amd/`` and loaded afterwards; a corrupt state is an
error naming the file, never a reason to mint a new root silently.

State dir: ``$ATTESTED_REPLAY_STATE_DIR``, else ``$XDG_CACHE_HOME/attested-replay``, else
``~/.cache/attested-replay``. Creation is safe against concurrent processes: the files are
written into a fresh temporary directory beside the target, which is then renamed into place
in one step; a process that loses the race discards its own directory and loads the winner's.
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
from attestation.simulated import PRIVATE_STATE_KEYS, STATE_KEYS, SimulatedAmd
from runner.errors import InputError, UsageError
from runner.fsutil import atomic_write_text

STATE_DIR_ENV: Final = "ATTESTED_REPLAY_STATE_DIR"
SIMULATED_AMD_DIR: Final = "simulated-amd"
_PRIVATE_MODE: Final = 0o600
_PUBLIC_MODE: Final = 0o644
_DIR_MODE: Final = 0o700


def default_state_dir() -> Path:
    """Where runner state lives unless a command says otherwise."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache) if cache else Path.home() / ".cache"
    return base / "attested-replay"


def simulated_amd_dir(state_dir: Path | None = None) -> Path:
    """The directory holding the simulated AMD's keys and certificates."""
    return (default_state_dir() if state_dir is None else state_dir) / SIMULATED_AMD_DIR


def load_simulated_amd(directory: Path) -> SimulatedAmd:
    """Load an existing state directory; InputError names the missing or corrupt file."""
    state: dict[str, str] = {}
    for name in STATE_KEYS:
        path = directory / name
        try:
            state[name] = path.read_text(encoding="ascii")
        except FileNotFoundError:
            raise InputError(
                f"simulated AMD state is incomplete: {path} is missing "
                "(refusing to create a new root over it; move the directory away to start over)"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"simulated AMD state file {path} is unreadable: {exc}") from exc
    try:
        return SimulatedAmd.from_state(state)
    except MalformedError as exc:
        raise InputError(
            f"simulated AMD state in {directory} is corrupt: {exc} "
            "(refusing to create a new root over it; move the directory away to start over)"
        ) from exc


def store_simulated_amd(amd: SimulatedAmd, directory: Path) -> bool:
    """Write ``amd`` to ``directory`` unless it exists; True when this call created it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        for name, text in amd.to_state().items():
            mode = _PRIVATE_MODE if name in PRIVATE_STATE_KEYS else _PUBLIC_MODE
            atomic_write_text(staging / name, text, mode=mode)
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


def load_or_create_simulated_amd(
    state_dir: Path | None = None,
    *,
    factory: Callable[[], SimulatedAmd] | None = None,
) -> SimulatedAmd:
    """The simulated AMD of this state dir, created on first use (see the module docstring).

    ``factory`` (default :meth:`SimulatedAmd.generate`) makes the hierarchy if none exists.
    """
    directory = simulated_amd_dir(state_dir)
    try:
        if not directory.exists():
            store_simulated_amd((factory or SimulatedAmd.generate)(), directory)
    except OSError as exc:
        raise UsageError(
            f"cannot create the simulated PKI state in {directory.parent}: {exc.strerror or exc}"
            " (choose another --state-dir or ATTESTED_REPLAY_STATE_DIR)"
        ) from exc
    return load_simulated_amd(directory)


def simulated_root_fingerprint(state_dir: Path | None = None) -> str:
    """``sha256:<hex>`` of the simulated ARK of this state dir (created on first use)."""
    return load_or_create_simulated_amd(state_dir).root_fingerprint
