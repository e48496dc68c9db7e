"""Replay a corpus: validate, checksum, score. The API ``attested-replay run`` calls.

Memory: the case pass streams ``cases.jsonl`` but keeps ``case_id -> label`` for scoring
(O(cases)); each run record is one line and is held while it is scored (O(cases in the
run)); per-run results are a few counters. ``compute_checksum`` alone keeps nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue

from attestation.envelope.binding import result_digest as digest_of_result
from attestation.evaluation.metrics import RunMetrics, RunTally
from attestation.evaluation.report import build_report
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
    result: dict[str, JsonValue]
    result_digest: str


def replay_corpus(corpus_dir: Path, *, progress: Progress | None = None) -> ReplayOutcome:
    """Validate the corpus in ``corpus_dir``, checksum it and score every run.

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
    total = scan.case_count * (1 + evaluation.run_count)
    done = scan.case_count
    digest = hashlib.sha256()
    digest.update(evaluation.plan_canonical + b"\n" + evaluation.marks_canonical + b"\n")
    runs: dict[str, dict[int, RunMetrics]] = {arm.arm_id: {} for arm in plan.arms}
    for run_line in iter_runs(corpus_dir, evaluation):
        digest.update(run_line.canonical + b"\n")
        record = run_line.header
        _check_refs(record, scan.checksum, evaluation, run_line.line)
        runs[record.arm_id][record.run_index] = _score_run(
            record, run_line.cases, labels, evaluation, run_line.line
        )
        done += len(run_line.cases)
        if progress is not None:
            progress(done, total)
    _check_complete(runs, plan.runs_per_arm)
    evaluation_digest = "sha256:" + digest.hexdigest()
    result = build_report(
        plan=plan,
        marks=evaluation.marks,
        runs=runs,
        corpus_checksum=scan.checksum,
        evaluation_digest=evaluation_digest,
        case_count=scan.case_count,
    )
    return ReplayOutcome(
        corpus_checksum=scan.checksum,
        evaluation_digest=evaluation_digest,
        case_count=scan.case_count,
        result=result,
        result_digest=digest_of_result(result),
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
    record: RunHeader,
    cases: list[Any],
    labels: Mapping[str, str],
    evaluation: Evaluation,
    line: int,
) -> RunMetrics:
    tally = RunTally(evaluation.plan.positive_label, evaluation.plan.abstain_label)
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
        if case.case_id in seen:
            raise CorpusError(
                RUNS_FILE,
                f"field 'cases.{index}.case_id': duplicate case {case.case_id!r} in this run",
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
    if len(seen) != len(labels):
        missing = sorted(case_id for case_id in labels if case_id not in seen)
        raise CorpusError(
            RUNS_FILE,
            f"field 'cases': run {record.arm_id}/{record.run_index} is missing "
            f"{len(missing)} case(s), first {missing[0]!r}",
            line=line,
        )
    return tally.finish(record.arm_id, record.run_index)


def _check_complete(runs: Mapping[str, Mapping[int, RunMetrics]], runs_per_arm: int) -> None:
    for arm_id, arm_runs in runs.items():
        absent = [index for index in range(1, runs_per_arm + 1) if index not in arm_runs]
        if absent:
            raise CorpusError(
                RUNS_FILE,
                f"arm {arm_id!r} has no run record for run_index {absent[0]} "
                f"(the plan asks for {runs_per_arm} runs per arm)",
            )
