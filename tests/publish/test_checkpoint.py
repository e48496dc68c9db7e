"""C2SP signed-note checkpoints: format, key IDs, verification failures."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from attestation.transparency.checkpoint import (
    Checkpoint,
    CheckpointError,
    VerifierKey,
    parse_signed_note,
    verify_signed_checkpoint,
)
from runner.service.log.checkpoint import CheckpointSigner

# The example key and signed note from the documentation of Go's golang.org/x/mod/sumdb/note.
GO_NOTE_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_NOTE_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE_SIGNATURE = (
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
)
ROOT = hashlib.sha256(b"root").digest()


def test_key_id_and_signature_match_go_note_vector() -> None:
    key = VerifierKey.parse(GO_NOTE_KEY)
    assert key.name == "PeterNeumann"
    assert key.key_id.hex() == "c74f20a3"
    assert key.encode() == GO_NOTE_KEY
    blob = base64.b64decode(GO_NOTE_SIGNATURE)
    assert blob[:4] == key.key_id
    Ed25519PublicKey.from_public_bytes(key.public_key).verify(blob[4:], GO_NOTE_TEXT.encode())


def test_signed_checkpoint_exact_format() -> None:
    signer = CheckpointSigner("example.org/log", Ed25519PrivateKey.generate())
    note = signer.sign(Checkpoint("example.org/log/t/acme", 5, ROOT))
    body, signature_line = note.split("\n\n")
    assert body == f"example.org/log/t/acme\n5\n{base64.b64encode(ROOT).decode()}"
    dash, name, blob = signature_line.rstrip("\n").split(" ")
    assert (dash, name) == ("\u2014", "example.org/log")
    raw = base64.b64decode(blob)
    assert len(raw) == 4 + 64
    assert raw[:4] == signer.verifier_key.key_id
    checkpoint = verify_signed_checkpoint(
        note, signer.verifier_key, origin="example.org/log/t/acme"
    )
    assert checkpoint == Checkpoint("example.org/log/t/acme", 5, ROOT)


def test_unknown_cosignatures_are_ignored() -> None:
    log = CheckpointSigner("log", Ed25519PrivateKey.generate())
    witness = CheckpointSigner("witness", Ed25519PrivateKey.generate())
    checkpoint = Checkpoint("log/t/a", 1, ROOT)
    witness_line = witness.sign(checkpoint).split("\n\n")[1]
    note = (
        witness.sign(checkpoint).split("\n\n")[0]
        + "\n\n"
        + witness_line
        + log.sign(checkpoint).split("\n\n")[1]
    )
    assert verify_signed_checkpoint(note, log.verifier_key, origin="log/t/a") == checkpoint
    with pytest.raises(CheckpointError, match="no valid signature by the pinned key 'log'"):
        verify_signed_checkpoint(witness.sign(checkpoint), log.verifier_key, origin="log/t/a")


def test_verification_fails_closed() -> None:
    signer = CheckpointSigner("log", Ed25519PrivateKey.generate())
    other = CheckpointSigner("log", Ed25519PrivateKey.generate())
    note = signer.sign(Checkpoint("log/t/a", 3, ROOT))
    with pytest.raises(CheckpointError, match="no valid signature"):
        verify_signed_checkpoint(note, other.verifier_key, origin="log/t/a")
    with pytest.raises(CheckpointError, match="origin 'log/t/a', expected 'log/t/b'"):
        verify_signed_checkpoint(note, signer.verifier_key, origin="log/t/b")
    # A line with the pinned key's name and ID that fails rejects the note (C2SP signed-note).
    with pytest.raises(
        CheckpointError, match=r"^a signature by the pinned key 'log' does not verify$"
    ):
        verify_signed_checkpoint(
            note.replace("\n3\n", "\n4\n"), signer.verifier_key, origin="log/t/a"
        )
    with pytest.raises(CheckpointError, match="no blank line"):
        parse_signed_note("log/t/a\n3\n")
    with pytest.raises(CheckpointError, match="exactly 3 lines"):
        parse_signed_note("log/t/a\n3\nx\nextra\n\n\u2014 log AAAAAAA=\n")
    with pytest.raises(CheckpointError, match="not a decimal number"):
        parse_signed_note("log/t/a\n03\nAA==\n\n\u2014 log AAAAAAA=\n")
    with pytest.raises(CheckpointError, match="malformed signature line"):
        parse_signed_note(note.replace("\u2014", "-"))


def test_signing_key_created_once_with_private_mode(tmp_path: Path) -> None:
    key_file = tmp_path / "state" / "log-signing-key.pem"
    first = CheckpointSigner.load_or_create("log", key_file, create=True)
    assert key_file.stat().st_mode & 0o777 == 0o600
    second = CheckpointSigner.load_or_create("log", key_file, create=True)
    assert first.verifier_key == second.verifier_key
    with pytest.raises(CheckpointError, match="does not exist"):
        CheckpointSigner.load_or_create("log", tmp_path / "missing.pem", create=False)


def test_verifier_key_rejects_mismatched_id() -> None:
    name, _key_id, payload = GO_NOTE_KEY.split("+", 2)
    with pytest.raises(CheckpointError, match="key id does not match"):
        VerifierKey.parse(f"{name}+00000000+{payload}")
