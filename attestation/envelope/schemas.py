"""JSON Schemas of the public documents, generated from the models (docs/schema/)."""

from __future__ import annotations

import json
from typing import Final

from pydantic import BaseModel

from attestation.envelope.expected import ExpectedValues
from attestation.envelope.model import Envelope

SCHEMA_MODELS: Final[dict[str, type[BaseModel]]] = {
    "envelope.schema.json": Envelope,
    "expected.schema.json": ExpectedValues,
}


def render_schema(model: type[BaseModel]) -> str:
    """The JSON Schema of ``model`` as stable, reviewable text."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
