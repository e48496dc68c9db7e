"""C2SP tlog-checkpoint signed notes with Ed25519 (C2SP signed-note.md, tlog-checkpoint.md).

Note text: ``<origin>\\n<tree size>\\n<base64 root hash>\\n``; then a blank line and one line per
signature, ``\\u2014 <key name> <base64(4-byte key ID || signature)>``. The Ed25519 key ID is
``SHA-256(name || 0x0A || 0x01 || public key)[:4]``. Public keys travel as verifier keys
``<name>+<hex key ID>+<base64(0x01 || public key)>`` (the Go ``note`` package format).
Verification ignores signatures by other keys (witness cosignatures) and fails closed when
none by the pinned key is valid. The log's signer is ``runner.service.log.checkpoint``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from attestation.transparency.merkle import HASH_SIZE

ED25519_ALGORITHM = 0x01
#: The signature type of an Ed25519 witness cosignature (C2SP tlog-cosignature, cosignature/v1).
COSIGNATURE_V1_ALGORITHM = 0x04
#: What each signature type of a verifier key is for, in the messages that name it.
KEY_KINDS = {
    ED25519_ALGORITHM: "an Ed25519 log key",
    COSIGNATURE_V1_ALGORITHM: "an Ed25519 witness key",
}
EM_DASH = "\u2014"
_KEY_NAME = re.compile(r"^[^\s+]+$")
_DECIMAL = re.compile(r"^(0|[1-9][0-9]{0,19})$")


class CheckpointError(ValueError):
    """A checkpoint or verifier key that is malformed or not signed by the pinned key."""


def tenant_log_origin(log_name: str, tenant: str) -> str:
    """The origin line of a tenant's log in the publication service whose key is ``log_name``."""
    return f"{log_name}/t/{tenant}"


def key_id(name: str, public_key: bytes, algorithm: int = ED25519_ALGORITHM) -> bytes:
    return hashlib.sha256(name.encode() + b"\x0a" + bytes([algorithm]) + public_key).digest()[:4]


def check_key_name(name: str) -> None:
    if not _KEY_NAME.fullmatch(name):
        raise CheckpointError(f"key name {name!r} must be non-empty, without spaces or '+'")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin:
            raise CheckpointError("checkpoint origin must be one non-empty line")
        if self.size < 0:
            raise CheckpointError(f"checkpoint size {self.size} is negative")
        if len(self.root) != HASH_SIZE:
            raise CheckpointError(f"checkpoint root has {len(self.root)} bytes, not {HASH_SIZE}")

    def note_text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"


@dataclass(frozen=True, slots=True)
class VerifierKey:
    """A C2SP verifier key: a log's (signature type 0x01, signed notes) or a witness's
    (0x04, cosignature/v1). The type is part of the key ID, so one cannot stand for the other."""

    name: str
    public_key: bytes
    algorithm: int = ED25519_ALGORITHM

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if len(self.public_key) != 32:
            raise CheckpointError("an Ed25519 public key has 32 bytes")
        if self.algorithm not in KEY_KINDS:
            raise CheckpointError(f"verifier key signature type {self.algorithm:#04x} is unknown")

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public_key, self.algorithm)

    def encode(self) -> str:
        payload = base64.b64encode(bytes([self.algorithm]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{payload}"

    @classmethod
    def parse(cls, text: str, *, algorithm: int = ED25519_ALGORITHM) -> VerifierKey:
        """A verifier key of the signature type ``algorithm`` (a log key unless told)."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise CheckpointError("verifier key must be <name>+<hex key id>+<base64 key>")
        name, hex_id, payload = parts
        try:
            raw = base64.b64decode(payload, validate=True)
            wanted_id = bytes.fromhex(hex_id)
        except (binascii.Error, ValueError) as exc:
            raise CheckpointError(f"verifier key is not valid hex/base64: {exc}") from exc
        if len(raw) != 33 or raw[0] != algorithm:
            raise CheckpointError(
                f"verifier key is not {KEY_KINDS[algorithm]} ({algorithm:#04x} || 32 bytes)"
            )
        key = cls(name=name, public_key=raw[1:], algorithm=algorithm)
        if key.key_id != wanted_id:
            raise CheckpointError("verifier key id does not match its name and public key")
        return key


def parse_signed_note(note: str) -> tuple[Checkpoint, list[tuple[str, bytes]]]:
    """Split a signed checkpoint into its body and (key name, key id || signature) pairs.

    Raises :class:`CheckpointError` naming the malformed part.
    """
    text, separator, signature_block = note.partition("\n\n")
    if not separator:
        raise CheckpointError("signed note has no blank line before its signatures")
    lines = text.split("\n")
    if len(lines) != 3:
        raise CheckpointError(
            f"checkpoint body must have exactly 3 lines (origin, size, root), got {len(lines)}"
        )
    origin, size_text, root_text = lines
    if not _DECIMAL.fullmatch(size_text):
        raise CheckpointError(f"checkpoint size {size_text!r} is not a decimal number")
    try:
        root = base64.b64decode(root_text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CheckpointError(f"checkpoint root is not base64: {exc}") from exc
    checkpoint = Checkpoint(origin=origin, size=int(size_text), root=root)
    if not signature_block.endswith("\n"):
        raise CheckpointError("signed note must end with a newline")
    signatures: list[tuple[str, bytes]] = []
    for line in signature_block[:-1].split("\n"):
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != EM_DASH:
            raise CheckpointError(f"malformed signature line {line!r}")
        try:
            blob = base64.b64decode(parts[2], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CheckpointError(f"signature line for {parts[1]!r} is not base64") from exc
        if len(blob) < 5:
            raise CheckpointError(f"signature line for {parts[1]!r} is too short")
        signatures.append((parts[1], blob))
    if not signatures:
        raise CheckpointError("signed note carries no signature")
    return checkpoint, signatures


def signed_by(
    checkpoint: Checkpoint, signatures: list[tuple[str, bytes]], key: VerifierKey
) -> bool:
    """Whether one of ``signatures`` (from :func:`parse_signed_note`) is a valid signature by
    the log key ``key`` over ``checkpoint``.

    Lines by other keys are ignored, even when they share the name or the key ID (not both);
    a line with ``key``'s name and key ID that does not verify rejects the whole note
    (C2SP signed-note: :class:`CheckpointError`).
    """
    if key.algorithm != ED25519_ALGORITHM:
        raise CheckpointError(f"key {key.name!r} is not a log key (signature type 0x01)")
    public = Ed25519PublicKey.from_public_bytes(key.public_key)
    message = checkpoint.note_text().encode()
    verified = False
    for name, blob in signatures:
        if name != key.name or blob[:4] != key.key_id:
            continue  # another key (a witness, a rotated key): ignored, as C2SP requires
        try:
            public.verify(blob[4:], message)
        except InvalidSignature as exc:
            raise CheckpointError(
                f"a signature by the pinned key {key.name!r} does not verify"
            ) from exc
        verified = True
    return verified


def verify_signed_checkpoint(note: str, key: VerifierKey, *, origin: str) -> Checkpoint:
    """Parse ``note`` and require a valid signature by ``key`` and the expected ``origin``."""
    checkpoint, signatures = parse_signed_note(note)
    if checkpoint.origin != origin:
        raise CheckpointError(f"checkpoint origin {checkpoint.origin!r}, expected {origin!r}")
    if not signed_by(checkpoint, signatures, key):
        raise CheckpointError(
            f"checkpoint carries no valid signature by the pinned key {key.name!r}"
        )
    return checkpoint
