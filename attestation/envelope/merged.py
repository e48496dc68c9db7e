"""The merged envelope: one sharded replay's N shard envelopes and the report they merge to.

The operator builds it (``attested-replay merge``); nothing in it is trusted for itself. The
verifier checks every shard envelope as an envelope of its own (report, chain, binding),
checks that the shards are exactly shards 0..N-1 of one replay, checks each run's p95 against
the shards' attested latency-tail roots by ``tailOpenings`` (a shard envelope carries its
tail's Merkle root, not its latencies: ``attestation.scoring.tails``), re-runs the merge
with the same code as the replay (``attestation.scoring.shards``) and compares the result
with ``result`` and ``resultDigest``; then the tenant's expectations apply to the header. The
header repeats what every shard binds (run, tenant, corpus, evaluation, workload, image,
nonce), so expected values written for an unsharded run apply unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import Field, JsonValue

from attestation.contracts import (
    MAX_ENVELOPE_BYTES,
    MAX_ENVELOPE_JSON_ITEMS,
    MAX_PLAN_RUNS,
    MAX_SHARD_COUNT,
    Nonce,
    RunId,
    Sha256Digest,
    TenantId,
    WireModel,
)
from attestation.encoding.json_document import (
    json_item_bound,
    validate_document,
)
from attestation.envelope.binding import result_digest
from attestation.envelope.model import (
    API_VERSION,
    ENVELOPE_KIND,
    Envelope,
    Workload,
    load_envelope_object,
    validate_parsed_envelope,
)
from attestation.errors import MalformedError
from attestation.scoring.shards import (
    CheckedShard,
    RunTailOpenings,
    ShardMergeError,
    check_complete,
    check_shard_result,
    merge_shard_results,
    parse_shard_result,
)

MERGED_ENVELOPE_KIND: Final = "MergedAttestationEnvelope"

#: The binding fields every shard of one replay shares with the merged header.
SHARED_FIELDS: Final = (
    "run_id",
    "tenant",
    "corpus_checksum",
    "evaluation_digest",
    "workload",
    "image_digest",
    "nonce",
)


class MergedEnvelope(WireModel):
    """Merged attestation envelope v1: a sharded replay's shards and their merged report."""

    api_version: Literal["attested-replay.dev/v1"]
    kind: Literal["MergedAttestationEnvelope"]
    run_id: RunId
    tenant: TenantId
    shard_count: Annotated[int, Field(strict=True, ge=1, le=MAX_SHARD_COUNT)]
    corpus_checksum: Sha256Digest
    evaluation_digest: Sha256Digest
    workload: Workload
    #: ``sha256:`` of JCS(the merged report): the same digest an unsharded run binds.
    result_digest: Sha256Digest
    nonce: Nonce | None = None
    image_digest: Sha256Digest | None = None
    #: The merged evaluation report (omitted: recomputed from the shards and checked
    #: against ``resultDigest`` all the same).
    result: dict[str, JsonValue] | None = None
    #: The shard envelopes, shard 0 first; each carries its shard result.
    shards: Annotated[tuple[Envelope, ...], Field(min_length=1, max_length=MAX_SHARD_COUNT)]
    #: Each run's p95 with every shard's tail opened at it, for the runs whose latencies are
    #: all known, in plan order (``attestation.scoring.shards.proven_p95s``).
    tail_openings: Annotated[tuple[RunTailOpenings, ...], Field(max_length=MAX_PLAN_RUNS)] = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object (``tailOpenings`` omitted when empty: no run has a p95)."""
        document = super().to_json_dict()
        if not self.tail_openings:
            document.pop("tailOpenings", None)
        return document


AnyEnvelope = Envelope | MergedEnvelope


def shard_index(envelope: AnyEnvelope) -> int | None:
    """Which part of its run an envelope stands for: a shard envelope its shard's index, an
    unsharded or merged envelope the whole run (None). A publication log holds at most one
    envelope per (run ID, part)."""
    if isinstance(envelope, MergedEnvelope) or envelope.binding.shard is None:
        return None
    return envelope.binding.shard.index


def parse_any_envelope(data: bytes) -> AnyEnvelope:
    """An envelope of either kind from its JSON bytes, as strictly as :func:`parse_envelope`
    (:func:`~attestation.envelope.model.load_envelope_object`: size, values and nesting
    bounded before parsing; strict JSON; camelCase keys only); ``kind`` decides.

    Raises:
        MalformedError: naming what is wrong.
    """
    return any_envelope(load_envelope_object(data))


def any_envelope(document: dict[str, object]) -> AnyEnvelope:
    """:func:`parse_any_envelope` of the envelope's parsed JSON object.

    Raises:
        MalformedError: naming what is wrong.
    """
    kind = document.get("kind")
    if kind == MERGED_ENVELOPE_KIND:
        return validate_document(document, MergedEnvelope, what="merged envelope")
    if kind == ENVELOPE_KIND:
        return validate_parsed_envelope(document, what="envelope")
    if "kind" not in document:
        raise MalformedError(
            f"envelope has no 'kind' (it must be {ENVELOPE_KIND!r} or {MERGED_ENVELOPE_KIND!r})"
        )
    raise MalformedError(
        f"envelope kind {str(kind)[:60]!r} is neither {ENVELOPE_KIND!r} nor "
        f"{MERGED_ENVELOPE_KIND!r}"
    )


def consistency_problem(merged: MergedEnvelope) -> str | None:
    """Why the shard envelopes are not one sharded replay under this header, or None.

    Each shard must be bound as shard ``i`` of ``shardCount`` (listed in index order, each
    once), bind the header's run, tenant, corpus, evaluation, workload, image and nonce, and
    come from the same launch (MEASUREMENT and HOST_DATA equal across shards: one Job, one
    init-data) on one platform (all ``sev-snp`` or all ``simulated``: the label the
    verifier checks against each shard's chain).
    """
    first = merged.shards[0]
    for position, shard in enumerate(merged.shards):
        bound = shard.binding.shard
        where = f"shards[{position}]"
        if bound is None:
            return f"{where} is the envelope of a whole run, not of a shard"
        if bound.count != merged.shard_count:
            return (
                f"{where} is shard {bound.index} of {bound.count}, the merged envelope has "
                f"{merged.shard_count} shards"
            )
        for field in SHARED_FIELDS:
            mine, theirs = getattr(shard.binding, field), getattr(merged, field)
            if mine != theirs:
                return (
                    f"{where} (shard {bound.index}) binds {field} {_shown(mine)}, the merged "
                    f"envelope says {_shown(theirs)}: it is not a shard of this run"
                )
        if (shard.measurement, shard.host_data) != (first.measurement, first.host_data):
            return (
                f"{where} (shard {bound.index}) has another MEASUREMENT or HOST_DATA than "
                "shard 0: the shards did not run in one launch configuration"
            )
        if shard.platform != first.platform:
            # Each shard's label is checked against the root its chain reached; one Job runs
            # on hardware or it does not, and no verdict may rest on both.
            return (
                f"{where} (shard {bound.index}) is {shard.platform} evidence, shard 0 "
                f"{first.platform}: a run's shards are all genuine or all simulated"
            )
    indices = [shard.binding.shard.index for shard in merged.shards if shard.binding.shard]
    if indices != list(range(merged.shard_count)):
        duplicated = sorted({i for i in indices if indices.count(i) > 1})
        missing = sorted(set(range(merged.shard_count)) - set(indices))
        if duplicated:
            return f"shard {duplicated[0]} of {merged.shard_count} appears more than once"
        if missing:
            return f"shard {missing[0]} of {merged.shard_count} is missing"
        return f"the shards are not listed in index order: {indices}"
    return None


def _shown(value: object) -> str:
    if isinstance(value, Workload):
        return value.digest
    return "absent" if value is None else str(value)


def checked_shard(shard: Envelope, *, where: str) -> CheckedShard:
    """A shard envelope's result, checked against its binding (position, corpus, evaluation)
    and on its own (:func:`~attestation.scoring.shards.check_shard_result`).

    Raises:
        ShardMergeError: an envelope without a result, a result that is not a shard result,
            or one that is not the result its binding names.
    """
    result = parse_shard_result(shard.result, where=where)
    binding = shard.binding
    bound = binding.shard
    if bound is None or (result.shard_index, result.shard_count) != (bound.index, bound.count):
        raise ShardMergeError(f"{where}: its result is {result.position}, not its binding's")
    if (result.set_checksum, result.evaluation_digest) != (
        binding.corpus_checksum,
        binding.evaluation_digest,
    ):
        raise ShardMergeError(f"{where}: its result is of another corpus or evaluation")
    return check_shard_result(result, where=where)


def shard_results(merged: MergedEnvelope) -> list[CheckedShard]:
    """Every shard's checked result (:func:`checked_shard`), the complete set in order.

    Raises:
        ShardMergeError: a shard's result does not check, or the set is not shards 0..N-1.
    """
    results = [
        checked_shard(shard, where=f"shards[{position}]")
        for position, shard in enumerate(merged.shards)
    ]
    check_complete([checked.result for checked in results])
    return results


def ordered_shards(shards: Sequence[Envelope]) -> list[Envelope]:
    """Shard envelopes in index order.

    Raises:
        ShardMergeError: none, more than a replay can have, or a whole run's envelope.
    """
    if not shards:
        raise ShardMergeError("no shard envelopes to merge")
    if len(shards) > MAX_SHARD_COUNT:
        raise ShardMergeError(
            f"{len(shards)} shard envelopes, more than the {MAX_SHARD_COUNT} shards a replay "
            "can have"
        )
    positions = []
    for shard in shards:
        if shard.binding.shard is None:
            raise ShardMergeError(f"the envelope of run {shard.run_id} is a whole run's")
        positions.append((shard.binding.shard.index, shard))
    return [shard for _, shard in sorted(positions, key=lambda pair: pair[0])]


def merge_envelopes(
    shards: Sequence[Envelope],
    tail_openings: Sequence[RunTailOpenings],
    *,
    include_result: bool = True,
) -> MergedEnvelope:
    """The merged envelope of a sharded replay's shard envelopes (in any order) and the tail
    openings at each run's p95 (``runner.shard_tails`` computes them from the
    shards' tails files).

    Only the structure is checked here (the verifier checks everything, evidence included):

    Raises:
        ShardMergeError: not one complete, consistent set of shards, or results that do not
            merge.
    """
    ordered = ordered_shards(shards)
    first = ordered[0].binding
    assert first.shard is not None
    header = {field: getattr(first, field) for field in SHARED_FIELDS}
    draft = MergedEnvelope(
        api_version=API_VERSION,
        kind=MERGED_ENVELOPE_KIND,
        shard_count=first.shard.count,
        result_digest=first.result_digest,  # replaced below
        shards=tuple(ordered),
        tail_openings=tuple(tail_openings),
        **header,
    )
    problem = consistency_problem(draft)
    if problem is not None:
        raise ShardMergeError(problem)
    report = merge_shard_results(shard_results(draft), draft.tail_openings)
    return draft.model_copy(
        update={
            "result_digest": result_digest(report),
            "result": report if include_result else None,
        }
    )


def merged_envelope_bytes(merged: MergedEnvelope) -> bytes:
    """The bytes written and published for a merged envelope (its digest is over these).

    Raises:
        ShardMergeError: the envelope would exceed the limits every verifier applies
            (:data:`MAX_ENVELOPE_BYTES`, :data:`MAX_ENVELOPE_JSON_ITEMS`): fewer shards fit.
    """
    data = (_json_text(merged.to_json_dict()) + "\n").encode()
    items = json_item_bound(data)
    if len(data) > MAX_ENVELOPE_BYTES or items > MAX_ENVELOPE_JSON_ITEMS:
        raise ShardMergeError(
            f"the merged envelope of {merged.shard_count} shards is {len(data)} bytes with up "
            f"to {items} JSON values, over the envelope limits ({MAX_ENVELOPE_BYTES} bytes, "
            f"{MAX_ENVELOPE_JSON_ITEMS} values) every verifier applies: split the replay into "
            "fewer shards"
        )
    return data


class MergedBudget:
    """The room left in one merged envelope while its shards are read one by one.

    The bytes a shard takes inside any merged envelope (as :func:`merged_envelope_bytes`
    writes it), summed over the shards read so far, are a lower bound of the merged
    envelope's size: a reader of N shards (files, pod logs) stops as soon as the sum passes
    :data:`MAX_ENVELOPE_BYTES`, instead of holding N envelopes of up to that size each.
    """

    def __init__(self) -> None:
        self.used = 0
        self.shards = 0

    def add(self, shard: Envelope) -> str | None:
        """Count ``shard``; why the merged envelope can no longer fit, or None."""
        self.used += len(_json_text(shard.to_json_dict()).encode())
        self.shards += 1
        if self.used <= MAX_ENVELOPE_BYTES:
            return None
        return (
            f"with the {self.shards - 1} shard envelope(s) before it, the merged envelope "
            f"would be over the {MAX_ENVELOPE_BYTES}-byte envelope limit every verifier "
            "applies: split the replay into fewer shards"
        )


def _json_text(document: object) -> str:
    return json.dumps(document, ensure_ascii=False)
