"""Attestation envelope v1: the JSON a replay emits and a tenant verifies offline.

The models validate on construction and are frozen. JSON uses camelCase keys; unknown
keys are rejected (an unknown key in a security document is a typo that would silently
change its meaning). ``docs/envelope.md`` describes every field; ``docs/schema/`` holds the
JSON Schema generated from these models.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Final, Literal

from pydantic import Field, JsonValue, StringConstraints, field_validator, model_validator

from attestation.contracts import (
    MAX_ENVELOPE_BYTES,
    MAX_ENVELOPE_JSON_DEPTH,
    MAX_ENVELOPE_JSON_ITEMS,
    MAX_SHARD_COUNT,
    Hex32,
    Hex48,
    Hex64,
    Nonce,
    Platform,
    RunId,
    Sha256Digest,
    TenantId,
    WireModel,
    sha256_digest,
)
from attestation.encoding.json_document import load_json_object, validate_document

API_VERSION: Final = "attested-replay.dev/v1"
ENVELOPE_KIND: Final = "AttestationEnvelope"

#: How REPORT_DATA is derived from the canonical binding. ``sha512``: the 64 bytes of
#: SHA-512(JCS(binding)). ``sha256-hex``: the 64 ASCII characters of the lowercase hex
#: SHA-256(JCS(binding)), for attestation agents that pass ``runtime_data`` as raw text.
ReportDataEncoding = Literal["sha512", "sha256-hex"]
REPORT_DATA_ENCODINGS: Final[tuple[ReportDataEncoding, ...]] = ("sha512", "sha256-hex")


class Workload(WireModel):
    """The code that ran the replay."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    version: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    code_digest: Sha256Digest

    @property
    def digest(self) -> str:
        """``sha256:`` of this object's canonical JSON: the expected-values ``workloadDigest``."""
        return sha256_digest(self.canonical_bytes())


class ShardPosition(WireModel):
    """Which part of a sharded replay an envelope is: shard ``index`` (from 0) of ``count``.

    Bound into REPORT_DATA with the run, so a shard's evidence cannot stand for another
    position, another shard count or another run.
    """

    index: Annotated[int, Field(strict=True, ge=0, lt=MAX_SHARD_COUNT)]
    count: Annotated[int, Field(strict=True, ge=1, le=MAX_SHARD_COUNT)]

    @model_validator(mode="after")
    def _index_below_count(self) -> ShardPosition:
        if self.index >= self.count:
            raise ValueError(f"shard index {self.index} is not below the shard count {self.count}")
        return self


class Binding(WireModel):
    """The exact object whose hash is REPORT_DATA."""

    run_id: RunId
    tenant: TenantId
    corpus_checksum: Sha256Digest
    evaluation_digest: Sha256Digest
    workload: Workload
    result_digest: Sha256Digest
    nonce: Nonce | None = None
    image_digest: Sha256Digest | None = None
    #: Present only in a shard's envelope (absent: the envelope is a whole, unsharded run).
    shard: ShardPosition | None = None


#: What ``evidence.report`` holds when ``evidence.kind`` is present: ``az-snp-vtpm``, an Azure
#: HCL report (the paravisor's SNP report binding a vTPM key), with ``evidence.vtpm`` the quote
#: that key signed over the binding's hash. Absent: the 1184-byte SNP report whose REPORT_DATA
#: is the binding's hash (so SEV-SNP envelopes keep their bytes).
EvidenceKind = Literal["az-snp-vtpm"]
Base64Text = Annotated[str, StringConstraints(min_length=1, max_length=8192)]


def _is_base64(value: str, where: str) -> str:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{where} is not base64: {exc}") from exc
    return value


