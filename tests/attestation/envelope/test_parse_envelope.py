"""parse_envelope reads envelopes as strictly as the verifier (publisher, server, fetch use it)."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import pytest
import rfc8785

from attestation.contracts import MAX_ENVELOPE_BYTES, MAX_ENVELOPE_JSON_ITEMS
from attestation.envelope.binding import result_digest
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


def _with_result(result_json: bytes) -> bytes:
    """The minimal envelope with ``result`` spliced in as raw JSON text."""
    document = json.dumps({**_minimal(), "result": {"x": None}}).encode()
    return document.replace(b'{"x": null}', result_json, 1)


@pytest.mark.parametrize("value", [b"0", b'"a"', b"{}", b"[]", b"0.5"])
def test_millions_of_small_values_are_refused_before_any_object_is_built(value: bytes) -> None:
    # A maximal envelope whose result holds millions of tiny values: as Python objects they
    # would need 30-60x the document's size. The count is made on the bytes, before parsing.
    room = MAX_ENVELOPE_BYTES - len(_with_result(b'{"x": []}'))
    count = room // (len(value) + 1)
    data = _with_result(b'{"x": [' + b",".join([value] * count) + b"]}")
    assert len(data) <= MAX_ENVELOPE_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(MalformedError, match=r"envelope holds up to \d+ JSON values, over"):
            parse_envelope(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) // 100


def test_a_maximal_envelope_within_the_value_limit_parses_within_10x_its_size() -> None:
    # 16 MiB made of a long string and MAX_ENVELOPE_JSON_ITEMS - 100 small values.
    values = b",".join([b"[1,2]"] * ((MAX_ENVELOPE_JSON_ITEMS - 100) // 3))
    head = _with_result(b'{"items": [' + values + b'], "text": ""}')
    pad = MAX_ENVELOPE_BYTES - len(head)
    data = head.replace(b'"text": ""', b'"text": "' + b"y" * pad + b'"', 1)
    assert len(data) == MAX_ENVELOPE_BYTES
    tracemalloc.start()
    try:
        envelope = parse_envelope(data)
        assert envelope.result is not None
        digest = result_digest(envelope.result)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert digest == "sha256:" + hashlib.sha256(rfc8785.dumps(envelope.result)).hexdigest()
    assert peak < 10 * len(data)


# -- the result of parsed JSON is attached as parsed (validate_parsed_envelope) --------------


def _document_with_result(result: object) -> bytes:
    document = _minimal()
    document["result"] = result
    return json.dumps(document).encode()


def test_a_parsed_result_equals_the_one_pydantic_validates() -> None:
    from attestation.encoding.json_document import validate_document
    from attestation.envelope.model import Envelope

    result = {"arms": [{"name": "a", "sharpe": 1.25, "trades": 3, "flags": [True, None]}]}
    envelope = parse_envelope(_document_with_result(result))
    validated = validate_document(json.loads(_document_with_result(result)), Envelope, what="e")
    assert envelope.result == result
    assert envelope == validated
    assert envelope.model_fields_set == validated.model_fields_set
    assert envelope.canonical_bytes() == validated.canonical_bytes()


@pytest.mark.parametrize("result", [[1, 2], "report", 7, {}])
def test_a_result_that_is_no_object_is_left_to_the_model(result: object) -> None:
    if result == {}:
        assert parse_envelope(_document_with_result(result)).result == {}
        return
    with pytest.raises(MalformedError, match=r"envelope is invalid: result: Input should be"):
        parse_envelope(_document_with_result(result))


def test_the_rest_of_an_envelope_with_a_result_is_still_validated() -> None:
    document = json.loads(_document_with_result({"x": 1}))
    document["measurement"] = "zz"
    with pytest.raises(MalformedError, match="measurement"):
        parse_envelope(json.dumps(document).encode())
