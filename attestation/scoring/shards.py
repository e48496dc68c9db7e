"""Sharded replays: what one shard attests, and the merge of all shards into the report.

Shard ``index`` of ``count`` scores the cases of rank ``shard_range(index, count, C)`` in
``cases.jsonl``, in every run, and attests a *shard result* (:class:`ShardResult`): its
position and case range, the corpus checksum and evaluation digest it computed over the
whole corpus, the plan and marks it read (their JSON values, the doubles the evaluation
digest hashed), and one :class:`~.partial.RunPartialDoc` per run. :func:`check_shard_result`
checks one result on its own and decodes its partials (once: a shard envelope's verification
does it, and a merge reads what it decoded); :func:`merge_shard_results` checks that the
checked results are the complete set of one sharded replay, checks each run's p95 against
the shards' tail openings (:mod:`~attestation.scoring.tails`: a shard's tail is attested
by its Merkle root, not by value), merges each run's partials exactly and builds the
evaluation report with the same code as an unsharded replay (:func:`whole_report`), so the
merged report is byte for byte the unsharded one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Final, Literal

from pydantic import Field, JsonValue, ValidationError, model_validator

from attestation.contracts import (
    MAX_SHARD_COUNT,
    MAX_SHARDED_CASES,
    MAX_TAIL_OPENING_BYTES,
    Sha256Digest,
    SnakeWireModel,
    WireModel,
)
from attestation.encoding.json_document import describe_validation_error
from attestation.errors import BindingError
from attestation.scoring.marks import scoring_problem
from attestation.scoring.metrics import RunMetrics, finish_run
from attestation.scoring.models import PassMarks, Plan
from attestation.scoring.partial import (
    CommittedPartial,
    PartialError,
    RunPartial,
    RunPartialDoc,
    merge_committed,
    shard_range,
    tail_size,
)
from attestation.scoring.report import SCORER, build_report
from attestation.scoring.tails import (
    TailError,
    TailOpening,
    check_opening,
    check_order_statistic,
    decode_proof,
    decode_value,
)

SHARD_RESULT_FORMAT: Final = "attested-replay.shard-result/v3"

RunKey = tuple[str, int]


class ShardMergeError(BindingError):
    """Shard results that are not the complete, consistent set of one sharded replay."""


class ShardResult(SnakeWireModel):
    """The result a shard attests (the ``result`` of its envelope), snake_case like the report."""

    format: Literal["attested-replay.shard-result/v3"]
    scorer: str = Field(max_length=100)
    shard_index: int = Field(ge=0, lt=MAX_SHARD_COUNT)
    shard_count: int = Field(ge=1, le=MAX_SHARD_COUNT)
    #: The shard's ranks in cases.jsonl: [first_case, end_case).
    first_case: int = Field(ge=0)
    end_case: int = Field(ge=0)
    case_count: int = Field(ge=1, le=MAX_SHARDED_CASES)
    set_checksum: Sha256Digest
    evaluation_digest: Sha256Digest
    plan: dict[str, JsonValue]
    marks: dict[str, JsonValue]
    runs: Annotated[tuple[RunPartialDoc, ...], Field(strict=False, min_length=1)]

    @model_validator(mode="after")
    def _consistent(self) -> ShardResult:
        if self.shard_index >= self.shard_count:
            raise ValueError(
                f"shard_index {self.shard_index} is not below shard_count {self.shard_count}"
            )
        expected = shard_range(self.shard_index, self.shard_count, self.case_count)
        if (self.first_case, self.end_case) != expected:
            raise ValueError(
                f"case range [{self.first_case}, {self.end_case}) is not shard "
                f"{self.shard_index} of {self.shard_count} of {self.case_count} cases {expected}"
            )
        for run in self.runs:
            if run.cases != self.end_case - self.first_case:
                raise ValueError(
                    f"run {run.arm_id}/{run.run_index} has {run.cases} cases, the shard's range "
                    f"{self.end_case - self.first_case}"
                )
        return self

    @property
    def position(self) -> str:
        return f"shard {self.shard_index} of {self.shard_count}"


def shard_result(
    *,
    shard_index: int,
    shard_count: int,
    case_count: int,
    set_checksum: str,
    evaluation_digest: str,
    plan: Mapping[str, JsonValue],
    marks: Mapping[str, JsonValue],
    partials: Sequence[RunPartial],
) -> dict[str, JsonValue]:
    """The JSON result of one shard (validated as :class:`ShardResult` on the way)."""
    first, end = shard_range(shard_index, shard_count, case_count)
    document = ShardResult(
        format=SHARD_RESULT_FORMAT,
        scorer=SCORER,
        shard_index=shard_index,
        shard_count=shard_count,
        first_case=first,
        end_case=end,
        case_count=case_count,
        set_checksum=set_checksum,
        evaluation_digest=evaluation_digest,
        plan=dict(plan),
        marks=dict(marks),
        runs=tuple(partial.to_doc() for partial in partials),
    )
    dumped: dict[str, JsonValue] = document.model_dump(mode="json")
    return dumped


def whole_report(
    *,
    plan: Plan,
    marks: PassMarks,
    partials: Sequence[RunPartial],
    corpus_checksum: str,
    evaluation_digest: str,
    case_count: int,
) -> dict[str, JsonValue]:
    """The evaluation report from one partial per run, each over all of the run's cases
    (an unsharded replay's own partials, or the merge of every shard's)."""
    runs: dict[str, dict[int, RunMetrics]] = {arm.arm_id: {} for arm in plan.arms}
    abstentions = plan.abstain_label is not None
    for partial in partials:
        runs[partial.arm_id][partial.run_index] = finish_run(
            partial, abstentions_scored=abstentions
        )
    return build_report(
        plan=plan,
        marks=marks,
        runs=runs,
        corpus_checksum=corpus_checksum,
        evaluation_digest=evaluation_digest,
        case_count=case_count,
    )


def parse_shard_result(result: Mapping[str, JsonValue] | None, *, where: str) -> ShardResult:
    """A shard's result document.

    Raises:
        ShardMergeError: absent, or not a valid shard result, naming ``where``.
    """
    if result is None:
        raise ShardMergeError(f"{where} carries no result: its partial is needed for the merge")
    try:
        return ShardResult.model_validate(result)
    except ValidationError as exc:
        raise ShardMergeError(
            f"{where}: not a shard result: {describe_validation_error(exc)}"
        ) from None


def check_complete(results: Sequence[ShardResult]) -> None:
    """The results are shards 0..N-1 of N, each exactly once, listed in index order.

    Raises:
        ShardMergeError: naming the missing, duplicated or misplaced shard.
    """
    if not results:
        raise ShardMergeError("no shard results to merge")
    count = results[0].shard_count
    for position, result in enumerate(results):
        if result.shard_count != count:
            raise ShardMergeError(
                f"shard results of {count} and of {result.shard_count} shards cannot be merged"
            )
        if result.shard_index != position:
            indices = [r.shard_index for r in results]
            duplicated = sorted({i for i in indices if indices.count(i) > 1})
            missing = sorted(set(range(count)) - set(indices))
            if duplicated:
                raise ShardMergeError(f"shard {duplicated[0]} of {count} appears more than once")
            if missing:
                raise ShardMergeError(f"shard {missing[0]} of {count} is missing")
            raise ShardMergeError(
                f"shards must be listed in index order: position {position} holds "
                f"shard {result.shard_index}"
            )
    if len(results) != count:
        if len(results) > count:
            raise ShardMergeError(f"{len(results)} shard results for a replay of {count} shards")
        raise ShardMergeError(f"shard {len(results)} of {count} is missing")


@dataclass(frozen=True, slots=True)
class CheckedShard:
    """A shard result whose runs' partials are decoded and checked (once, when its shard
    envelope is verified), merged from here."""

    result: ShardResult
    #: One per run, in the result's order.
    partials: tuple[CommittedPartial, ...]
    #: The result's plan and marks, validated.
    plan: Plan
    marks: PassMarks


def plan_runs(plan: Plan) -> list[RunKey]:
    """The runs a plan asks for, in report order."""
    return [(arm.arm_id, index) for arm in plan.arms for index in range(1, plan.runs_per_arm + 1)]


def check_shard_result(result: ShardResult, *, where: str) -> CheckedShard:
    """Decode and check a shard result on its own: its plan and marks can be scored, it has
    exactly the plan's runs, each once, and every run's partial decodes.

    Raises:
        ShardMergeError: naming ``where`` and the problem.
    """
    if result.scorer != SCORER:
        raise ShardMergeError(
            f"{where}: a shard result of scorer {result.scorer!r}, this is {SCORER!r}"
        )
    plan, marks = _plan_and_marks(result, where=where)
    problem = scoring_problem(plan, marks)
    if problem is not None:
        raise ShardMergeError(f"{where}: the shard's {problem[0]} cannot be scored: {problem[1]}")
    wanted = plan_runs(plan)
    keys = [(run.arm_id, run.run_index) for run in result.runs]
    if sorted(keys) != sorted(wanted) or len(set(keys)) != len(keys):
        raise ShardMergeError(
            f"{where} ({result.position}) has runs {keys}; the plan asks for exactly {wanted}"
        )
    tail = tail_size(result.case_count)
    partials = tuple(run.to_committed(tail=tail) for run in result.runs)
    return CheckedShard(result, partials, plan, marks)


def _plan_and_marks(result: ShardResult, *, where: str) -> tuple[Plan, PassMarks]:
    try:
        return Plan.model_validate(result.plan), PassMarks.model_validate(result.marks)
    except ValidationError as exc:
        raise ShardMergeError(
            f"{where}: the shard's plan or marks are invalid: {describe_validation_error(exc)}"
        ) from None


class ShardTailOpening(WireModel):
    """One shard's latency tail opened at a run's p95 (:class:`~.tails.TailOpening`)."""

    above: Annotated[int, Field(strict=True, ge=0)]
    at_least: Annotated[int, Field(strict=True, ge=0)]
    #: base64 of the opened blocks' values and inclusion proofs.
    proof: Annotated[str, Field(max_length=4 * -(-MAX_TAIL_OPENING_BYTES // 3))]


class RunTailOpenings(WireModel):
    """A merged run's p95 and every shard's opening at it, shard 0 first."""

    arm_id: Annotated[str, Field(min_length=1, max_length=20)]
    run_index: Annotated[int, Field(strict=True, ge=1, le=5)]
    #: The p95 as the hex of its big-endian binary64 (:func:`~.tails.encode_value`).
    p95: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
    shards: Annotated[
        tuple[ShardTailOpening, ...], Field(strict=False, min_length=1, max_length=MAX_SHARD_COUNT)
    ]


def merge_shard_results(
    shards: Sequence[CheckedShard], openings: Sequence[RunTailOpenings]
) -> dict[str, JsonValue]:
    """The evaluation report of a sharded replay from all of its checked shard results and
    the tail openings at each run's p95 (one per run whose latencies are all known, in the
    plan's order).

    Raises:
        ShardMergeError: the results are incomplete, from different replays, or inconsistent,
            or an opening does not prove its run's p95 from the shards' attested tails.
    """
    results = [shard.result for shard in shards]
    check_complete(results)
    first = results[0]
    for result in results[1:]:
        for field in ("case_count", "set_checksum", "evaluation_digest", "scorer", "plan", "marks"):
            if getattr(result, field) != getattr(first, field):
                raise ShardMergeError(
                    f"{result.position} differs from shard 0 in {field}: the shards are not "
                    "of one replay"
                )
    # Every shard's plan and marks are shard 0's (above), each validated when it was checked.
    plan, marks = shards[0].plan, shards[0].marks
    tail = tail_size(first.case_count)
    parts: dict[RunKey, list[CommittedPartial]] = {key: [] for key in plan_runs(plan)}
    for shard in shards:
        for partial in shard.partials:
            parts[(partial.arm_id, partial.run_index)].append(partial)
    p95s = proven_p95s(parts, openings, rank=tail)
    try:
        merged = [merge_committed(parts[key], tail=tail, p95=p95s.get(key)) for key in parts]
    except PartialError as exc:
        raise ShardMergeError(str(exc)) from None
    return whole_report(
        plan=plan,
        marks=marks,
        partials=merged,
        corpus_checksum=first.set_checksum,
        evaluation_digest=first.evaluation_digest,
        case_count=first.case_count,
    )


def opened_runs(parts: Mapping[RunKey, Sequence[CommittedPartial]]) -> list[RunKey]:
    """The runs whose p95 a merge opens: those with every latency known, in plan order."""
    return [
        key for key, runs in parts.items() if all(part.latency_unknown_cases == 0 for part in runs)
    ]


def proven_p95s(
    parts: Mapping[RunKey, Sequence[CommittedPartial]],
    openings: Sequence[RunTailOpenings],
    *,
    rank: int,
) -> dict[RunKey, float]:
    """Each opened run's p95, checked against every shard's attested tail root.

    Raises:
        ShardMergeError: openings for other runs than :func:`opened_runs`, or out of order,
            or one that does not prove its p95 (naming the run and shard).
    """
    wanted = opened_runs(parts)
    keys = [(opening.arm_id, opening.run_index) for opening in openings]
    if keys != wanted:
        raise ShardMergeError(
            f"the tail openings are for runs {keys}; the runs with every latency known are "
            f"{wanted}, in plan order"
        )
    proven: dict[RunKey, float] = {}
    for key, run in zip(wanted, openings, strict=True):
        where = f"run {key[0]}/{key[1]}"
        committed = parts[key]
        if len(run.shards) != len(committed):
            raise ShardMergeError(
                f"{where}: {len(run.shards)} tail openings for {len(committed)} shards"
            )
        try:
            value = decode_value(run.p95)
            decoded = [
                TailOpening(shard.above, shard.at_least, decode_proof(shard.proof))
                for shard in run.shards
            ]
        except TailError as exc:
            raise ShardMergeError(f"{where}: {exc}") from None
        for index, (opening, part) in enumerate(zip(decoded, committed, strict=True)):
            problem = check_opening(
                opening, value=value, length=part.tail_length, root=part.tail_root
            )
            if problem is not None:
                raise ShardMergeError(f"{where}: shard {index}'s tail opening: {problem}")
        problem = check_order_statistic(decoded, value=value, rank=rank)
        if problem is not None:
            raise ShardMergeError(f"{where}: {problem}")
        proven[key] = value
    return proven
