"""The envelopes ``tenant fetch --expected`` fetched but has not judged yet.

A fetch with ``--expected`` writes the new envelopes' log positions to ``unjudged.json`` in
the output directory *before* its index and checkpoint advance, and removes each position
only once the envelope has a verdict (VERIFIED or NOT VERIFIED). A verification that stops
half-way (a crashed worker, an interrupted process, an envelope the verifier could not judge)
therefore leaves its positions listed, and every later fetch judges them again and reports
them (non-zero exit) until each has a verdict: the kept checkpoint never lets an envelope
pass without one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from attestation.tenant.errors import TenantInputError
from attestation.tenant.fsutil import atomic_write_text

#: The file, in the ``tenant fetch`` output directory.
UNJUDGED_FILE: Final = "unjudged.json"


def load_unjudged(out_dir: Path) -> list[int]:
    """The log positions listed as unjudged, ascending (none when there is no file).

    Raises:
        TenantInputError: the file is not a JSON list of log positions.
    """
    path = out_dir / UNJUDGED_FILE
    if not path.is_file():
        return []
    try:
        loaded = json.loads(path.read_bytes())
    except ValueError as exc:
        raise TenantInputError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(loaded, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in loaded
    ):
        raise TenantInputError(f"{path} must be a JSON list of log positions")
    return sorted(set(loaded))


def record_unjudged(out_dir: Path, positions: Iterable[int]) -> None:
    """List exactly ``positions`` as unjudged (the file is removed when there are none)."""
    path = out_dir / UNJUDGED_FILE
    listed = sorted(set(positions))
    if listed:
        atomic_write_text(path, json.dumps(listed) + "\n")
    else:
        path.unlink(missing_ok=True)
