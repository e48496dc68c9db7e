"""Tenant side: a run's merged envelope must hold exactly the shard envelopes the log has.

The pods of a sharded run publish their shard envelopes and the operator publishes the
merged envelope beside them (docs/scale.md). The log commits to both, so when it holds the
merged envelope of a run and shard ``i`` of that run, the merged envelope's shard ``i`` is
that logged shard envelope: anything else means the operator handed the tenant one set of
evidence in the log and another in the merged envelope. Likewise an unsharded envelope of a
run never stands beside shard envelopes of it: a run is sharded or not (the service keeps one
envelope per run and part, and an unsharded envelope is the whole-run part, so it would
accept both).

"Is" means the same JSON document (RFC 8785 bytes of the parsed envelopes), not the same
bytes: the merged envelope re-serializes its shards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from attestation.envelope.merged import MergedEnvelope, parse_any_envelope
from attestation.envelope.model import Envelope
from attestation.errors import MalformedError
from attestation.tenant.errors import TamperingError, TenantInputError

#: The bytes of a stored envelope, by its digest.
ReadEnvelope = Callable[[str], bytes]


def check_logged_shards(
    index: Mapping[str, Any], new_positions: Iterable[int], read: ReadEnvelope
) -> None:
    """Tampering when a run with a new log entry has a whole-run envelope (merged or
    unsharded) and shard envelopes that disagree with it.

    ``index`` maps log positions to ``{"digest", "runId", "shard"}`` (shard None for a whole
    run), already checked to hold one envelope per run and part. Only runs that gained an
    entry are read again: older runs were checked when their last entry came.
    """
    runs = {str(index[str(position)]["runId"]) for position in new_positions}
    whole: dict[str, tuple[int, str]] = {}
    shards: dict[str, dict[int, tuple[int, str]]] = {}
    for position, item in index.items():
        run_id = str(item["runId"])
        if run_id not in runs:
            continue
        entry = (int(position), str(item["digest"]))
        if item["shard"] is None:
            whole[run_id] = entry
        else:
            shards.setdefault(run_id, {})[int(item["shard"])] = entry
    for run_id in sorted(shards.keys() & whole.keys()):
        _check_run(run_id, whole[run_id], shards[run_id], read)


def _check_run(
    run_id: str,
    whole: tuple[int, str],
    logged: Mapping[int, tuple[int, str]],
    read: ReadEnvelope,
) -> None:
    position, digest = whole
    envelope = _parsed(read, digest)
    if not isinstance(envelope, MergedEnvelope):
        first = min(logged)
        raise TamperingError(
            f"log entry {position} publishes run {run_id!r} unsharded ({digest}) and log "
            f"entry {logged[first][0]} publishes shard {first} of it ({logged[first][1]}): a "
            "run is sharded or not, so one of them is not the run's evidence"
        )
    held = {
        shard.binding.shard.index: shard
        for shard in envelope.shards
        if shard.binding.shard is not None
    }
    for index in sorted(logged):
        shard_position, shard_digest = logged[index]
        mine = held.get(index)
        if mine is None:
            raise TamperingError(
                f"log entry {shard_position} publishes shard {index} of run {run_id!r} "
                f"({shard_digest}), and the run's merged envelope (log entry {position}, "
                f"{digest}) holds no shard {index}"
            )
        theirs = _parsed(read, shard_digest)
        if not isinstance(theirs, Envelope) or mine.canonical_bytes() != theirs.canonical_bytes():
            raise TamperingError(
                f"the merged envelope of run {run_id!r} (log entry {position}, {digest}) "
                f"holds another shard {index} than the one log entry {shard_position} "
                f"publishes ({shard_digest}): the merged result does not rest on the logged "
                "shard evidence"
            )


def _parsed(read: ReadEnvelope, digest: str) -> Envelope | MergedEnvelope:
    try:
        return parse_any_envelope(read(digest))
    except (OSError, MalformedError) as exc:
        raise TenantInputError(f"kept envelope {digest} cannot be read: {exc}") from exc
