"""A log to witness: entries, signed checkpoints and consistency proofs, made with the
publication service's own tree and signer."""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.transparency.checkpoint import Checkpoint, tenant_log_origin
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.merkle import MerkleTree


class Log:
    """One tenant's log of a publication service named ``name``."""

    def __init__(self, name: str = "publish.test", tenant: str = "acme") -> None:
        self.signer = CheckpointSigner(name, Ed25519PrivateKey.generate())
        self.origin = tenant_log_origin(name, tenant)
        self.tree = MerkleTree()

    def grow(self, count: int, label: str = "entry") -> None:
        for _ in range(count):
            self.tree.append_entry(f"{label}-{self.tree.size}".encode())

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.origin, self.tree.size, self.tree.root(self.tree.size))

    def note(self) -> str:
        return self.signer.sign(self.checkpoint())

    def request(self, old_size: int, *, note: str | None = None) -> bytes:
        """An add-checkpoint body from ``old_size`` to the current size."""
        proof = (
            self.tree.consistency_proof(old_size, self.tree.size)
            if 0 < old_size < self.tree.size
            else []
        )
        lines = [f"old {old_size}", *(base64.b64encode(node).decode() for node in proof)]
        return ("\n".join(lines) + "\n\n" + (note or self.note())).encode()
