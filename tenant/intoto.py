"""An envelope as an in-toto Statement v1, so it can sit beside SLSA provenance.

Statement layer: in-toto/attestation spec/v1 (statement.md, resource_descriptor.md,
digest_set.md, field_types.md). ``subject`` names the two artifacts the envelope's binding
commits to, by SHA-256 (consumers match subjects by digest only):

* ``result``: ``binding.resultDigest``, the SHA-256 of the RFC 8785 bytes of the evaluation
  report (the result file ``run`` writes is those bytes plus one newline);
* ``corpus``: ``binding.corpusChecksum``, the corpus checksum (SHA-256 over the canonical cases
  in ``case_id`` order), as ``attested-replay corpus checksum DIR`` prints it.

The predicate (type :data:`PREDICATE_TYPE`, documented in docs/in-toto.md) carries the
envelope's digest, run, tenant, platform, measurement, HOST_DATA, REPORT_DATA and the whole
binding. The statement is unsigned: it is an index of the envelope, and whatever trusts it
must verify the envelope it names (``verify-attested-run``).

A merged envelope (a sharded run) has the same two subjects, from its header: the merged
report's digest (the digest an unsharded run of the same corpus binds) and the corpus checksum;
its predicate (type :data:`MERGED_PREDICATE_TYPE`) carries the header and each shard's position,
REPORT_DATA and partial result digest. A shard envelope is refused
(:class:`ShardEnvelopeError`): it binds only its shard's partial result, which is no artifact a
consumer holds; the run's merged envelope stands for the run.
"""

from __future__ import annotations

from typing import Any, Final

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import canonicalize
from attestation.envelope.merged import MergedEnvelope, consistency_problem, parse_any_envelope
from tenant.errors import TenantInputError

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://attested-replay.dev/attestations/replay/v1"
MERGED_PREDICATE_TYPE: Final = "https://attested-replay.dev/attestations/replay-merged/v1"
ENVELOPE_MEDIA_TYPE: Final = "application/vnd.attested-replay.envelope.v1+json"
MERGED_ENVELOPE_MEDIA_TYPE: Final = "application/vnd.attested-replay.merged-envelope.v1+json"
VERIFIED_BY: Final = "verify-attested-run --envelope ENVELOPE --expected EXPECTED"


class ShardEnvelopeError(TenantInputError):
    """The envelope is one shard of a sharded run, which no statement stands for alone."""


class InconsistentMergedEnvelopeError(TenantInputError):
    """A merged envelope whose shards are not one sharded run under its header."""


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _subjects(result_digest: str, corpus_checksum: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "result",
            "digest": {"sha256": _hex(result_digest)},
            "mediaType": "application/json",
        },
        {"name": "corpus", "digest": {"sha256": _hex(corpus_checksum)}},
    ]


def statement_for(envelope_bytes: bytes) -> dict[str, Any]:
    """The Statement for the envelope ``envelope_bytes`` (parsed strictly first), whole-run or
    merged.

    Raises:
        MalformedError: not an envelope of either kind.
        ShardEnvelopeError: a shard envelope.
        InconsistentMergedEnvelopeError: a merged envelope whose shards are not one sharded
            run under its header (no verifier accepts it: ``merged.shards``).
    """
    envelope = parse_any_envelope(envelope_bytes)
    if isinstance(envelope, MergedEnvelope):
        return _merged_statement(envelope, envelope_bytes)
    binding = envelope.binding
    if binding.shard is not None:
        raise ShardEnvelopeError(
            f"it is shard {binding.shard.index} of {binding.shard.count} of run "
            f"{envelope.run_id!r}, which binds only that shard's partial result: export the "
            "run's merged envelope (attested-replay merge or collect) instead"
        )
    return {
        "_type": STATEMENT_TYPE,
        "subject": _subjects(binding.result_digest, binding.corpus_checksum),
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "envelope": {
                "digest": {"sha256": _hex(sha256_digest(envelope_bytes))},
                "mediaType": ENVELOPE_MEDIA_TYPE,
            },
            "runId": envelope.run_id,
            "tenant": envelope.tenant,
            "platform": envelope.platform,
            "measurement": envelope.measurement,
            "hostData": envelope.host_data,
            "reportData": envelope.report_data,
            "reportDataEncoding": envelope.evidence.report_data_encoding,
            "binding": binding.to_json_dict(),
            "verifiedBy": VERIFIED_BY,
        },
    }


def _merged_statement(merged: MergedEnvelope, envelope_bytes: bytes) -> dict[str, Any]:
    # The statement copies what every shard shares (platform, MEASUREMENT, HOST_DATA) from
    # shard 0, so the shards must agree first; the full check is the verifier's.
    problem = consistency_problem(merged)
    if problem is not None:
        raise InconsistentMergedEnvelopeError(f"{problem}: no verifier accepts it")
    shards = merged.shards
    first = shards[0]
    document = merged.to_json_dict()
    header = {key: value for key, value in document.items() if key not in ("result", "shards")}
    return {
        "_type": STATEMENT_TYPE,
        "subject": _subjects(merged.result_digest, merged.corpus_checksum),
        "predicateType": MERGED_PREDICATE_TYPE,
        "predicate": {
            "envelope": {
                "digest": {"sha256": _hex(sha256_digest(envelope_bytes))},
                "mediaType": MERGED_ENVELOPE_MEDIA_TYPE,
            },
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
            "verifiedBy": VERIFIED_BY,
        },
    }


def statement_bytes(envelope_bytes: bytes) -> bytes:
    """RFC 8785 bytes of :func:`statement_for` plus a newline (one JSON Lines record)."""
    return canonicalize(statement_for(envelope_bytes)) + b"\n"
