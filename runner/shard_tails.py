"""A shard's tails file: its runs' latency tails, beside its envelope, for the merge.

A shard envelope attests each run's latency tail by its Merkle root only
(``attestation.scoring.tails``), so that it stays small whatever the number of cases. The
tails themselves go to ``attested-replay merge`` (or ``collect``) in this file, written by
``run --shard-count`` beside the envelope (``<out>.tails.json``; with ``--frame-envelope``
also as one framed log line). Nothing in it is trusted: the merge checks every run's tail
against the root its shard attested before using it, finds each run's p95 over the shards'
tails and opens every shard's tail at it (:func:`tail_openings`); the verifier checks the
openings against the roots, never this file.

The file (``attested-replay.shard-tails/v1``, RFC 8785 JSON)::

    {"format": "attested-replay.shard-tails/v1", "runs": [{"arm_id": "A", "run_index": 1,
     "latency_tail": "<base64 of the descending big-endian binary64 values>"}, ...],
     "shard_count": N, "shard_index": I}
"""

from __future__ import annotations

import base64
import binascii
import bisect
import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Final, Literal

from pydantic import Field, ValidationError

from attestation.contracts import MAX_PLAN_RUNS, MAX_SHARD_COUNT, SnakeWireModel
from attestation.encoding.canonical import canonicalize
from attestation.encoding.json_document import describe_validation_error
from attestation.envelope.merged import (
    MergedEnvelope,
    checked_shard,
    merge_envelopes,
    ordered_shards,
)
from attestation.envelope.model import Envelope
from attestation.scoring.partial import RunPartial, largest_of_union, tail_size
from attestation.scoring.shards import (
    CheckedShard,
    RunKey,
    RunTailOpenings,
    ShardMergeError,
    ShardTailOpening,
    check_complete,
    opened_runs,
    plan_runs,
)
from attestation.scoring.tails import (
    BLOCK_BYTES,
    encode_proof,
    encode_value,
    opened_blocks,
    tail_bytes,
    tail_from_bytes,
    tail_root,
)
from attestation.transparency.merkle import leaf_hash
from runner.service.log.merkle import MerkleTree

TAILS_FORMAT: Final = "attested-replay.shard-tails/v1"
#: Room for a tails file's JSON around its base64 tails.
_TAILS_FILE_OVERHEAD: Final = 1024 * (MAX_PLAN_RUNS + 1)


class RunTail(SnakeWireModel):
    arm_id: str = Field(min_length=1, max_length=20)
    run_index: int = Field(ge=1, le=5)
    latency_tail: str


class ShardTails(SnakeWireModel):
    """A shard's tails file."""

    format: Literal["attested-replay.shard-tails/v1"]
    shard_index: int = Field(ge=0, lt=MAX_SHARD_COUNT)
    shard_count: int = Field(ge=1, le=MAX_SHARD_COUNT)
    runs: Annotated[tuple[RunTail, ...], Field(strict=False, max_length=MAX_PLAN_RUNS)]


def tails_document(shard_index: int, shard_count: int, partials: Sequence[RunPartial]) -> bytes:
    """The tails file of a shard whose runs' partials are ``partials``."""
    document = ShardTails(
        format=TAILS_FORMAT,
        shard_index=shard_index,
        shard_count=shard_count,
        runs=tuple(
            RunTail(
                arm_id=partial.arm_id,
                run_index=partial.run_index,
                latency_tail=base64.b64encode(tail_bytes(partial.latency_tail)).decode("ascii"),
            )
            for partial in partials
        ),
    )
    return canonicalize(document.model_dump(mode="json")) + b"\n"


