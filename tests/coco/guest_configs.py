"""What the guest's parsers require of init-data and of the AA and CDH configs inside it.

Models of upstream's deserializers, each checked against the inputs upstream tests them with
(tests/assets/coco/initdata; tests/coco/test_initdata.py):

* init-data: kata-types ``src/libs/kata-types/src/initdata.rs`` (``InitData``: ``version``
  "0.1.0", ``algorithm`` sha256/sha384/sha512, ``data`` a table of strings).
* CDH: guest-components ``confidential-data-hub/hub/src/config`` (``CdhConfig``: ``kbc`` is
  required and has no serde default, ``kbc.name`` is a required string, ``kbc.url`` and
  ``socket`` are defaulted by the config builder, ``credentials`` entries need ``resource_uri``
  and ``path``, ``image`` is optional; unknown keys are ignored: no ``deny_unknown_fields``).
* attestation agent: ``attestation-agent/attestation-agent/src/config`` (every table has a
  default; ``eventlog_config.init_pcr`` is an integer, ``enable_eventlog`` a boolean).
"""

from __future__ import annotations

import tomllib
from typing import Any

INITDATA_VERSION = "0.1.0"
INITDATA_ALGORITHMS = {"sha256", "sha384", "sha512"}


class ConfigError(Exception):
    """The guest component would refuse this document."""


def _table(document: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = document.get(key)
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"{key} must be a table")
    return value


def _string(table: dict[str, Any], key: str, *, required: bool, where: str) -> None:
    if key not in table:
        if required:
            raise ConfigError(f"missing field `{key}` in {where}")
        return
    if not isinstance(table[key], str):
        raise ConfigError(f"{where}.{key} must be a string")


def parse(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not TOML: {exc}") from exc


def check_initdata(text: str) -> dict[str, str]:
    document = parse(text)
    if document.get("version") != INITDATA_VERSION:
        raise ConfigError(f"unsupported init-data version {document.get('version')!r}")
    if document.get("algorithm") not in INITDATA_ALGORITHMS:
        raise ConfigError(f"unsupported algorithm {document.get('algorithm')!r}")
    data = _table(document, "data") or {}
    for key, value in data.items():
        if not isinstance(value, str):
            raise ConfigError(f"data.{key} must be a string")
    return data


def check_cdh_config(text: str) -> None:
    document = parse(text)
    kbc = _table(document, "kbc")
    if kbc is None:
        raise ConfigError("missing field `kbc`")
    _string(kbc, "name", required=True, where="kbc")
    _string(kbc, "url", required=False, where="kbc")
    _string(document, "socket", required=False, where="config")
    credentials = document.get("credentials", [])
    if not isinstance(credentials, list):
        raise ConfigError("credentials must be an array of tables")
    for entry in credentials:
        if not isinstance(entry, dict):
            raise ConfigError("credentials must be an array of tables")
        _string(entry, "resource_uri", required=True, where="credentials")
        _string(entry, "path", required=True, where="credentials")
    image = _table(document, "image")
    if image is not None:
        for key in ("image_security_policy", "image_security_policy_uri", "sigstore_config_uri"):
            _string(image, key, required=False, where="image")


def check_aa_config(text: str) -> None:
    document = parse(text)
    for key in ("token_configs", "log"):
        _table(document, key)
    eventlog = _table(document, "eventlog_config")
    if eventlog is not None:
        if "init_pcr" in eventlog and type(eventlog["init_pcr"]) is not int:
            raise ConfigError("eventlog_config.init_pcr must be an integer")
        if "enable_eventlog" in eventlog and not isinstance(eventlog["enable_eventlog"], bool):
            raise ConfigError("eventlog_config.enable_eventlog must be a boolean")
