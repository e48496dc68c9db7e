"""Log entries: what each leaf of a tenant's Merkle log commits to.

An entry is the RFC 8785 canonical JSON of
``{"envelope": "sha256:<hex>", "runId": <run id>, "tenant": <tenant>, "v": "1"}``; its leaf
hash is SHA-256(0x00 || entry bytes). Parsing is strict: the bytes must be exactly the
canonical form, so an entry has one encoding only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from attestation.contracts import is_run_id, is_sha256_digest, is_tenant_id

ENTRY_VERSION: Final = "1"
#: The longest entry: a 71-character digest, a 128-character run ID, a 63-character tenant
#: (the grammars of :mod:`attestation.contracts`) in the canonical form below.
MAX_ENTRY_BYTES: Final = len('{"envelope":"","runId":"","tenant":"","v":""}') + 71 + 128 + 63 + 1


class EntryError(ValueError):
    """Entry bytes that are not a canonical v1 log entry."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    tenant: str
    run_id: str
    envelope: str  # "sha256:<hex>" of the exact envelope bytes

    def __post_init__(self) -> None:
        if not is_tenant_id(self.tenant):
            raise EntryError(f"entry tenant {self.tenant!r} is not a tenant id")
        if not is_run_id(self.run_id):
            raise EntryError(f"entry runId {self.run_id!r} is not a run id")
        if not is_sha256_digest(self.envelope):
            raise EntryError(f"entry envelope {self.envelope!r} is not a sha256: digest")

    def to_bytes(self) -> bytes:
        # Each field was checked to hold only ASCII letters, digits and ``.:_-``, none of
        # which JSON escapes, and the keys are in RFC 8785 order: this is the canonical form
        # (tests/publish/test_formats.py compares it with canonicalize), written without
        # walking a dict, once per envelope on both sides of a publish.
        return (
            f'{{"envelope":"{self.envelope}","runId":"{self.run_id}",'
            f'"tenant":"{self.tenant}","v":"{ENTRY_VERSION}"}}'
        ).encode()

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
