"""The runner's state directory: the simulated AMD and the publication spool live under it.

``$ATTESTED_REPLAY_STATE_DIR``, else ``$XDG_CACHE_HOME/attested-replay``, else
``~/.cache/attested-replay``. (The publication service keeps its durable data under the XDG
data directory instead: see ``runner.service.serve``.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

STATE_DIR_ENV: Final = "ATTESTED_REPLAY_STATE_DIR"


def default_state_dir() -> Path:
    """Where runner state lives unless a command says otherwise."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache) if cache else Path.home() / ".cache"
    return base / "attested-replay"
