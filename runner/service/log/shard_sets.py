"""Shard sets checked as the log places an envelope: a part of a run must agree with the parts
logged for it.

The log holds one envelope per (run ID, part) (:mod:`runner.service.log.sequencer`); this module
decides, inside the log's write transaction, whether a part's *kind* or *shard count*
contradicts the parts already logged for its run (or placed earlier in the same batch), so that
a tenant never fetches a run it must call tampering:

* a shard envelope (``binding.shard`` = ``i`` of ``n``) beside shards of another count, beside
  an unsharded envelope of the run, or beside a merged envelope of another shard count;
* an unsharded envelope beside shard envelopes of the run;
* a merged envelope of ``n`` shards beside shard envelopes of another count.

Whether a merged envelope's shards are the logged shard envelopes is the tenant's check
(``attestation/tenant/logged_shards.py``), which needs the whole documents. Being decided in the
log's transaction, two contradicting parts published at the same moment cannot both be logged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from attestation.envelope.merged import AnyEnvelope, MergedEnvelope, parse_any_envelope
from attestation.errors import MalformedError
from runner.service.log.storage import WHOLE_RUN


@dataclass(frozen=True, slots=True)
class PartShape:
    """What part of its run an envelope is: ``kind`` and, but for an unsharded envelope,
    the run's shard count."""

    kind: Literal["unsharded", "shard", "merged"]
    count: int | None
    index: int | None = None

    @property
    def part(self) -> str:
        """The run pointer's part: the shard index as text, or the whole run."""
        return WHOLE_RUN if self.index is None else str(self.index)

    def describe(self) -> str:
        if self.kind == "shard":
            return f"shard {self.index} of {self.count}"
        if self.kind == "merged":
            return f"a merged envelope of {self.count} shards"
        return "an unsharded envelope"


def part_shape(envelope: AnyEnvelope) -> PartShape:
    if isinstance(envelope, MergedEnvelope):
        return PartShape("merged", envelope.shard_count)
    shard = envelope.binding.shard
    if shard is None:
        return PartShape("unsharded", None)
    return PartShape("shard", shard.count, shard.index)


def stored_shape(data: bytes) -> PartShape | None:
    """The shape of a logged envelope's bytes (None when they no longer parse: the tenant's
    checks report such an envelope, this check has nothing to compare)."""
    try:
        return part_shape(parse_any_envelope(data))
    except MalformedError:
        return None


def shard_set_conflict(
    run_id: str,
    new: PartShape,
    parts: Mapping[str, str],
    shape_of: Callable[[str], PartShape | None],
) -> str | None:
    """Why a new envelope of shape ``new`` contradicts the logged ``parts`` of its run (part
    -> envelope digest; ``shape_of`` reads a logged digest's shape), or None when it does not.

    An unsharded envelope of a run without shards, the common case, reads no envelope."""
    shards = sorted(int(part) for part in parts if part != WHOLE_RUN)
    if new.kind == "unsharded" and not shards:
        return None
    whole_digest = parts.get(WHOLE_RUN)
    whole = None if whole_digest is None else shape_of(whole_digest)
    others = [index for index in shards if index != new.index]
    sibling = shape_of(parts[str(others[0])]) if others else None
    if new.kind == "unsharded":
        listed = ", ".join(map(str, shards))
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
