"""Shard sets checked at publication: a part of a run must agree with the parts logged for it.

The log holds one envelope per (run ID, part) (:mod:`runner.publish.log`); this module refuses,
before the log, a part whose *kind* or *shard count* contradicts the parts already logged for
its run, so that a tenant never fetches a run it must call tampering:

* a shard envelope (``binding.shard`` = ``i`` of ``n``) beside shards of another count, beside
  an unsharded envelope of the run, or beside a merged envelope of another shard count;
* an unsharded envelope beside shard envelopes of the run;
* a merged envelope of ``n`` shards beside shard envelopes of another count.

Whether a merged envelope's shards are the logged shard envelopes is the tenant's check
(``attestation/tenant/logged_shards.py``), which needs the whole documents. Parts published at the
same moment are checked against what was logged before either: two contradicting parts that race
can both be logged, and ``tenant fetch`` still reports them (exit 7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from attestation.envelope.merged import AnyEnvelope, MergedEnvelope, parse_any_envelope
from attestation.errors import MalformedError
from runner.publish.storage import WHOLE_RUN, Storage


@dataclass(frozen=True, slots=True)
class _Shape:
    """What part of its run an envelope is: ``kind`` and, but for an unsharded envelope,
    the run's shard count."""

    kind: Literal["unsharded", "shard", "merged"]
    count: int | None
    index: int | None = None

    def describe(self) -> str:
        if self.kind == "shard":
            return f"shard {self.index} of {self.count}"
        if self.kind == "merged":
            return f"a merged envelope of {self.count} shards"
        return "an unsharded envelope"


def _shape(envelope: AnyEnvelope) -> _Shape:
    if isinstance(envelope, MergedEnvelope):
        return _Shape("merged", envelope.shard_count)
    shard = envelope.binding.shard
    if shard is None:
        return _Shape("unsharded", None)
    return _Shape("shard", shard.count, shard.index)


def shard_set_conflict(
    storage: Storage, tenant: str, envelope: AnyEnvelope, digest: str
) -> str | None:
    """Why ``envelope`` (of digest ``digest``) contradicts the parts logged for its run, or
    None when it does not (or is logged already: publishing it again is idempotent).

    An unsharded envelope of a run without shards, the common case, costs one query."""
    run_id = envelope.run_id
    new = _shape(envelope)
    logged_shards = storage.run_shards(tenant, run_id)
    if new.kind == "unsharded" and not logged_shards:
        return None
    if storage.envelope(tenant, digest) is not None:
        return None
    whole_digest = storage.run_digest(tenant, run_id, WHOLE_RUN)
    whole = None if whole_digest is None else _logged_shape(storage, tenant, whole_digest)
    others = [index for index in logged_shards if index != new.index]
    sibling = (
        _logged_shape(storage, tenant, storage.run_digest(tenant, run_id, str(others[0])))
        if others
        else None
    )
    if new.kind == "unsharded":
        listed = ", ".join(map(str, logged_shards))
        logged = f"shard envelopes (shards {listed})"
    elif new.kind == "shard" and whole is not None and whole.kind == "unsharded":
        logged = f"an unsharded envelope ({whole_digest})"
    elif new.kind == "shard" and whole is not None and whole.count != new.count:
        logged = f"{whole.describe()} ({whole_digest})"
    elif sibling is not None and sibling.count != new.count:
        logged = sibling.describe()
    else:
        return None
    return f"run {run_id!r} has {logged} logged; this envelope is {new.describe()}"


def _logged_shape(storage: Storage, tenant: str, digest: str | None) -> _Shape | None:
    """The shape of a logged envelope (None when it is not stored, or no longer parses: the
    tenant's checks report such an envelope, this check has nothing to compare)."""
    stored = None if digest is None else storage.envelope(tenant, digest)
    if stored is None:
        return None
    try:
        return _shape(parse_any_envelope(stored[0]))
    except MalformedError:
        return None
