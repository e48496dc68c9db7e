"""Decode a request body the way kube-apiserver does: find unknown and duplicate fields.

The real server decodes into typed Go structs (sigs.k8s.io/json, strict mode): a field the
struct does not have is "unknown field \"<path>\"", a key given twice "duplicate field
\"<path>\"", the path written like ``spec.template.spec.containers[0].bogus``
(sigs.k8s.io/json ``internal/golang/encoding/json/kubernetes_patch.go``). What happens then
depends on the request's ``fieldValidation`` (apiserver ``pkg/endpoints/handlers/create.go``
and ``update.go``, v0.34.0): ``Strict`` refuses the request with 400 BadRequest, ``Warn`` (the
default when the parameter is empty, ``rest.go`` ``fieldValidation()``) drops the fields and
adds one ``Warning`` header each, ``Ignore`` drops them silently.

The structs are taken from the OpenAPI-derived JSON schemas bundled with kubernetes-validate:
an object with ``properties`` knows exactly those keys, ``additionalProperties`` is a map.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from kubernetes_validate.utils import schema_contents

#: The schemas of this Kubernetes minor version stand for the server.
SCHEMA_VERSION = "1.33.0"
_SCHEMA_DIR = f"kubernetes-json-schema/v{SCHEMA_VERSION}-local-strict/"
#: Schema file per (apiVersion, kind) the test server accepts on create/update.
SCHEMA_FILES = {
    ("batch/v1", "Job"): "job-batch-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
}


@dataclass(frozen=True, slots=True)
class Decoded:
    """The object as the server keeps it, and the strict-decoding problems found."""

    obj: dict[str, Any]
    problems: tuple[str, ...]


class DuplicateKeys(dict[str, Any]):
    """A JSON object that remembers which keys it saw more than once."""

    duplicates: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> DuplicateKeys:
    obj = DuplicateKeys()
    seen: list[str] = []
    for key, value in pairs:
        if key in obj:
            seen.append(key)
        obj[key] = value  # the last duplicate wins, as in Go
    obj.duplicates = tuple(seen)
    return obj


def loads(body: bytes) -> Any:
    """JSON with duplicate keys remembered (stdlib ``json`` would silently keep the last)."""
    return json.loads(body or b"{}", object_pairs_hook=_pairs)


@cache
def _definitions() -> dict[str, Any]:
    defs: dict[str, Any] = schema_contents(_SCHEMA_DIR + "_definitions.json", SCHEMA_VERSION)[
        "$defs"
    ]
    return defs


@cache
def _schema(filename: str) -> dict[str, Any]:
    schema: dict[str, Any] = schema_contents(_SCHEMA_DIR + filename, SCHEMA_VERSION)
    return schema


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = _definitions()[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def decode(body: Any, api_version: str, kind: str) -> Decoded:
    """``body`` (from :func:`loads`) with unknown fields removed, and every problem."""
    problems: list[str] = []
    obj = _walk(body, _schema(SCHEMA_FILES[(api_version, kind)]), "", problems)
    return Decoded(obj, tuple(problems))


def _walk(value: Any, schema: dict[str, Any], path: str, problems: list[str]) -> Any:
    schema = _resolve(schema)
    if isinstance(value, dict):
        problems.extend(
            f'duplicate field "{_join(path, key)}"' for key in getattr(value, "duplicates", ())
        )
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        kept: dict[str, Any] = {}
        for key, item in value.items():
            if properties is not None and key in properties:
                kept[key] = _walk(item, properties[key], _join(path, key), problems)
            elif isinstance(extra, dict):
                kept[key] = _walk(item, extra, _join(path, key), problems)
            elif properties is None and extra is None:
                kept[key] = item  # free-form (x-kubernetes-preserve-unknown-fields)
            else:
                problems.append(f'unknown field "{_join(path, key)}"')
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            _walk(item, schema["items"], f"{path}[{index}]", problems)
            for index, item in enumerate(value)
        ]
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
