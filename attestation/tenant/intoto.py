"""An envelope the tenant has verified, as a DSSE-signed in-toto Statement v1, so it can sit
beside SLSA provenance.

Statement layer: in-toto/attestation spec/v1 (statement.md, resource_descriptor.md,
digest_set.md, field_types.md); envelope: DSSE v1 (:mod:`attestation.tenant.dsse`). ``subject``
names two files a consumer holds, by the SHA-256 of their exact bytes (consumers match subjects by
digest only):

* the result file (``run --result-out``, ``merge``): checked first to be the result the
  envelope binds (its bytes, without one trailing newline, are the RFC 8785 bytes whose digest
  is ``binding.resultDigest``);
* the corpus archive (a ``corpus export``, or a ``.tar.gz`` of the corpus files): checked first
  to unpack to the corpus whose checksum is ``binding.corpusChecksum`` (the caller computes it:
  the corpus checksum is the runner's).

The predicate (type :data:`PREDICATE_TYPE`, documented in docs/in-toto.md) carries the
envelope's digest, run, tenant, platform, measurement, HOST_DATA, REPORT_DATA, the whole
binding, and the tenant's verification: the statement is made only for an envelope that
verified against the tenant's expected values, and it is signed with the tenant's key, so it
asserts "this tenant verified this envelope and these files are what it binds".

A merged envelope (a sharded run) has the same two subjects, from its header; its predicate
(type :data:`MERGED_PREDICATE_TYPE`) carries the header and each shard's position, REPORT_DATA
and partial result digest. A shard envelope is refused (:class:`ShardEnvelopeError`): it binds
only its shard's partial result, which is no artifact a consumer holds; the run's merged
envelope stands for the run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import canonicalize
from attestation.envelope.merged import MergedEnvelope, consistency_problem, parse_any_envelope
from attestation.envelope.model import Envelope
from attestation.tenant.dsse import INTOTO_PAYLOAD_TYPE, SigningKey, sign_envelope
from attestation.tenant.errors import TenantInputError

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://attested-replay.dev/attestations/replay/v1"
MERGED_PREDICATE_TYPE: Final = "https://attested-replay.dev/attestations/replay-merged/v1"
ENVELOPE_MEDIA_TYPE: Final = "application/vnd.attested-replay.envelope.v1+json"
MERGED_ENVELOPE_MEDIA_TYPE: Final = "application/vnd.attested-replay.merged-envelope.v1+json"
VERIFIED_BY: Final = "verify-attested-run --envelope ENVELOPE --expected EXPECTED"
RESULT_MEDIA_TYPE: Final = "application/json"


class ShardEnvelopeError(TenantInputError):
    """The envelope is one shard of a sharded run, which no statement stands for alone."""


class InconsistentMergedEnvelopeError(TenantInputError):
    """A merged envelope whose shards are not one sharded run under its header."""


class SubjectMismatchError(TenantInputError):
    """A file given as a subject is not the one the envelope binds."""


@dataclass(frozen=True, slots=True)
class Subject:
    """A resource descriptor: a file's name, the SHA-256 of its exact bytes, its media type."""

    name: str
    sha256: str
    media_type: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "digest": {"sha256": self.sha256}, "mediaType": self.media_type}


@dataclass(frozen=True, slots=True)
class Verified:
    """The tenant's verification the statement asserts: by which verifier, against which
    expected-values file (its SHA-256), at which time (RFC 3339)."""

    verifier: str
    expected_sha256: str
    verified_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "verified",
            "verifier": self.verifier,
            "expectedValues": {"digest": {"sha256": self.expected_sha256}},
            "verifiedAt": self.verified_at,
            "command": VERIFIED_BY,
        }


def exportable(envelope_bytes: bytes) -> Envelope | MergedEnvelope:
    """The envelope a statement can stand for, parsed strictly.

    Raises:
        MalformedError: not an envelope of either kind.
        ShardEnvelopeError: a shard envelope.
        InconsistentMergedEnvelopeError: a merged envelope whose shards are not one sharded
            run under its header (no verifier accepts it: ``merged.shards``).
    """
    envelope = parse_any_envelope(envelope_bytes)
    if isinstance(envelope, MergedEnvelope):
        problem = consistency_problem(envelope)
        if problem is not None:
            raise InconsistentMergedEnvelopeError(f"{problem}: no verifier accepts it")
        return envelope
    shard = envelope.binding.shard
    if shard is not None:
        raise ShardEnvelopeError(
            f"it is shard {shard.index} of {shard.count} of run {envelope.run_id!r}, which "
            "binds only that shard's partial result: export the run's merged envelope "
            "(attested-replay merge or collect) instead"
        )
    return envelope


