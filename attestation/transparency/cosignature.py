"""Witness cosignatures on checkpoints (C2SP tlog-cosignature, Ed25519 ``cosignature/v1``).

A cosignature is one more signature line on a log's signed note, by a witness's key of
signature type 0x04 (:data:`COSIGNATURE_V1_ALGORITHM`)::

    — <witness name> base64(key ID (4) || timestamp (8, big-endian) || Ed25519 signature (64))

signed over ``cosignature/v1\\ntime <timestamp>\\n`` followed by the checkpoint's note text. It
states that, at that time, this was the largest tree the witness had seen of the log and it
was consistent with everything the witness saw before. A tenant that requires cosignatures
by T pinned witnesses is shown a split view only if those witnesses collude.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from attestation.transparency.checkpoint import (
    COSIGNATURE_V1_ALGORITHM,
    EM_DASH,
    Checkpoint,
    CheckpointError,
    VerifierKey,
    parse_signed_note,
)

COSIGNATURE_HEADER: Final = "cosignature/v1"
#: key ID || u64 timestamp || Ed25519 signature.
COSIGNATURE_SIZE: Final = 4 + 8 + 64
#: The largest timestamp a cosignature may carry (tlog-cosignature: at most 2^63 - 1).
MAX_TIMESTAMP: Final = (1 << 63) - 1
_TIMESTAMP: Final = struct.Struct(">Q")


class CosignatureError(CheckpointError):
    """A cosignature that is malformed, fails to verify, or is missing where required."""


@dataclass(frozen=True, slots=True)
class Cosignature:
    """A verified cosignature: which pinned witness, and the time it states."""

    witness: VerifierKey
    timestamp: int


def cosigned_message(checkpoint: Checkpoint, timestamp: int) -> bytes:
    """The bytes an Ed25519 ``cosignature/v1`` signs."""
    if not 0 < timestamp <= MAX_TIMESTAMP:
        raise CosignatureError(f"cosignature timestamp {timestamp} is outside 1..2^63-1")
    header = f"{COSIGNATURE_HEADER}\ntime {timestamp}\n"
    return (header + checkpoint.note_text()).encode()


def cosignature_line(witness: VerifierKey, timestamp: int, signature: bytes) -> str:
    """One note signature line (newline included) of a witness's cosignature."""
    blob = witness.key_id + _TIMESTAMP.pack(timestamp) + signature
    return f"{EM_DASH} {witness.name} {base64.b64encode(blob).decode()}\n"


def verify_cosignatures(note: str, witnesses: Sequence[VerifierKey]) -> list[Cosignature]:
    """The valid cosignatures in ``note`` by the pinned ``witnesses``, each at most once.

    Lines by other keys (the log's own, unknown witnesses) are ignored, as C2SP requires. A
    line that names a pinned witness and carries its key ID but does not verify makes the note
    malformed (C2SP signed-note): :class:`CosignatureError`. The log's own signature is
    checked by :func:`~attestation.transparency.checkpoint.verify_signed_checkpoint`.
    """
    for witness in witnesses:
        if witness.algorithm != COSIGNATURE_V1_ALGORITHM:
            raise CosignatureError(
                f"key {witness.name!r} is not a witness key (signature type 0x04)"
            )
    checkpoint, signatures = parse_signed_note(note)
    by_identity = {(w.name, w.key_id): w for w in witnesses}
    found: dict[tuple[str, bytes], Cosignature] = {}
    for name, blob in signatures:
        pinned = by_identity.get((name, blob[:4]))
        if pinned is None:
            continue
        if len(blob) != COSIGNATURE_SIZE:
            raise CosignatureError(
                f"cosignature by witness {name!r} has {len(blob)} bytes, not {COSIGNATURE_SIZE}"
            )
        (timestamp,) = _TIMESTAMP.unpack(blob[4:12])
        try:
            message = cosigned_message(checkpoint, timestamp)
            Ed25519PublicKey.from_public_bytes(pinned.public_key).verify(blob[12:], message)
        except InvalidSignature as exc:
            raise CosignatureError(
                f"cosignature by witness {name!r} does not verify on checkpoint "
                f"{checkpoint.origin} size {checkpoint.size}"
            ) from exc
        found.setdefault((name, pinned.key_id), Cosignature(pinned, timestamp))
    return list(found.values())


def require_cosignatures(
    note: str, witnesses: Sequence[VerifierKey], threshold: int
) -> list[Cosignature]:
    """At least ``threshold`` valid cosignatures by distinct pinned witnesses, or
    :class:`CosignatureError` naming the witnesses whose cosignature is missing."""
    if not 0 <= threshold <= len(witnesses):
        raise CosignatureError(
            f"witness threshold {threshold} must be between 0 and the {len(witnesses)} "
            "pinned witness key(s)"
        )
    valid = verify_cosignatures(note, witnesses)
    if len(valid) < threshold:
        cosigned = {c.witness for c in valid}
        missing = ", ".join(w.name for w in witnesses if w not in cosigned)
        raise CosignatureError(
            f"checkpoint has {len(valid)} valid witness cosignature(s), {threshold} required; "
            f"none from: {missing}"
        )
    return valid
