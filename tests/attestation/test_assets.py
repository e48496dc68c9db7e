"""The real vectors are exactly the files tests/assets/README.md lists, with those hashes."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

ASSETS = Path(__file__).parents[1] / "assets"


def listed() -> dict[str, str]:
    rows = re.findall(
        r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|", (ASSETS / "README.md").read_text(), re.MULTILINE
    )
    return dict(rows)


def test_every_real_vector_is_listed_with_its_sha256() -> None:
    files = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (ASSETS / "real").iterdir()
    }
    assert len(files) == 18
    assert listed() == files
