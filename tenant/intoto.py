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
"""

from __future__ import annotations

from typing import Any, Final

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import canonicalize
from attestation.envelope.model import Envelope, parse_envelope

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://attested-replay.dev/attestations/replay/v1"
ENVELOPE_MEDIA_TYPE: Final = "application/vnd.attested-replay.envelope.v1+json"


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def statement_for(envelope_bytes: bytes) -> dict[str, Any]:
    """The Statement for the envelope ``envelope_bytes`` (parsed strictly first)."""
    envelope: Envelope = parse_envelope(envelope_bytes)
    binding = envelope.binding
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": "result",
                "digest": {"sha256": _hex(binding.result_digest)},
                "mediaType": "application/json",
            },
            {"name": "corpus", "digest": {"sha256": _hex(binding.corpus_checksum)}},
        ],
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
            "verifiedBy": "verify-attested-run --envelope ENVELOPE --expected EXPECTED",
        },
    }


def statement_bytes(envelope_bytes: bytes) -> bytes:
    """RFC 8785 bytes of :func:`statement_for` plus a newline (one JSON Lines record)."""
    return canonicalize(statement_for(envelope_bytes)) + b"\n"