def max_tails_bytes(shard: CheckedShard) -> int:
    """The largest tails file ``shard``'s attested result allows (its tails' lengths)."""
    values = sum(partial.tail_length for partial in shard.partials)
    return 4 * -(-8 * values // 3) + _TAILS_FILE_OVERHEAD


def read_tails(data: bytes, shard: CheckedShard, *, where: str) -> dict[RunKey, list[float]]:
    """The runs' tails of ``shard`` from its tails file, each checked against the tail root
    the shard attested.

    Raises:
        ShardMergeError: not a tails file of this shard, or a tail that is not the attested
            one (naming ``where`` and the run).
    """
    if len(data) > max_tails_bytes(shard):
        raise ShardMergeError(
            f"{where}: {len(data)} bytes, more than the {max_tails_bytes(shard)} its shard's "
            "tails take"
        )
    try:
        document = ShardTails.model_validate_json(data)
    except ValidationError as exc:
        raise ShardMergeError(
            f"{where}: not a tails file: {describe_validation_error(exc)}"
        ) from None
    result = shard.result
    if (document.shard_index, document.shard_count) != (result.shard_index, result.shard_count):
        raise ShardMergeError(
            f"{where}: the tails of shard {document.shard_index} of {document.shard_count}, "
            f"not of {result.position}"
        )
    keys = [(run.arm_id, run.run_index) for run in document.runs]
    wanted = [(partial.arm_id, partial.run_index) for partial in shard.partials]
    if keys != wanted:
        raise ShardMergeError(f"{where}: tails of runs {keys}, the shard attests {wanted}")
    tails: dict[RunKey, list[float]] = {}
    for run, partial in zip(document.runs, shard.partials, strict=True):
        try:
            data = base64.b64decode(run.latency_tail, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ShardMergeError(
                f"{where}: run {run.arm_id}/{run.run_index}: the tail is not base64: {exc}"
            ) from None
        if len(data) != 8 * partial.tail_length or tail_root(data) != partial.tail_root:
            raise ShardMergeError(
                f"{where}: run {run.arm_id}/{run.run_index}: the tail is not the one "
                f"{result.position} attested (its Merkle root differs)"
            )
        tails[(run.arm_id, run.run_index)] = tail_from_bytes(data)
    return tails


def tail_openings(
    shards: Sequence[CheckedShard], tails: Sequence[dict[RunKey, list[float]]]
) -> tuple[RunTailOpenings, ...]:
    """Each run's p95 over the shards' (checked) tails and every shard's tail opened at it,
    for the runs whose latencies are all known, in plan order."""
    by_run = [{(p.arm_id, p.run_index): p for p in shard.partials} for shard in shards]
    parts = {key: [runs[key] for runs in by_run] for key in plan_runs(shards[0].plan)}
    rank = tail_size(shards[0].result.case_count)
    openings = []
    for key in opened_runs(parts):
        runs = [shard_tails[key] for shard_tails in tails]
        value = largest_of_union(runs, rank).last()
        openings.append(
            RunTailOpenings(
                arm_id=key[0],
                run_index=key[1],
                p95=encode_value(value),
                shards=tuple(open_tail(tail, value) for tail in runs),
            )
        )
    return tuple(openings)


def open_tail(tail: list[float], value: float) -> ShardTailOpening:
    """A descending tail opened at ``value`` (:mod:`attestation.scoring.tails`)."""
    # Descending: the values > v are those whose negation is < -v.
    above = bisect.bisect_left(tail, -value, key=operator.neg)
    at_least = bisect.bisect_right(tail, -value, key=operator.neg)
    proof = proof_for(tail, above, at_least)
    return ShardTailOpening(above=above, at_least=at_least, proof=encode_proof(proof))


def proof_for(tail: list[float], above: int, at_least: int) -> bytes:
    """The blocks of ``tail`` an opening with these counts shows, each with its inclusion
    proof (:func:`~attestation.scoring.tails.opened_blocks`)."""
    data = tail_bytes(tail)
    leaves = [leaf_hash(data[i : i + BLOCK_BYTES]) for i in range(0, len(data), BLOCK_BYTES)]
    tree = MerkleTree(leaves)
    return b"".join(
        data[block * BLOCK_BYTES : (block + 1) * BLOCK_BYTES]
        + b"".join(tree.inclusion_proof(block, len(leaves)))
        for block in opened_blocks(above, at_least, len(tail))
    )


#: Reads a shard's tails file, at most the given number of bytes (plus one, to tell a larger).
ReadTails = Callable[[int], bytes]


def merge_with_tails(shards: Sequence[tuple[Envelope, ReadTails, str]]) -> MergedEnvelope:
    """The merged envelope of shard envelopes, each with the reader of its tails file and a
    name for messages (in any order): each tails file read up to the size its shard's
    attested result allows, every tail checked against its shard's attested root, each
    run's p95 found over the tails and opened in every shard's tail, then merged and checked
    as the verifier does (``attestation.envelope.merged.merge_envelopes``).

    Raises:
        ShardMergeError: not one complete, consistent set of shards, or a tails file that is
            not its shard's.
    """
    tails_of = {id(envelope): (data, where) for envelope, data, where in shards}
    ordered = ordered_shards([envelope for envelope, _, _ in shards])
    checked = [checked_shard(envelope, where=tails_of[id(envelope)][1]) for envelope in ordered]
    check_complete([shard.result for shard in checked])
    tails = []
    for envelope, shard in zip(ordered, checked, strict=True):
        read, where = tails_of[id(envelope)]
        data = read(max_tails_bytes(shard))
        tails.append(read_tails(data, shard, where=f"{where} tails"))
    return merge_envelopes(ordered, tail_openings(checked, tails))
