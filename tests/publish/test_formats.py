"""Strict parsing of log entries, signed notes and verifier keys, on arbitrary input; the
service's JSON answers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.contracts import RUN_ID_PATTERN
from attestation.encoding.canonical import canonicalize
from attestation.transparency.checkpoint import CheckpointError, VerifierKey, parse_signed_note
from attestation.transparency.entries import EntryError, LogEntry
from runner.service.server import _answer_body

DIGEST = "sha256:" + "ab" * 32
run_ids = st.from_regex(RUN_ID_PATTERN, fullmatch=True)
tenants = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")


@pytest.mark.parametrize("run_id", [".", ".."])
def test_dot_run_ids_are_refused(run_id: str) -> None:
    # They name this and the parent directory in file paths and URLs: never a run.
    with pytest.raises(EntryError, match="is not a run id"):
        LogEntry(tenant="acme", run_id=run_id, envelope=DIGEST)


@given(tenants, run_ids)
def test_entry_round_trips_in_canonical_form(tenant: str, run_id: str) -> None:
    entry = LogEntry(tenant=tenant, run_id=run_id, envelope=DIGEST)
    data = entry.to_bytes()
    assert (
        data == f'{{"envelope":"{DIGEST}","runId":"{run_id}","tenant":"{tenant}","v":"1"}}'.encode()
    )
    assert data == canonicalize({"envelope": DIGEST, "runId": run_id, "tenant": tenant, "v": "1"})
    assert LogEntry.from_bytes(data) == entry


@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_an_entry_error_or_a_canonical_entry(data: bytes) -> None:
    try:
        entry = LogEntry.from_bytes(data)
    except EntryError:
        return
    assert entry.to_bytes() == data


def test_non_canonical_entries_are_refused() -> None:
    canonical = LogEntry(tenant="acme", run_id="r1", envelope=DIGEST).to_bytes()
    with pytest.raises(EntryError, match="not in RFC 8785 canonical form"):
        LogEntry.from_bytes(canonical.replace(b",", b", ", 1))
    with pytest.raises(EntryError, match="exactly the keys"):
        LogEntry.from_bytes(canonical[:-1] + b',"x":1}')
    with pytest.raises(EntryError, match="version '2'"):
        LogEntry.from_bytes(canonical.replace(b'"v":"1"', b'"v":"2"'))
    with pytest.raises(EntryError, match="not a sha256: digest"):
        LogEntry(tenant="acme", run_id="r1", envelope="sha256:AB")


@given(st.text(max_size=300))
def test_arbitrary_text_is_a_checkpoint_error_or_a_parsed_note(text: str) -> None:
    try:
        checkpoint, signatures = parse_signed_note(text)
    except CheckpointError:
        return
    assert signatures
    assert text.startswith(checkpoint.note_text())


@given(st.text(max_size=120))
def test_arbitrary_verifier_keys_fail_cleanly(text: str) -> None:
    try:
        key = VerifierKey.parse(text)
    except CheckpointError:
        return
    assert key.encode() == text.strip()


@given(
    st.dictionaries(
        st.text(max_size=8),
        st.none() | st.integers() | st.text() | st.lists(st.text(max_size=4), max_size=3),
        max_size=6,
    )
)
def test_every_answer_is_compact_sorted_json_a_client_reads_back(
    payload: dict[str, object],
) -> None:
    """Lone surrogates (``st.text`` draws them) and integers beyond 64 bits, which orjson
    cannot write, get ``json.dumps``'s escapes in the same compact, key-sorted form."""
    body = _answer_body(payload)
    compact = json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    wide = any(
        isinstance(value, int) and not -(2**63) <= value < 2**64 for value in payload.values()
    )
    try:
        expected = compact.encode()
    except UnicodeEncodeError:  # a lone surrogate
        wide = True
    if wide:
        expected = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    assert body == expected
    assert json.loads(body) == payload


def test_an_answer_with_a_lone_surrogate_is_escaped_not_an_error() -> None:
    assert _answer_body({"error": "bad path /\udc80", "n": 2**70}) == (
        b'{"error":"bad path /\\udc80","n":1180591620717411303424}'
    )
    assert _answer_body({"b": "é", "a": 1}) == '{"a":1,"b":"é"}'.encode()
