"""Log entries: what each leaf of a tenant's Merkle log commits to.

An entry is the RFC 8785 canonical JSON of
``{"envelope": "sha256:<hex>", "runId": <run id>, "tenant": <tenant>, "v": "1"}``; its leaf
hash is SHA-256(0x00 || entry bytes). Parsing is strict: the bytes must be exactly the
canonical form, so an entry has one encoding only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from attestation.canonical import canonicalize

ENTRY_VERSION = "1"
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
TENANT_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
#: The largest envelope the publication service accepts; readers cap downloads at it too.
MAX_ENVELOPE_BYTES = 1024 * 1024


class EntryError(ValueError):
    """Entry bytes that are not a canonical v1 log entry."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    tenant: str
    run_id: str
    envelope: str  # "sha256:<hex>" of the exact envelope bytes

    def __post_init__(self) -> None:
        if not TENANT_PATTERN.fullmatch(self.tenant):
            raise EntryError(f"entry tenant {self.tenant!r} is not a tenant id")
        if not RUN_ID_PATTERN.fullmatch(self.run_id):
            raise EntryError(f"entry runId {self.run_id!r} is not a run id")
        if not DIGEST_PATTERN.fullmatch(self.envelope):
            raise EntryError(f"entry envelope {self.envelope!r} is not a sha256: digest")

    def to_bytes(self) -> bytes:
        return canonicalize(
            {"envelope": self.envelope, "runId": self.run_id, "tenant": self.tenant, "v": "1"}
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> LogEntry:
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EntryError(f"log entry is not JSON: {exc}") from exc
        if not isinstance(obj, dict) or set(obj) != {"envelope", "runId", "tenant", "v"}:
            raise EntryError("log entry must have exactly the keys envelope, runId, tenant, v")
        if obj["v"] != ENTRY_VERSION:
            raise EntryError(f"log entry version {obj['v']!r} is not {ENTRY_VERSION!r}")
        if not all(isinstance(obj[key], str) for key in ("envelope", "runId", "tenant")):
            raise EntryError("log entry fields must be strings")
        entry = cls(tenant=obj["tenant"], run_id=obj["runId"], envelope=obj["envelope"])
        if entry.to_bytes() != data:
            raise EntryError("log entry is not in RFC 8785 canonical form")
        return entry
