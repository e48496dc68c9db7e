"""Replay a corpus: validate, checksum, score. The API ``attested-replay run`` calls.

A replay folds every run into an exact partial (``attestation.evaluation.partial``) and
builds the report from those partials. Shard ``I`` of ``N`` does the same integrity work over
the whole corpus (checksum, evaluation digest, the structure of every run) but validates and
scores only the cases of rank ``shard_range(I, N, C)`` in every run, and its result is its
partials (``attestation.evaluation.shards``): merged, they give the unsharded report.

Memory: the case pass streams ``cases.jsonl`` but keeps ``case_id -> label`` for scoring
(O(cases)); each run record is one line and is held while it is scored (O(cases in the
run)); per-run results are a few counters and the p95 tail (5% of the cases).
``compute_checksum`` alone keeps nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue

from attestation.contracts import format_sha256
from attestation.envelope.binding import result_digest as digest_of_result
from attestation.envelope.model import ShardPosition
from attestation.evaluation.metrics import RunTally
from attestation.evaluation.partial import PartialError, RunPartial, shard_range, tail_size
from attestation.evaluation.shards import shard_result, whole_report
from runner.corpus.checksum import CASES_FILE, Progress, compute_checksum, scan_cases
from runner.corpus.errors import CorpusError
from runner.corpus.evaluation import (
    PLAN_FILE,
    RUNS_FILE,
    Evaluation,
    iter_runs,
    load_evaluation,
)
from runner.corpus.models import RunCase, RunHeader, validate_record
from runner.scoring.checks import check_evaluation

__all__ = ["Progress", "ReplayOutcome", "compute_checksum", "replay_corpus"]


class ReplayOutcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    corpus_checksum: str
    evaluation_digest: str
    case_count: int
    #: The evaluation report, or for a shard its shard result (partials).
    result: dict[str, JsonValue]
    result_digest: str
    shard: ShardPosition | None = None


def replay_corpus(
    corpus_dir: Path, *, progress: Progress | None = None, shard: ShardPosition | None = None
) -> ReplayOutcome:
    """Validate the corpus in ``corpus_dir``, checksum it and score every run (or, for
    ``shard``, that shard's cases of every run).

    ``progress(done, total)`` counts the cases read from cases.jsonl (total None, not known
    yet), then the case results scored, counted on from there (total = cases * (1 + runs)).

    Raises ``runner.corpus.CorpusError`` (an ``InputError``) naming file, line and field.
    """
    evaluation = load_evaluation(corpus_dir)
    check_evaluation(evaluation)
    scan = scan_cases(corpus_dir, collect_labels=True, progress=progress)
    labels = scan.labels
    assert labels is not None
    plan = evaluation.plan
    if plan.set_ref and plan.set_ref != scan.checksum:
        raise CorpusError(
            PLAN_FILE,
            f"field 'set_ref': {plan.set_ref} is not the corpus checksum {scan.checksum}",
        )
    if plan.abstain_label is not None:
        # An answer equal to its label is right, and an abstention never is: a case labelled
        # with the abstain label would make both true at once. Labels are kept in file order,
        # so a label's position is its line.
        for line, (case_id, label) in enumerate(labels.items(), start=1):
            if label == plan.abstain_label:
                raise CorpusError(
                    CASES_FILE,
                    f"field 'label': case {case_id!r} is labelled with the plan's abstain_label "
                    f"{label!r}; a label must be an answer, not an abstention",
                    line=line,
                )
    case_count = scan.case_count
    if shard is None:
        owned = None
    else:
        first, end = shard_range(shard.index, shard.count, case_count)
        owned = dict(itertools.islice(labels.items(), first, end))
    tail = tail_size(case_count)
    total = case_count * (1 + evaluation.run_count)
    done = case_count
    digest = hashlib.sha256()
    digest.update(evaluation.plan_canonical + b"\n" + evaluation.marks_canonical + b"\n")
    partials: dict[tuple[str, int], RunPartial] = {}
    for run_line in iter_runs(corpus_dir, evaluation):
        digest.update(run_line.canonical + b"\n")
        record = run_line.header
        _check_refs(record, scan.checksum, evaluation, run_line.line)
        tally = RunTally(plan.positive_label, plan.abstain_label, tail=tail)
        if owned is None:
            _score_run(tally, record, run_line.cases, labels, run_line.line)
        else:
            _score_shard(
                tally, record, run_line.cases, owned, case_count=case_count, line=run_line.line
            )
        try:
            partials[(record.arm_id, record.run_index)] = tally.partial(
                record.arm_id, record.run_index
            )
        except PartialError as exc:
            raise CorpusError(
                RUNS_FILE, f"run {record.arm_id}/{record.run_index}: {exc}", line=run_line.line
            ) from None
        done += len(run_line.cases)
        if progress is not None:
            progress(done, total)
    _check_complete(partials, evaluation)
    evaluation_digest = format_sha256(digest.digest())
    ordered = [
        partials[(arm.arm_id, index)]
        for arm in plan.arms
        for index in range(1, plan.runs_per_arm + 1)
    ]
    if shard is None:
        result = whole_report(
            plan=plan,
            marks=evaluation.marks,
            partials=ordered,
            corpus_checksum=scan.checksum,
            evaluation_digest=evaluation_digest,
            case_count=case_count,
        )
    else:
        result = shard_result(
            shard_index=shard.index,
            shard_count=shard.count,
            case_count=case_count,
            set_checksum=scan.checksum,
            evaluation_digest=evaluation_digest,
            # The JSON values the evaluation digest hashed (and scoring read): the verifier
            # rebuilds the report from exactly these.
            plan=json.loads(evaluation.plan_canonical),
            marks=json.loads(evaluation.marks_canonical),
            partials=ordered,
        )
    return ReplayOutcome(
        corpus_checksum=scan.checksum,
        evaluation_digest=evaluation_digest,
        case_count=case_count,
        result=result,
        result_digest=digest_of_result(result),
        shard=shard,
    )


def _check_refs(record: RunHeader, checksum: str, evaluation: Evaluation, line: int) -> None:
    # The scoring procedure's first step: the run must name this set and these marks.
    if record.set_ref != checksum:
        raise CorpusError(
            RUNS_FILE,
            f"field 'set_ref': {record.set_ref!r} is not the corpus checksum {checksum}",
            line=line,
        )
    if record.marks_ref != evaluation.marks_ref:
        raise CorpusError(
            RUNS_FILE,
            f"field 'marks_ref': {record.marks_ref!r} is not the committed marks "
            f"{evaluation.marks_ref}",
            line=line,
        )


def _score_run(
    tally: RunTally,
    record: RunHeader,
    cases: list[Any],
    labels: Mapping[str, str],
    line: int,
) -> None:
    seen: set[str] = set()
    for index, raw in enumerate(cases):
        # One model at a time: a run's memory is its parsed line, not also a model per case.
        case = validate_record(RunCase, raw, RUNS_FILE, line, at=f"cases.{index}")
        label = labels.get(case.case_id)
        if label is None:
            raise CorpusError(
                RUNS_FILE,
                f"field 'cases.{index}.case_id': case {case.case_id!r} is not in cases.jsonl",
                line=line,
            )
        _tally_once(tally, case, label, seen, at=f"cases.{index}", line=line)
    if len(seen) != len(labels):
        _missing(record, labels, seen, line)


def _tally_once(
    tally: RunTally, case: RunCase, label: str, seen: set[str], *, at: str, line: int
) -> None:
    """Fold one case result, refusing a case the run already had."""
    if case.case_id in seen:
        raise CorpusError(
            RUNS_FILE,
            f"field '{at}.case_id': duplicate case {case.case_id!r} in this run",
            line=line,
        )
    seen.add(case.case_id)
    tally.add(
        label,
        case.prediction,
        has_error=case.error is not None,
        cost_usd=case.cost_usd,
        latency_ms=case.latency_ms,
    )


def _score_shard(
    tally: RunTally,
    record: RunHeader,
    cases: list[Any],
    owned: Mapping[str, str],
    *,
    case_count: int,
    line: int,
) -> None:
    """Score a shard's cases of one run; check the rest only as far as the merge needs.

    Every shard checks that the run has one entry per corpus case and that each of *its*
    cases appears exactly once: when every shard passes, the entries are exactly the corpus
    cases, so a run the unsharded replay refuses fails at least one shard.
    """
    if len(cases) != case_count:
        raise CorpusError(
            RUNS_FILE,
            f"field 'cases': run {record.arm_id}/{record.run_index} has {len(cases)} case "
            f"results, the corpus has {case_count} cases",
            line=line,
        )
    seen: set[str] = set()
    for index, raw in enumerate(cases):
        case_id = raw.get("case_id") if isinstance(raw, dict) else None
        if not isinstance(case_id, str):
            # Not an object, or no string case_id: the full validation names the problem.
            case_id = validate_record(RunCase, raw, RUNS_FILE, line, at=f"cases.{index}").case_id
        label = owned.get(case_id)
        if label is None:
            continue  # another shard's case
        case = validate_record(RunCase, raw, RUNS_FILE, line, at=f"cases.{index}")
        _tally_once(tally, case, label, seen, at=f"cases.{index}", line=line)
    if len(seen) != len(owned):
        _missing(record, owned, seen, line)


def _missing(record: RunHeader, expected: Mapping[str, str], seen: set[str], line: int) -> None:
    missing = sorted(case_id for case_id in expected if case_id not in seen)
    raise CorpusError(
        RUNS_FILE,
        f"field 'cases': run {record.arm_id}/{record.run_index} is missing "
        f"{len(missing)} case(s), first {missing[0]!r}",
        line=line,
    )


def _check_complete(partials: Mapping[tuple[str, int], RunPartial], evaluation: Evaluation) -> None:
    runs_per_arm = evaluation.plan.runs_per_arm
    for arm in evaluation.plan.arms:
        absent = [i for i in range(1, runs_per_arm + 1) if (arm.arm_id, i) not in partials]
        if absent:
            raise CorpusError(
                RUNS_FILE,
                f"arm {arm.arm_id!r} has no run record for run_index {absent[0]} "
                f"(the plan asks for {runs_per_arm} runs per arm)",
            )
