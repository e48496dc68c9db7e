"""Attestation envelope v1: the JSON a replay emits and a tenant verifies offline.

The models validate on construction and are frozen. JSON uses camelCase keys; unknown
keys are rejected (an unknown key in a security document is a typo that would silently
change its meaning). ``docs/envelope.md`` describes every field; ``docs/schema/`` holds the
JSON Schema generated from these models.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, field_validator
from pydantic.alias_generators import to_camel

from attestation.canonical import canonicalize
from attestation.json_document import load_json_document

API_VERSION: Final = "attested-replay.dev/v1"
ENVELOPE_KIND: Final = "AttestationEnvelope"
#: Envelopes larger than this are refused before parsing (a report plus chain is ~10 KB;
#: the cap leaves room for a large evaluation report).
MAX_ENVELOPE_BYTES: Final = 16 * 1024 * 1024

Sha256Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
RunId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,128}$")]
#: Tenants are DNS labels: they appear in Kubernetes names and URL paths.
TenantId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
Hex32 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Hex48 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{96}$")]
Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{128}$")]

#: How REPORT_DATA is derived from the canonical binding. ``sha512``: the 64 bytes of
#: SHA-512(JCS(binding)). ``sha256-hex``: the 64 ASCII characters of the lowercase hex
#: SHA-256(JCS(binding)), for attestation agents that pass ``runtime_data`` as raw text.
ReportDataEncoding = Literal["sha512", "sha256-hex"]
REPORT_DATA_ENCODINGS: Final[tuple[ReportDataEncoding, ...]] = ("sha512", "sha256-hex")

Platform = Literal["sev-snp", "simulated"]


class CamelModel(BaseModel):
    """Frozen, strict-keyed model with camelCase JSON names."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object of this model (camelCase keys, absent optionals omitted)."""
        return self.model_dump(mode="json", exclude_none=True)

    def canonical_bytes(self) -> bytes:
        """RFC 8785 canonical bytes of :meth:`to_json_dict`."""
        return canonicalize(self.to_json_dict())


class Workload(CamelModel):
    """The code that ran the replay."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    code_digest: Sha256Digest

    @property
    def digest(self) -> str:
        """``sha256:`` of this object's canonical JSON: the expected-values ``workloadDigest``."""
        return "sha256:" + hashlib.sha256(self.canonical_bytes()).hexdigest()


class Binding(CamelModel):
    """The exact object whose hash is REPORT_DATA."""

    run_id: RunId
    tenant: TenantId
    corpus_checksum: Sha256Digest
    evaluation_digest: Sha256Digest
    workload: Workload
    result_digest: Sha256Digest
    nonce: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    image_digest: Sha256Digest | None = None


class Evidence(CamelModel):
    """The hardware (or simulated) evidence and its endorsement."""

    report: Annotated[str, StringConstraints(min_length=1, max_length=8192)]
    provider: Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]{1,32}$")]
    cert_chain: Annotated[str, StringConstraints(max_length=65536)] = Field(
        description="PEM: VCEK or VLEK first, then ASK or ASVK, then ARK. The ARK here is "
        "never trusted; the verifier pins its own.",
    )
    report_data_encoding: ReportDataEncoding = "sha512"

    @field_validator("report")
    @classmethod
    def _report_is_base64(cls, value: str) -> str:
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"evidence.report is not base64: {exc}") from exc
        return value

    def report_bytes(self) -> bytes:
        """The raw attestation report bytes."""
        return base64.b64decode(self.report, validate=True)


class Envelope(CamelModel):
    """Attestation envelope v1."""

    api_version: Literal["attested-replay.dev/v1"]
    kind: Literal["AttestationEnvelope"]
    run_id: RunId
    tenant: TenantId
    binding: Binding
    report_data: Hex64
    measurement: Hex48
    host_data: Hex32
    platform: Platform
    evidence: Evidence
    result: dict[str, JsonValue] | None = None


def parse_envelope(data: bytes) -> Envelope:
    """An envelope from its JSON bytes, as strictly as the verifier reads it: at most
    :data:`MAX_ENVELOPE_BYTES`, strict JSON (no duplicate keys), camelCase keys only.

    Raises:
        MalformedError: naming what is wrong.
    """
    return load_json_document(data, Envelope, what="envelope", limit=MAX_ENVELOPE_BYTES)
