"""The pack's worked-example shape: a whole evaluation in one JSON file.

Runs carry ``run_id``, ``arm``, ``predictions`` and ``cost_usd`` (case id -> value); an
arm's runs are paired with the other arms' runs by their order in the file (run index 1,
2, ...). Any ``expected`` key is ignored: the scorer recomputes, it never reads answers.
The pack's record describes itself with metadata keys (title, provenance, ...); those are
ignored too, so the pack's worked example scores as published. Any other key is an error.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import Field, JsonValue

from attestation.scoring.marks import evaluate_mark, mark_definition_error
from attestation.scoring.metrics import RunMetrics, RunTally
from attestation.scoring.models import ExactNumber, FrozenModel, PassMark
from attestation.scoring.numbers import json_number
from runner.corpus.errors import CorpusError
from runner.corpus.models import validate_record

#: Descriptive keys of the pack's worked-example record: they carry no scoring input.
PACK_METADATA_KEYS: Final = frozenset(
    {
        "category_id",
        "role",
        "pack",
        "pack_version",
        "title",
        "category_reason",
        "fixture_kind",
        "purpose",
        "reading",
        "status",
        "admission",
        "content_kind",
        "license",
        "provenance",
        "dimensions",
        "dimension_basis",
        "relations",
    }
)


class ExampleCase(FrozenModel):
    case_id: str = Field(min_length=1, max_length=40)
    label: str = Field(min_length=1, max_length=200)


class ExampleRun(FrozenModel):
    run_id: str = Field(min_length=1, max_length=60)
    arm: str = Field(min_length=1, max_length=20)
    predictions: dict[str, str | None]
    cost_usd: dict[str, ExactNumber | None]


class WorkedExample(FrozenModel):
    positive_label: str = Field(min_length=1, max_length=200)
    runs_per_arm: int | None = Field(default=None, ge=1, le=5)
    cases: tuple[ExampleCase, ...] = Field(strict=False, min_length=1)
    runs: tuple[ExampleRun, ...] = Field(strict=False, min_length=1)
    pass_marks: tuple[PassMark, ...] = Field(strict=False, min_length=1)
    expected: Any = None  # ignored on purpose: the scorer recomputes


def score_worked_example(data: dict[str, Any], file: str) -> dict[str, JsonValue]:
    """``{"metrics": {run_id: {...}}, "marks": {id: result}}`` for a worked-example file."""
    scoring_input = {key: value for key, value in data.items() if key not in PACK_METADATA_KEYS}
    example = validate_record(WorkedExample, scoring_input, file)
    labels: dict[str, str] = {}
    for index, case in enumerate(example.cases):
        if case.case_id in labels:
            raise CorpusError(file, f"field 'cases.{index}.case_id': duplicate {case.case_id!r}")
        labels[case.case_id] = case.label
    arms: dict[str, dict[int, RunMetrics]] = {}
    metrics: dict[str, JsonValue] = {}
    for index, run in enumerate(example.runs):
        where = f"field 'runs.{index}"
        if run.run_id in metrics:
            raise CorpusError(file, f"{where}.run_id': duplicate run {run.run_id!r}")
        for name, mapping in (("predictions", run.predictions), ("cost_usd", run.cost_usd)):
            unknown = sorted(set(mapping) - set(labels))
            if unknown:
                raise CorpusError(file, f"{where}.{name}': unknown case {unknown[0]!r}")
            missing = sorted(set(labels) - set(mapping))
            if missing:
                raise CorpusError(file, f"{where}.{name}': missing case {missing[0]!r}")
        tally = RunTally(example.positive_label, None)
        for case_id, label in labels.items():
            tally.add(
                label,
                run.predictions[case_id],
                has_error=False,
                cost_usd=run.cost_usd[case_id],
                latency_ms=None,
            )
        arm_runs = arms.setdefault(run.arm, {})
        run_index = len(arm_runs) + 1
        result = tally.finish(run.arm, run_index)
        arm_runs[run_index] = result
        metrics[run.run_id] = {
            "arm": run.arm,
            "recall_points": json_number(result.recall_points),
            "twin_fp_points": json_number(result.twin_fp_points),
            "net_points": json_number(result.net_points),
            "errors": result.errors,
            "cost_per_case_usd": json_number(result.cost_per_case_usd),
        }
    counts = {len(arm_runs) for arm_runs in arms.values()}
    if len(counts) != 1 or (example.runs_per_arm is not None and counts != {example.runs_per_arm}):
        raise CorpusError(file, "field 'runs': every arm needs the same number of runs")
    marks: dict[str, JsonValue] = {}
    for index, mark in enumerate(example.pass_marks):
        problem = mark_definition_error(mark, frozenset(arms))
        if problem is not None:
            raise CorpusError(file, f"field 'pass_marks.{index}': {problem}")
        if mark.id in marks:
            raise CorpusError(file, f"field 'pass_marks.{index}.id': duplicate {mark.id!r}")
        marks[mark.id] = evaluate_mark(mark, arms).result
    return {"metrics": metrics, "marks": marks}
