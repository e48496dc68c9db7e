"""Bearer tokens: 256-bit random secrets shown once; the service stores only SHA-256(token).

A token's id is the first :data:`ID_HEX` hex digits of its hash: the audit log names tokens
by it and ``token revoke --id`` takes it. Revocation marks the row (kept for the audit
trail). The service caches valid tokens for :data:`CACHE_SECONDS`, so a revoked token stops
working within that time on every process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from runner.service.log.storage import Role, Storage, TokenRecord

TOKEN_PREFIX: Final = "arp_"  # noqa: S105 - a prefix for secret scanners, not a secret
CACHE_SECONDS: Final = 2.0
CACHE_ENTRIES: Final = 10_000
#: Hex digits of the hash that name a token (48 bits: no two tokens share one by accident).
ID_HEX: Final = 12


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_id(token_hash: str) -> str:
    return token_hash[:ID_HEX]


def create_token(storage: Storage, tenant: str, role: Role) -> str:
    """Mint a token for ``tenant`` and ``role``; only its hash is stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    storage.add_token(hash_token(token), tenant, role)
    return token


def authenticate(storage: Storage, token: str) -> TokenRecord | None:
    """The record of ``token`` when it is known and not revoked."""
    return _valid(storage.token(hash_token(token)), hash_token(token))


def _valid(record: TokenRecord | None, presented: str) -> TokenRecord | None:
    # The lookup is by hash; the constant-time comparison makes the final decision independent
    # of how the database compared strings.
    if record is None or record.revoked_at is not None:
        return None
    return record if hmac.compare_digest(record.token_hash, presented) else None


class TokenCache:
    """Recently seen valid tokens, by hash. Unknown hashes always go to storage and are not
    cached, so a flood of guesses can neither evict real entries nor grow the cache."""

    def __init__(self, storage: Storage, clock: Callable[[], float] = time.monotonic) -> None:
        self._storage = storage
        self._clock = clock
        self._entries: OrderedDict[str, tuple[TokenRecord, float]] = OrderedDict()
        self._lock = threading.Lock()

    def cached(self, token_hash: str) -> TokenRecord | None:
        """The record when it was looked up less than :data:`CACHE_SECONDS` ago."""
        now = self._clock()
        with self._lock:
            found = self._entries.get(token_hash)
            if found is not None and now - found[1] < CACHE_SECONDS:
                return found[0]
        return None

    def lookup(self, token_hash: str) -> TokenRecord | None:
        """The valid token with this hash, from the cache or storage (blocking)."""
        record = self.cached(token_hash)
        if record is not None:
            return record
        record = _valid(self._storage.token(token_hash), token_hash)
        with self._lock:
            if record is None:
                self._entries.pop(token_hash, None)
                return None
            self._entries[token_hash] = (record, self._clock())
            self._entries.move_to_end(token_hash)
            while len(self._entries) > CACHE_ENTRIES:
                self._entries.popitem(last=False)
        return record
