"""The tenant's log-following rules (:class:`TrustedLogState`) driven with bytes only: signed
notes, entry bytes and a tree's right edge as a hostile service would serve them, no files,
no HTTP. ``tests/publish/test_tenant_fetch.py`` and ``test_bulk_fetch.py`` drive the same rules
through ``tenant fetch`` against a running service."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from attestation.contracts import MAX_ENVELOPE_BYTES, sha256_digest
from attestation.tenant.errors import TamperingError, TenantInputError
from attestation.tenant.log_state import (
    Index,
    TrustedLogState,
    WitnessPolicy,
    checked_envelope,
)
from attestation.transparency.checkpoint import COSIGNATURE_V1_ALGORITHM, Checkpoint, VerifierKey
from attestation.transparency.cosignature import cosignature_line, cosigned_message
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import CompactRange, leaf_hash
from runner.service.log.checkpoint import CheckpointSigner

TENANT = "acme"
LOG = CheckpointSigner("log.example", Ed25519PrivateKey.from_private_bytes(b"\x01" * 32))
ORIGIN = f"log.example/t/{TENANT}"


def _witness(seed: int, name: str) -> tuple[Ed25519PrivateKey, VerifierKey]:
    private = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return private, VerifierKey(name, public, algorithm=COSIGNATURE_V1_ALGORITHM)


WITNESSES = [_witness(2, "w1.example"), _witness(3, "w2.example")]


def entry(run: int, tenant: str = TENANT) -> bytes:
    digest = "sha256:" + hashlib.sha256(f"envelope {run}".encode()).hexdigest()
    return LogEntry(tenant, f"run-{run}", digest).to_bytes()


def root_of(leaves: list[bytes]) -> bytes:
    edge = edge_of(leaves)
    return edge.root()


def edge_of(leaves: list[bytes]) -> CompactRange:
    edge = CompactRange()
    for raw in leaves:
        edge.append(leaf_hash(raw))
    return edge


def note(leaves: list[bytes], *, cosigners: int = 0) -> str:
    signed = LOG.sign(Checkpoint(ORIGIN, len(leaves), root_of(leaves)))
    for private, key in WITNESSES[:cosigners]:
        checkpoint = Checkpoint(ORIGIN, len(leaves), root_of(leaves))
        signature = private.sign(cosigned_message(checkpoint, 1_700_000_000))
        signed += cosignature_line(key, 1_700_000_000, signature)
    return signed


class NoKeptEnvelopes:
    """Every kept index item here has its shard: reading a kept envelope is a test failure."""

    def read(self, digest: str) -> bytes:
        raise AssertionError(f"read {digest}")

    def where(self, digest: str) -> str:
        return digest


def fetch(state: TrustedLogState, leaves: list[bytes], *, cosigners: int = 0) -> Index:
    """What ``tenant fetch`` feeds the state, from an honest log of ``leaves``."""
    state.accept_checkpoint(note(leaves, cosigners=cosigners))
    start = state.new_entries_start()
    if start is None:
        return state.index
    edge = CompactRange()
    if start:
        edge = edge_of(leaves[:start])
        state.check_kept_edge(edge, ["tile/0/000"])
    proven = state.prove_entries(edge, enumerate(leaves[start:], start))
    _, index = state.record([None] * len(proven), NoKeptEnvelopes())
    return index


def fresh(witnesses: WitnessPolicy | None = None) -> TrustedLogState:
    return TrustedLogState(LOG.verifier_key, TENANT, witnesses=witnesses)


@given(runs=st.integers(0, 40), data=st.data())
def test_an_honest_log_followed_in_any_steps_gives_its_whole_index(
    runs: int, data: st.DataObject
) -> None:
    leaves = [entry(run) for run in range(runs)]
    cuts = sorted(data.draw(st.lists(st.integers(0, runs), max_size=4)))
    state = fresh()
    for size in [*cuts, runs]:
        index = fetch(state, leaves[:size])
        assert state.trusted == Checkpoint(ORIGIN, size, root_of(leaves[:size]))
    assert index == {
        str(run): {"digest": LogEntry.from_bytes(leaves[run]).envelope, "runId": f"run-{run}"}
        | {"shard": None}
        for run in range(runs)
    }


@given(runs=st.integers(2, 20), data=st.data())
def test_a_rewritten_entry_is_tampering_and_leaves_the_trusted_state(
    runs: int, data: st.DataObject
) -> None:
    leaves = [entry(run) for run in range(runs)]
    kept = data.draw(st.integers(1, runs - 1))
    state = fresh()
    fetch(state, leaves[:kept])
    trusted, index = state.trusted, state.index
    rewritten = data.draw(st.integers(kept, runs - 1))
    served = list(leaves)
    served[rewritten] = entry(1000 + rewritten)
    state.accept_checkpoint(note(leaves))  # the service signed the honest log
    assert state.new_entries_start() == kept
    edge = edge_of(leaves[:kept])
    state.check_kept_edge(edge, ["tile/0/000"])
    with pytest.raises(TamperingError) as caught:
        state.prove_entries(edge, enumerate(served[kept:], kept))
    assert str(caught.value) == (
        f"checkpoint of size {runs} is not consistent with the kept checkpoint of size {kept}: "
        "entries were removed, reordered or rewritten, or the log forked"
    )
    assert (state.trusted, state.index) == (trusted, index)


def test_a_first_fetch_of_other_entries_than_signed_is_another_log() -> None:
    state = fresh()
    state.accept_checkpoint(note([entry(0), entry(1)]))
    assert state.new_entries_start() == 0
    with pytest.raises(TamperingError) as caught:
        state.prove_entries(CompactRange(), enumerate([entry(0), entry(2)]))
    assert str(caught.value) == (
        "the entries served do not give the root of the signed checkpoint of size 2: the server "
        "shows another log than the one it signed"
    )
    assert state.trusted is None


@given(raw=st.binary(max_size=300))
def test_entry_bytes_that_are_no_canonical_entry_are_tampering(raw: bytes) -> None:
    leaves = [entry(0), raw]
    state = fresh()
    state.accept_checkpoint(note(leaves))
    state.new_entries_start()
    try:
        parsed = LogEntry.from_bytes(raw)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.tenant == TENANT:
        assert len(state.prove_entries(CompactRange(), enumerate(leaves))) == 2
        return
    with pytest.raises(TamperingError, match=r"^log entry 1 (is malformed|belongs to tenant)"):
        state.prove_entries(CompactRange(), enumerate(leaves))


def test_an_entry_of_another_tenant_is_tampering() -> None:
    leaves = [entry(0, tenant="other")]
    state = fresh()
    state.accept_checkpoint(note(leaves))
    state.new_entries_start()
    with pytest.raises(TamperingError) as caught:
        state.prove_entries(CompactRange(), enumerate(leaves))
    assert str(caught.value) == "log entry 0 belongs to tenant 'other'"


def test_a_log_that_shrank_or_forked_at_the_kept_size_is_tampering() -> None:
    leaves = [entry(run) for run in range(5)]
    state = fresh()
    fetch(state, leaves)
    state.accept_checkpoint(note(leaves[:3]))
    with pytest.raises(TamperingError) as caught:
        state.new_entries_start()
    assert str(caught.value) == "the log shrank from 5 to 3 entries: entries were removed"
    state.accept_checkpoint(note([*leaves[:4], entry(9)]))
    with pytest.raises(TamperingError, match=r"^checkpoint of size 5 is not consistent with the "):
        state.new_entries_start()
    state.accept_checkpoint(note(leaves))
    assert state.new_entries_start() is None
    assert state.record([], NoKeptEnvelopes())[0] == note(leaves)


def test_a_kept_edge_that_does_not_give_the_kept_root_names_its_tiles() -> None:
    leaves = [entry(run) for run in range(6)]
    state = fresh()
    fetch(state, leaves[:3])
    state.accept_checkpoint(note(leaves))
    assert state.new_entries_start() == 3
    with pytest.raises(TamperingError) as caught:
        state.check_kept_edge(edge_of([entry(7), *leaves[1:3]]), ["tile/0/000.p/3"])
    assert str(caught.value) == (
        "checkpoint of size 6 is not consistent with the kept checkpoint of size 3: entries "
        "were removed, reordered or rewritten, or the log forked (the hash tiles "
        "tile/0/000.p/3 do not give the kept root: the log no longer holds the kept tree, or "
        "the service served a wrong tile)"
    )


def test_a_checkpoint_by_another_key_or_origin_is_refused() -> None:
    other = CheckpointSigner("log.example", Ed25519PrivateKey.from_private_bytes(b"\x09" * 32))
    state = fresh()
    with pytest.raises(TamperingError, match=r"^the server's checkpoint is not acceptable: "):
        state.accept_checkpoint(other.sign(Checkpoint(ORIGIN, 0, root_of([]))))
    with pytest.raises(TamperingError, match=r"^the server's checkpoint is not acceptable: "):
        state.accept_checkpoint(LOG.sign(Checkpoint("log.example/t/other", 0, root_of([]))))
    with pytest.raises(RuntimeError, match="no checkpoint was accepted"):
        state.new_entries_start()


def test_pinned_witnesses_need_their_threshold_of_cosignatures() -> None:
    leaves = [entry(0)]
    keys = tuple(key for _, key in WITNESSES)
    state = fresh(WitnessPolicy(keys, threshold=2))
    with pytest.raises(TamperingError) as caught:
        state.accept_checkpoint(note(leaves, cosigners=1))
    assert str(caught.value) == (
        "the server's checkpoint is not acceptable: checkpoint has 1 valid witness "
        "cosignature(s), 2 required; none from: w2.example"
    )
    assert fetch(state, leaves, cosigners=2)["0"]["runId"] == "run-0"
    assert str(state.no_cosigned_checkpoint()) == (
        "the service has no checkpoint cosigned by witnesses (2 required; none from: "
        "w1.example, w2.example)"
    )


def test_a_kept_checkpoint_must_verify_and_a_given_one_must_carry_valid_cosignatures() -> None:
    state = fresh(WitnessPolicy((WITNESSES[0][1],), threshold=1))
    with pytest.raises(TenantInputError, match=r"^kept checkpoint receipt does not verify: "):
        state.trust_kept_checkpoint(
            note([entry(0)]).replace("\n1\n", "\n2\n"), "receipt", given=True
        )
    forged = note([entry(0)]) + cosignature_line(WITNESSES[0][1], 1_700_000_000, b"\x00" * 64)
    with pytest.raises(TamperingError, match=r"^checkpoint receipt: "):
        state.trust_kept_checkpoint(forged, "receipt", given=True)
    assert state.trusted is None
    # A checkpoint the tenant's own fetch kept was cosigned when it was accepted.
    kept = state.trust_kept_checkpoint(forged, "checkpoint", given=False)
    assert kept == Checkpoint(ORIGIN, 1, root_of([entry(0)]))


def test_two_envelopes_for_one_run_or_shard_are_tampering_and_nothing_advances() -> None:
    leaves = [entry(0), entry(1), entry(0)]
    state = fresh()
    state.accept_checkpoint(note(leaves))
    state.new_entries_start()
    state.prove_entries(CompactRange(), enumerate(leaves))
    digest = LogEntry.from_bytes(leaves[0]).envelope
    with pytest.raises(TamperingError) as caught:
        state.record([None, None, None], NoKeptEnvelopes())
    assert str(caught.value) == (
        f"log entries 0 and 2 both publish run 'run-0' ({digest} and {digest}): the service "
        "never logs a second envelope for a run, so the run's envelope was replaced"
    )
    with pytest.raises(TamperingError, match=r"^log entries 0 and 2 both publish shard 1 of run"):
        state.record([1, None, 1], NoKeptEnvelopes())
    assert (state.trusted, state.index) == (None, {})


def test_a_kept_item_without_its_shard_is_read_from_the_kept_envelope() -> None:
    class Unreadable(NoKeptEnvelopes):
        def read(self, digest: str) -> bytes:
            raise OSError("gone")

    state = fresh()
    fetch(state, [entry(0)])
    old = state.index
    del old["0"]["shard"]
    state.adopt_index(old)
    state.accept_checkpoint(note([entry(0), entry(1)]))
    assert state.new_entries_start() == 1
    state.check_kept_edge(edge_of([entry(0)]), [])
    state.prove_entries(edge_of([entry(0)]), [(1, entry(1))])
    digest = LogEntry.from_bytes(entry(0)).envelope
    with pytest.raises(TenantInputError) as caught:
        state.record([None], Unreadable())
    assert str(caught.value) == f"kept envelope {digest} cannot be read: gone"


@given(data=st.binary(max_size=200))
def test_envelope_bytes_are_kept_only_when_they_are_the_ones_the_entry_names(data: bytes) -> None:
    named = LogEntry(TENANT, "run-0", sha256_digest(data))
    # Bytes that are no envelope but are the logged ones: kept as the whole run's.
    assert checked_envelope(data, named, 4, TENANT) is None
    other = LogEntry(TENANT, "run-0", sha256_digest(data + b"."))
    with pytest.raises(TamperingError) as caught:
        checked_envelope(data, other, 4, TENANT)
    assert str(caught.value) == f"envelope {other.envelope} (entry 4) has other bytes"


def test_an_envelope_larger_than_the_service_accepts_is_tampering() -> None:
    data = b" " * (MAX_ENVELOPE_BYTES + 1)
    named = LogEntry(TENANT, "run-0", sha256_digest(data))
    with pytest.raises(TamperingError) as caught:
        checked_envelope(data, named, 0, TENANT)
    assert str(caught.value) == (
        f"envelope {named.envelope} of log entry 0 exceeds {MAX_ENVELOPE_BYTES} bytes, which "
        "the service never accepts"
    )
