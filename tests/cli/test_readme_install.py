"""README tells a new user how to install what exists: the project is on no package index."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_document_installs_from_an_index_the_project_is_not_on() -> None:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"pip install '?attested-replay\b", text), path.name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "is not published on a package index" in readme
    assert "`pip install .`" in readme
