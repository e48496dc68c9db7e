"""parse_envelope reads envelopes as strictly as the verifier (publisher, server, fetch use it)."""

from __future__ import annotations

import json

import pytest

from attestation.contracts import MAX_ENVELOPE_BYTES
from attestation.envelope.model import parse_envelope
from attestation.errors import MalformedError


def _minimal() -> dict[str, object]:
    digest = "sha256:" + "0" * 64
    return {
        "apiVersion": "attested-replay.dev/v1",
        "kind": "AttestationEnvelope",
        "runId": "r-1",
        "tenant": "acme",
        "binding": {
            "runId": "r-1",
            "tenant": "acme",
            "corpusChecksum": digest,
            "evaluationDigest": digest,
            "workload": {"name": "attested-replay", "version": "0.1.0", "codeDigest": digest},
            "resultDigest": digest,
        },
        "reportData": "00" * 64,
        "measurement": "00" * 48,
        "hostData": "00" * 32,
        "platform": "simulated",
        "evidence": {"report": "AAAA", "provider": "simulated", "certChain": ""},
    }


def test_a_valid_document_parses() -> None:
    envelope = parse_envelope(json.dumps(_minimal()).encode())
    assert envelope.run_id == "r-1"
    assert envelope.evidence.report_data_encoding == "sha512"


def test_a_duplicate_key_is_refused_not_last_wins() -> None:
    text = json.dumps(_minimal()).replace('"runId": "r-1",', '"runId": "r-1", "runId": "r-2",', 1)
    with pytest.raises(MalformedError, match="'runId' appears more than once"):
        parse_envelope(text.encode())


def test_snake_case_keys_are_refused() -> None:
    document = _minimal()
    document["run_id"] = document.pop("runId")
    with pytest.raises(MalformedError, match="envelope is invalid"):
        parse_envelope(json.dumps(document).encode())


def test_an_oversized_envelope_is_refused_before_parsing() -> None:
    with pytest.raises(MalformedError, match=f"over the {MAX_ENVELOPE_BYTES}-byte limit"):
        parse_envelope(b" " * (MAX_ENVELOPE_BYTES + 1))
