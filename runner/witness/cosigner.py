"""The witness's key: Ed25519 ``cosignature/v1`` lines (C2SP tlog-cosignature)."""

from __future__ import annotations

import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.transparency.checkpoint import (
    COSIGNATURE_V1_ALGORITHM,
    Checkpoint,
    VerifierKey,
    check_key_name,
)
from attestation.transparency.cosignature import cosignature_line, cosigned_message
from runner.service.log.checkpoint import load_or_create_ed25519


class Cosigner:
    """A witness's Ed25519 key under its name; its verifier key has signature type 0x04."""

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        check_key_name(name)
        self._private_key = private_key
        public = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.verifier_key = VerifierKey(
            name=name, public_key=public, algorithm=COSIGNATURE_V1_ALGORITHM
        )

    @classmethod
    def load_or_create(cls, name: str, key_file: Path, *, create: bool) -> Cosigner:
        return cls(name, load_or_create_ed25519(key_file, what="witness key", create=create))

    def cosign(self, checkpoint: Checkpoint, timestamp: int | None = None) -> str:
        """The cosignature line (newline included) over ``checkpoint`` at ``timestamp``
        (POSIX seconds; now unless given)."""
        when = int(time.time()) if timestamp is None else timestamp
        signature = self._private_key.sign(cosigned_message(checkpoint, when))
        return cosignature_line(self.verifier_key, when, signature)
