"""Bearer tokens: 256-bit random secrets shown once; the service stores only SHA-256(token)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from runner.errors import UsageError
from runner.publish.storage import Role, Storage

TOKEN_PREFIX = "arp_"  # noqa: S105  # a recognisable prefix for secret scanners, not a secret


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_token(storage: Storage, tenant: str, role: Role) -> str:
    """Mint a token for ``tenant`` and ``role``; only its hash is stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    storage.add_token(hash_token(token), tenant, role)
    return token


def authenticate(storage: Storage, token: str) -> tuple[str, Role] | None:
    """The (tenant, role) of ``token``, or None when it is unknown."""
    presented = hash_token(token)
    found = storage.token_identity(presented)
    # The lookup is by hash; the constant-time comparison makes the final decision independent
    # of how the database compared strings.
    if found is None or not hmac.compare_digest(found[0], presented):
        return None
    return found[1], found[2]


def read_token(path: Path) -> str:
    """The one bearer token kept in ``path`` (a file or a mounted Secret key)."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"cannot read token file {path}: {exc}") from exc
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"token file {path} must hold exactly one token")
    return token
