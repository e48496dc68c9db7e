"""The envelopes of a run of log entries in one answer (``GET .../log/envelopes``).

A tenant fetching thousands of envelopes would otherwise make one request per envelope, and
on both sides the request costs more than the envelope. The answer is bounded in count (the
route takes at most ``MAX_PAGE`` entries) and in bytes: envelopes are added in log order while
their total stays within :data:`MAX_BUNDLE_BYTES`; the first is always included, so an
envelope of up to ``MAX_ENVELOPE_BYTES`` is still served, alone. The client asks again from
where the answer stopped.

The service is not trusted here either: the tenant has proven the entries against the signed
checkpoint and checks each envelope's SHA-256 against its entry.
"""

from __future__ import annotations

from typing import Final

from attestation.transparency.entries import LogEntry
from runner.service.log.storage import Storage

#: Envelope bytes in one answer beyond its first envelope (base64 adds a third on the wire).
MAX_BUNDLE_BYTES: Final = 4 * 1024 * 1024


def read_bundle(storage: Storage, tenant: str, start: int, end: int) -> list[bytes | None]:
    """The stored envelopes of ``tenant``'s log entries ``start`` to ``end - 1`` (the caller
    caps ``end`` at the signed head) in log order, ``None`` for one that is not stored,
    stopping before the total would exceed :data:`MAX_BUNDLE_BYTES`.

    Envelopes are read one at a time so that at most one beyond the bound is ever held."""
    bundle: list[bytes | None] = []
    total = 0
    for raw in storage.log_entries(tenant, start, end):
        stored = storage.envelope(tenant, LogEntry.from_bytes(raw).envelope)
        data = None if stored is None else stored[0]
        size = 0 if data is None else len(data)
        if bundle and total + size > MAX_BUNDLE_BYTES:
            break
        bundle.append(data)
        total += size
    return bundle
