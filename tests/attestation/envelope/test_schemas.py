"""The checked-in JSON Schemas match the models they document."""

from __future__ import annotations

from pathlib import Path

import pytest

from attestation.envelope.schemas import SCHEMA_MODELS, render_schema

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "docs" / "schema"


@pytest.mark.parametrize("name", sorted(SCHEMA_MODELS))
def test_checked_in_schema_has_not_drifted(name: str) -> None:
    checked_in = (SCHEMA_DIR / name).read_text(encoding="utf-8")
    assert checked_in == render_schema(SCHEMA_MODELS[name]), (
        f"docs/schema/{name} is stale: run `python scripts/gen_schemas.py`"
    )
