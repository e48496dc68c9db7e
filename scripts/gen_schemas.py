"""Regenerate docs/schema/*.schema.json from the models (run: ``python scripts/gen_schemas.py``)."""

from __future__ import annotations

from pathlib import Path

from attestation.envelope.schemas import SCHEMA_MODELS, render_schema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schema"


def main() -> None:
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    for name, model in SCHEMA_MODELS.items():
        (SCHEMA_DIR / name).write_text(render_schema(model), encoding="utf-8")
        print(f"wrote docs/schema/{name}")


if __name__ == "__main__":
    main()