def bound_result_digest(envelope: Envelope | MergedEnvelope) -> str:
    if isinstance(envelope, MergedEnvelope):
        return envelope.result_digest
    return envelope.binding.result_digest


def bound_corpus_checksum(envelope: Envelope | MergedEnvelope) -> str:
    if isinstance(envelope, MergedEnvelope):
        return envelope.corpus_checksum
    return envelope.binding.corpus_checksum


def result_subject(name: str, data: bytes, envelope: Envelope | MergedEnvelope) -> Subject:
    """The result file ``data`` (named ``name``) as a subject, once it is the result the
    envelope binds: its bytes without one trailing newline are the canonical result."""
    bound = bound_result_digest(envelope)
    canonical = data.removesuffix(b"\n")
    if sha256_digest(canonical) != bound:
        raise SubjectMismatchError(
            f"{name} is not the result the envelope binds: its bytes (without a final "
            f"newline) have digest {sha256_digest(canonical)}, the binding says {bound}"
        )
    return Subject(name, hashlib.sha256(data).hexdigest(), RESULT_MEDIA_TYPE)


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def statement_for(
    envelope_bytes: bytes,
    envelope: Envelope | MergedEnvelope,
    *,
    subjects: tuple[Subject, Subject],
    verified: Verified,
) -> dict[str, Any]:
    """The Statement for ``envelope`` (from :func:`exportable` of ``envelope_bytes``), which
    the caller has verified, with the result and corpus ``subjects`` it has checked."""
    if isinstance(envelope, MergedEnvelope):
        predicate_type, predicate = MERGED_PREDICATE_TYPE, _merged_predicate(envelope)
        media_type = MERGED_ENVELOPE_MEDIA_TYPE
    else:
        predicate_type, predicate = PREDICATE_TYPE, _predicate(envelope)
        media_type = ENVELOPE_MEDIA_TYPE
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject.to_json() for subject in subjects],
        "predicateType": predicate_type,
        "predicate": {
            "envelope": {
                "digest": {"sha256": _hex(sha256_digest(envelope_bytes))},
                "mediaType": media_type,
            },
            **predicate,
            "verification": verified.to_json(),
        },
    }


def _predicate(envelope: Envelope) -> dict[str, Any]:
    return {
        "runId": envelope.run_id,
        "tenant": envelope.tenant,
        "platform": envelope.platform,
        "measurement": envelope.measurement,
        "hostData": envelope.host_data,
        "reportData": envelope.report_data,
        "reportDataEncoding": envelope.evidence.report_data_encoding,
        "binding": envelope.binding.to_json_dict(),
    }


def _merged_predicate(merged: MergedEnvelope) -> dict[str, Any]:
    # What every shard shares (platform, MEASUREMENT, HOST_DATA) is copied from shard 0:
    # exportable() checked that the shards agree, and the verifier checked them all.
    shards = merged.shards
    first = shards[0]
    document = merged.to_json_dict()
    header = {key: value for key, value in document.items() if key not in ("result", "shards")}
    return {
        "runId": merged.run_id,
        "tenant": merged.tenant,
        "shardCount": merged.shard_count,
        "platform": first.platform,
        "measurement": first.measurement,
        "hostData": first.host_data,
        "header": header,
        "shards": [
            {
                "index": index,
                "reportData": s.report_data,
                "reportDataEncoding": s.evidence.report_data_encoding,
                "resultDigest": s.binding.result_digest,
            }
            for index, s in enumerate(shards)
        ],
    }


def signed_statement(statement: dict[str, Any], key: SigningKey) -> bytes:
    """The DSSE envelope of the statement's RFC 8785 bytes, signed with ``key``, as RFC 8785
    JSON plus a newline (one line of an ``.intoto.jsonl`` bundle)."""
    envelope = sign_envelope(canonicalize(statement), key, payload_type=INTOTO_PAYLOAD_TYPE)
    return canonicalize(envelope) + b"\n"
