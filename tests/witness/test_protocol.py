"""The witness's judgement of add-checkpoint requests (C2SP tlog-witness), each refusal with
the status the specification gives it, and its state across requests."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.transparency.checkpoint import Checkpoint, CheckpointError, VerifierKey
from attestation.transparency.cosignature import (
    CosignatureError,
    require_cosignatures,
    verify_cosignatures,
)
from runner.witness.cosigner import Cosigner
from runner.witness.protocol import (
    MAX_PROOF_LINES,
    WitnessRefusal,
    parse_add_checkpoint,
)
from runner.witness.server import Witness
from runner.witness.store import WitnessStore, origin_hash
from tests.witness.logs import Log


@pytest.fixture
def log() -> Log:
    return Log()


def make_witness(tmp_path: Path, log: Log, name: str = "witness.test/w1") -> Witness:
    cosigner = Cosigner(name, Ed25519PrivateKey.generate())
    store = WitnessStore(tmp_path / f"{name.replace('/', '_')}.sqlite3")
    return Witness(cosigner, store, {log.signer.verifier_key.name: log.signer.verifier_key})


def refusal(witness: Witness, body: bytes) -> WitnessRefusal:
    with pytest.raises(WitnessRefusal) as caught:
        witness.add_checkpoint(body)
    return caught.value


def test_a_growing_log_is_cosigned_and_the_cosignature_verifies(tmp_path: Path, log: Log) -> None:
    witness = make_witness(tmp_path, log)
    log.grow(3)
    line = witness.add_checkpoint(log.request(0))
    note = log.note() + line
    [cosignature] = require_cosignatures(note, [witness.cosigner.verifier_key], 1)
    assert cosignature.witness == witness.cosigner.verifier_key
    assert cosignature.timestamp > 1_700_000_000
    log.grow(5)
    line = witness.add_checkpoint(log.request(3))
    assert verify_cosignatures(log.note() + line, [witness.cosigner.verifier_key])
    assert witness.store.note(origin_hash(log.origin)) == log.note() + line


def test_the_same_checkpoint_again_is_cosigned_again(tmp_path: Path, log: Log) -> None:
    witness = make_witness(tmp_path, log)
    log.grow(4)
    witness.add_checkpoint(log.request(0))
    assert witness.add_checkpoint(log.request(4)).startswith("\u2014 witness.test/w1 ")


def test_an_old_size_that_is_not_the_cosigned_size_gets_409_and_that_size(
    tmp_path: Path, log: Log
) -> None:
    witness = make_witness(tmp_path, log)
    log.grow(4)
    witness.add_checkpoint(log.request(0))
    log.grow(2)
    stale = refusal(witness, log.request(0))  # a client that does not know the state
    assert (stale.status, stale.size) == (409, 4)
    # An old checkpoint of the same log, replayed: from the size cosigned it is no extension,
    # and from its own size it is not what the witness cosigned last.
    old_note = log.signer.sign(Checkpoint(log.origin, 2, log.tree.root(2)))
    replay = refusal(witness, f"old 4\n\n{old_note}".encode())
    assert (replay.status, str(replay)) == (400, "old size 4 exceeds the checkpoint size 2")
    assert refusal(witness, f"old 2\n\n{old_note}".encode()).size == 4


def test_a_split_view_of_one_size_is_refused_with_422(tmp_path: Path, log: Log) -> None:
    witness = make_witness(tmp_path, log)
    log.grow(4)
    witness.add_checkpoint(log.request(0))
    fork = Log()
    fork.signer = log.signer
    fork.origin = log.origin
    fork.grow(4, label="other")
    same_size = refusal(witness, fork.request(4))
    assert (same_size.status, str(same_size)) == (
        422,
        "another root for size 4, which this witness cosigned",
    )
    fork.grow(3, label="other")
    # A proof from the fork's own size-4 tree does not verify from the root cosigned.
    extended = refusal(witness, fork.request(4))
    assert extended.status == 422
    assert "does not extend the one this witness cosigned" in str(extended)


def test_unknown_logs_and_bad_signatures(tmp_path: Path, log: Log) -> None:
    witness = make_witness(tmp_path, log)
    stranger = Log(name="other.test")
    stranger.grow(1)
    assert refusal(witness, stranger.request(0)).status == 404
    impostor = Log()
    impostor.grow(1)  # same name and origin, another key: its key ID differs
    unsigned = refusal(witness, impostor.request(0))
    assert (unsigned.status, str(unsigned)) == (
        403,
        "the checkpoint carries no signature by the log key 'publish.test'",
    )
    log.grow(2)
    forged = log.note().replace(f"\n{log.tree.size}\n", "\n9\n")  # size changed, signature kept
    assert refusal(witness, f"old 0\n\n{forged}".encode()).status == 403


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\n\n", "request body is not UTF-8"),
        (b"old 1\n", "no empty line before the checkpoint"),
        (b"old 01\n\nx", "is not 'old <size>'"),
        (b"new 1\n\nx", "is not 'old <size>'"),
        (b"old 1\n!!!!\n\nx", "line 2: proof hash is not base64"),
        (b"old 1\nAAAA\n\nx", "line 2: proof hash has 3 bytes"),
        (b"old 0\n\norigin\n1\n", "checkpoint: signed note has no blank line"),
    ],
)
def test_malformed_bodies_get_400(body: bytes, message: str) -> None:
    with pytest.raises(WitnessRefusal) as caught:
        parse_add_checkpoint(body)
    assert caught.value.status == 400
    assert message in str(caught.value)


def test_more_than_63_proof_lines_get_400(log: Log) -> None:
    log.grow(1)
    node = base64.b64encode(bytes(32)).decode()
    body = ("old 1\n" + f"{node}\n" * (MAX_PROOF_LINES + 1) + "\n" + log.note()).encode()
    with pytest.raises(WitnessRefusal, match="more than 63 consistency proof lines"):
        parse_add_checkpoint(body)


def test_size_zero_rules(tmp_path: Path, log: Log) -> None:
    witness = make_witness(tmp_path, log)
    wrong_empty = log.signer.sign(Checkpoint(log.origin, 0, bytes(32)))
    assert refusal(witness, f"old 0\n\n{wrong_empty}".encode()).status == 422
    log.grow(2)
    node = base64.b64encode(bytes(32)).decode()
    with_proof = refusal(witness, f"old 0\n{node}\n\n{log.note()}".encode())
    assert (with_proof.status, str(with_proof)) == (
        422,
        "a consistency proof from size 0 must be empty",
    )


def test_concurrent_requests_never_roll_the_state_back(tmp_path: Path, log: Log) -> None:
    """Many requests from the same old size: exactly one is cosigned, the rest get 409."""
    witness = make_witness(tmp_path, log)
    log.grow(1)
    witness.add_checkpoint(log.request(0))
    bodies = []
    for _ in range(8):
        log.grow(1)
        bodies.append(log.request(1))
    outcomes: list[int] = []

    def submit(body: bytes) -> None:
        try:
            witness.add_checkpoint(body)
            outcomes.append(200)
        except WitnessRefusal as exc:
            outcomes.append(exc.status)

    threads = [threading.Thread(target=submit, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [200] + [409] * 7


def test_state_survives_reopening(tmp_path: Path, log: Log) -> None:
    witness = make_witness(tmp_path, log)
    log.grow(5)
    witness.add_checkpoint(log.request(0))
    witness.store.close()
    reopened = Witness(
        witness.cosigner, WitnessStore(tmp_path / "witness.test_w1.sqlite3"), witness.logs
    )
    assert refusal(reopened, log.request(0)).size == 5
    log.grow(1)
    reopened.add_checkpoint(log.request(5))


def test_a_pinned_witness_line_that_fails_rejects_the_note(tmp_path: Path, log: Log) -> None:
    witness = make_witness(tmp_path, log)
    log.grow(2)
    line = witness.add_checkpoint(log.request(0))
    blob = bytearray(base64.b64decode(line.split(" ")[2]))
    blob[-1] ^= 1
    bad = f"\u2014 witness.test/w1 {base64.b64encode(bytes(blob)).decode()}\n"
    with pytest.raises(CosignatureError, match="does not verify on checkpoint"):
        verify_cosignatures(log.note() + bad, [witness.cosigner.verifier_key])


def test_thresholds_name_the_missing_witnesses(tmp_path: Path, log: Log) -> None:
    first = make_witness(tmp_path, log, "witness.test/w1")
    second = make_witness(tmp_path, log, "witness.test/w2")
    log.grow(2)
    note = log.note() + first.add_checkpoint(log.request(0))
    keys = [first.cosigner.verifier_key, second.cosigner.verifier_key]
    assert len(require_cosignatures(note, keys, 1)) == 1
    with pytest.raises(
        CosignatureError,
        match=r"^checkpoint has 1 valid witness cosignature\(s\), 2 required; none from: "
        r"witness.test/w2$",
    ):
        require_cosignatures(note, keys, 2)
    with pytest.raises(CosignatureError, match="threshold 3 must be between 0 and the 2"):
        require_cosignatures(note, keys, 3)


def test_witness_and_log_keys_cannot_stand_for_each_other(log: Log) -> None:
    cosigner = Cosigner("witness.test/w1", Ed25519PrivateKey.generate())
    encoded = cosigner.verifier_key.encode()
    assert VerifierKey.parse(encoded, algorithm=0x04) == cosigner.verifier_key
    with pytest.raises(CheckpointError, match=r"is not an Ed25519 log key \(0x01 \|\| 32 bytes\)"):
        VerifierKey.parse(encoded)
    with pytest.raises(CosignatureError, match="is not a witness key"):
        verify_cosignatures(log.note(), [log.signer.verifier_key])