class VtpmQuote(WireModel):
    """An az-snp-vtpm evidence's vTPM part: the quote, its signature and the quoted PCRs."""

    quote: Base64Text = Field(description="base64 of the TPMS_ATTEST the AK signed")
    signature: Base64Text = Field(description="base64 of its TPMT_SIGNATURE (RSASSA, SHA-256)")
    pcrs: tuple[Hex32, ...] = Field(
        max_length=24, description="the SHA-256 values of the quoted PCRs, in PCR order"
    )
    format_version: Annotated[int, Field(strict=True, ge=0, le=2)] = Field(
        description="the attestation agent's az-snp-vtpm evidence version (2: user-data "
        "carries the binding too)"
    )

    @field_validator("quote", "signature")
    @classmethod
    def _base64(cls, value: str) -> str:
        return _is_base64(value, "evidence.vtpm")

    def quote_bytes(self) -> bytes:
        return base64.b64decode(self.quote, validate=True)

    def signature_bytes(self) -> bytes:
        return base64.b64decode(self.signature, validate=True)


class Evidence(WireModel):
    """The hardware (or simulated) evidence and its endorsement."""

    report: Base64Text
    provider: Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]{1,32}$")]
    cert_chain: Annotated[str, StringConstraints(max_length=65536)] = Field(
        description="PEM: VCEK or VLEK first, then ASK or ASVK, then ARK. The ARK here is "
        "never trusted; the verifier pins its own.",
    )
    report_data_encoding: ReportDataEncoding = "sha512"
    #: Absent for SEV-SNP evidence.
    kind: EvidenceKind | None = None
    #: Present exactly when ``kind`` is ``az-snp-vtpm``.
    vtpm: VtpmQuote | None = None

    @model_validator(mode="after")
    def _vtpm_with_its_kind(self) -> Evidence:
        if (self.kind == "az-snp-vtpm") != (self.vtpm is not None):
            raise ValueError("evidence.vtpm is present exactly when evidence.kind is az-snp-vtpm")
        return self

    @field_validator("report")
    @classmethod
    def _report_is_base64(cls, value: str) -> str:
        return _is_base64(value, "evidence.report")

    def report_bytes(self) -> bytes:
        """The raw attestation report bytes."""
        return base64.b64decode(self.report, validate=True)


class Envelope(WireModel):
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
    return validate_parsed_envelope(load_envelope_object(data), what="envelope")


def load_envelope_object(data: bytes) -> dict[str, object]:
    """An envelope's bytes as a JSON object, within the envelope's bounds, each checked
    before parsing: :data:`MAX_ENVELOPE_BYTES`, :data:`MAX_ENVELOPE_JSON_ITEMS` and
    :data:`MAX_ENVELOPE_JSON_DEPTH`. The one gate every reader of an envelope passes (the
    verifier, the publication service and the publishing client) before anything else.

    Raises:
        MalformedError: naming the bound or the JSON problem.
    """
    return load_json_object(
        data,
        what="envelope",
        limit=MAX_ENVELOPE_BYTES,
        max_items=MAX_ENVELOPE_JSON_ITEMS,
        max_depth=MAX_ENVELOPE_JSON_DEPTH,
    )


def validate_parsed_envelope(document: dict[str, object], *, what: str) -> Envelope:
    """:class:`Envelope` from a JSON object that :func:`parse_strict_json` produced.

    A JSON object parsed from strict JSON is a ``dict[str, JsonValue]`` by construction, so
    its ``result`` is validated as "an object" and attached as parsed: pydantic's walk of
    every value of the report (three quarters of an envelope's validation time) could not
    refuse anything. Any other ``result`` (an array, a string...) is left to the model, which
    refuses it with its usual message. Only for parsed JSON: a Python caller's dict may hold
    anything.

    Raises:
        MalformedError: a schema violation, naming ``what``.
    """
    result = document.get("result")
    if not isinstance(result, dict) or not result:
        return validate_document(document, Envelope, what=what)
    envelope = validate_document({**document, "result": {}}, Envelope, what=what)
    return envelope.model_copy(update={"result": result})
