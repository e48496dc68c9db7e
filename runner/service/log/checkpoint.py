"""The publication log's checkpoint signer (C2SP signed notes with Ed25519).

The note format, verifier keys and signature verification are the tenant's, in
:mod:`attestation.transparency.checkpoint`; this module holds only the log's private key.
"""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.tenant.fsutil import atomic_write
from attestation.transparency.checkpoint import (
    EM_DASH,
    Checkpoint,
    CheckpointError,
    VerifierKey,
    check_key_name,
)


class CheckpointSigner:
    """The log's Ed25519 signing key under a key name."""

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        check_key_name(name)
        self.name = name
        self._private_key = private_key
        public = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.verifier_key = VerifierKey(name=name, public_key=public)

    def sign(self, checkpoint: Checkpoint) -> str:
        """The signed note: text, blank line, signature line."""
        text = checkpoint.note_text()
        signature = self._private_key.sign(text.encode())
        blob = base64.b64encode(self.verifier_key.key_id + signature).decode()
        return f"{text}\n{EM_DASH} {self.name} {blob}\n"

    @classmethod
    def load_or_create(cls, name: str, key_file: Path, *, create: bool) -> CheckpointSigner:
        """Load a PKCS#8 PEM Ed25519 key, or generate one (mode 0600) when allowed and absent."""
        return cls(name, load_or_create_ed25519(key_file, what="log signing key", create=create))


def load_or_create_ed25519(key_file: Path, *, what: str, create: bool) -> Ed25519PrivateKey:
    """A PKCS#8 PEM Ed25519 private key from ``key_file``, generated (mode 0600) when allowed
    and absent; ``what`` names the key in errors."""
    if not key_file.exists():
        if not create:
            raise CheckpointError(f"{what} {key_file} does not exist")
        new_key = Ed25519PrivateKey.generate()
        pem = new_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        atomic_write(key_file, pem, mode=0o600)
    try:
        loaded = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{what} {key_file} is not a PEM private key: {exc}") from exc
    if not isinstance(loaded, Ed25519PrivateKey):
        raise CheckpointError(f"{what} {key_file} is not an Ed25519 key")
    return loaded
