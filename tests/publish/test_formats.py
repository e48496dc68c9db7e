"""Strict parsing of log entries, signed notes and verifier keys, on arbitrary input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.contracts import RUN_ID_PATTERN
from attestation.transparency.checkpoint import CheckpointError, VerifierKey, parse_signed_note
from attestation.transparency.entries import EntryError, LogEntry

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
