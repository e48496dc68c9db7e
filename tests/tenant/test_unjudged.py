"""The list of fetched envelopes without a verdict (``STORE/unjudged.json``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attestation.tenant.errors import TenantInputError
from attestation.tenant.unjudged import UNJUDGED_FILE, load_unjudged, record_unjudged


def test_recorded_positions_load_sorted_once_and_none_removes_the_file(tmp_path: Path) -> None:
    assert load_unjudged(tmp_path) == []
    record_unjudged(tmp_path, [7, 3, 7])
    assert (tmp_path / UNJUDGED_FILE).read_text() == "[3, 7]\n"
    assert load_unjudged(tmp_path) == [3, 7]
    record_unjudged(tmp_path, [])
    assert not (tmp_path / UNJUDGED_FILE).exists()
    assert load_unjudged(tmp_path) == []


@pytest.mark.parametrize("text", ["{}", "[-1]", "[true]", '["3"]', "[1.5]", "not json"])
def test_anything_but_a_list_of_log_positions_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / UNJUDGED_FILE).write_text(text)
    with pytest.raises(TenantInputError, match=r"unjudged\.json (must be a JSON list|is not)"):
        load_unjudged(tmp_path)
