"""Pass marks evaluated across an arm's runs, paired by run index.

Every mark is ``met``, ``missed`` or ``unknown``. A mark compares reported (rounded)
values, so a reader can check it from the report alone. When one run is a known miss the
mark is missed even if another run's value is unknown; only when no known value misses and
some needed value is null is it unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pydantic import JsonValue

from attestation.scoring.metrics import METRIC_NAMES, RunMetrics
from attestation.scoring.models import PassMark, PassMarks, Plan
from attestation.scoring.numbers import text

MarkResult = Literal["met", "missed", "unknown"]
#: arm id -> run index -> metrics
ArmRuns = Mapping[str, Mapping[int, RunMetrics]]


@dataclass(frozen=True, slots=True)
class MarkOutcome:
    id: str
    result: MarkResult
    detail: str
    diagnosis: str | None

    def report(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"id": self.id, "result": self.result, "detail": self.detail}
        if self.diagnosis is not None:
            out["diagnosis"] = self.diagnosis
        return out


@dataclass(frozen=True, slots=True)
class _PerRunSpec:
    metric: str  # the RunMetrics field compared
    # (arm value, baseline value or None, threshold or None) -> passes
    passes: Callable[[Decimal, Decimal | None, Decimal | None], bool]
    relation: str  # for text: "arm value <relation>"
    needs_baseline: bool
    needs_threshold: bool


def _ge_threshold(value: Decimal, _base: Decimal | None, threshold: Decimal | None) -> bool:
    assert threshold is not None
    return value >= threshold


def _le_threshold(value: Decimal, _base: Decimal | None, threshold: Decimal | None) -> bool:
    assert threshold is not None
    return value <= threshold


def _gain_at_least(value: Decimal, base: Decimal | None, threshold: Decimal | None) -> bool:
    assert base is not None
    assert threshold is not None
    return value - base >= threshold


def _not_higher(value: Decimal, base: Decimal | None, _threshold: Decimal | None) -> bool:
    assert base is not None
    return value <= base


PER_RUN_MARKS: Mapping[str, _PerRunSpec] = {
    "net_gain_points": _PerRunSpec(
        "net_points", _gain_at_least, "minus baseline >=", needs_baseline=True, needs_threshold=True
    ),
    "twin_fp_not_higher": _PerRunSpec(
        "twin_fp_points", _not_higher, "<= baseline", needs_baseline=True, needs_threshold=False
    ),
    "recall_at_least": _PerRunSpec(
        "recall_points", _ge_threshold, ">=", needs_baseline=False, needs_threshold=True
    ),
    "accuracy_at_least": _PerRunSpec(
        "accuracy_points", _ge_threshold, ">=", needs_baseline=False, needs_threshold=True
    ),
    "twin_fp_at_most": _PerRunSpec(
        "twin_fp_points", _le_threshold, "<=", needs_baseline=False, needs_threshold=True
    ),
    "cost_per_case_at_most": _PerRunSpec(
        "cost_per_case_usd", _le_threshold, "<=", needs_baseline=False, needs_threshold=True
    ),
    "p95_latency_at_most": _PerRunSpec(
        "p95_latency_ms", _le_threshold, "<=", needs_baseline=False, needs_threshold=True
    ),
    "errors_at_most": _PerRunSpec(
        "errors", _le_threshold, "<=", needs_baseline=False, needs_threshold=True
    ),
}
SPREAD_MARK = "spread_points_below"
MARK_METRICS: frozenset[str] = frozenset({*PER_RUN_MARKS, SPREAD_MARK})


def mark_definition_error(mark: PassMark, arm_ids: frozenset[str]) -> str | None:
    """Why ``mark`` cannot be evaluated (unknown metric, arm, missing threshold), or None."""
    if mark.metric not in MARK_METRICS:
        known = ", ".join(sorted(MARK_METRICS))
        return f"field 'metric': unknown mark metric {mark.metric!r} (known: {known})"
    if mark.arm not in arm_ids:
        return f"field 'arm': arm {mark.arm!r} is not in the plan"
    spec = PER_RUN_MARKS.get(mark.metric)
    needs_baseline = spec is not None and spec.needs_baseline
    needs_threshold = spec is None or spec.needs_threshold
    if needs_baseline:
        if not mark.baseline:
            return f"field 'baseline': {mark.metric} needs a baseline arm"
        if mark.baseline not in arm_ids:
            return f"field 'baseline': arm {mark.baseline!r} is not in the plan"
        if mark.baseline == mark.arm:
            return "field 'baseline': the baseline must be another arm"
    elif mark.baseline:
        return f"field 'baseline': {mark.metric} takes no baseline"
    if needs_threshold and mark.threshold is None:
        return f"field 'threshold': {mark.metric} needs a numeric threshold"
    if not needs_threshold and mark.threshold is not None:
        return f"field 'threshold': {mark.metric} takes a null threshold"
    return None


def evaluate_mark(mark: PassMark, arms: ArmRuns) -> MarkOutcome:
    if mark.metric == SPREAD_MARK:
        return _spread(mark, arms[mark.arm])
    return _per_run(mark, PER_RUN_MARKS[mark.metric], arms)


def _show(metric: str, value: Decimal | None) -> str:
    # Points are reported with three decimals; money and counts as they are.
    return text(value, places=3) if metric.endswith("_points") else text(value)


def _as_decimal(value: Decimal | int | None) -> Decimal | None:
    if value is None or isinstance(value, Decimal):
        return value
    return Decimal(value)


def _per_run(mark: PassMark, spec: _PerRunSpec, arms: ArmRuns) -> MarkOutcome:
    runs = arms[mark.arm]
    base_runs = arms[mark.baseline] if spec.needs_baseline and mark.baseline else None
    shown: list[str] = []
    misses: list[str] = []
    unknown: list[str] = []
    for index in sorted(runs):
        run = runs[index]
        value = _as_decimal(run.value(spec.metric))
        base = None
        if base_runs is not None:
            base = _as_decimal(base_runs[index].value(spec.metric))
            shown.append(f"run {index}: {_show(spec.metric, value)} vs {_show(spec.metric, base)}")
        else:
            shown.append(f"run {index}: {_show(spec.metric, value)}")
        if value is None or (base_runs is not None and base is None):
            unknown.append(f"run {index}: {_why_null(spec.metric, run)}")
            continue
        if not spec.passes(value, base, mark.threshold):
            misses.append(_miss_text(mark, spec=spec, index=index, run=run, value=value, base=base))
    relation = spec.relation.replace("baseline", mark.baseline or "baseline")
    need = f"needs {mark.arm} {spec.metric} {relation}"
    if spec.needs_threshold:
        need += f" {text(mark.threshold)}"
    detail = f"{need} in every run; " + "; ".join(shown)
    if misses:
        return MarkOutcome(mark.id, "missed", detail, " ".join(misses))
    if unknown:
        return MarkOutcome(mark.id, "unknown", detail + "; unknown: " + "; ".join(unknown), None)
    return MarkOutcome(mark.id, "met", detail, None)


def _why_null(metric: str, run: RunMetrics) -> str:
    if metric == "cost_per_case_usd":
        return (
            f"{run.cost_unknown_cases} case cost(s) unknown, known subtotal "
            f"{text(run.cost_known_subtotal_usd)} USD"
        )
    if metric == "p95_latency_ms":
        return f"{run.latency_unknown_cases} case latency(ies) unknown"
    return f"{metric} is null (no cases of the class it is computed over)"


def _miss_text(
    mark: PassMark,
    *,
    spec: _PerRunSpec,
    index: int,
    run: RunMetrics,
    value: Decimal,
    base: Decimal | None,
) -> str:
    shown_value = _show(spec.metric, value)
    subject = f"{mark.arm} {spec.metric} {shown_value}"
    if base is not None and spec.needs_threshold:
        gain = _show(spec.metric, value - base)
        fact = (
            f"{subject} minus {mark.baseline} {_show(spec.metric, base)} is {gain}, "
            f"below {text(mark.threshold)}"
        )
    elif base is not None:
        fact = f"{subject} is above {mark.baseline} {_show(spec.metric, base)}"
    else:
        fact = f"{subject} fails {spec.relation} {text(mark.threshold)}"
    if run.errors:
        fact += f" ({run.errors} error(s) or null prediction(s) in that run scored as wrong)"
    return f"Run {index}: {fact}."


def _spread(mark: PassMark, runs: Mapping[int, RunMetrics]) -> MarkOutcome:
    shown = "; ".join(
        f"run {index}: {text(runs[index].net_points, places=3)}" for index in sorted(runs)
    )
    detail = f"needs {mark.arm} net_points spread below {text(mark.threshold)}; {shown}"
    spread = arm_spread(runs)
    if spread is None:
        return MarkOutcome(mark.id, "unknown", detail + "; a run's net_points is null", None)
    assert mark.threshold is not None
    if spread < mark.threshold:
        return MarkOutcome(mark.id, "met", f"{detail}; spread {text(spread, places=3)}", None)
    diagnosis = (
        f"{mark.arm}'s net_points differ by {text(spread, places=3)} between runs, "
        f"not below {text(mark.threshold)}."
    )
    return MarkOutcome(mark.id, "missed", f"{detail}; spread {text(spread, places=3)}", diagnosis)


def arm_spread(runs: Mapping[int, RunMetrics]) -> Decimal | None:
    """max - min of net_points across an arm's runs; None if any is null."""
    nets = [run.net_points for run in runs.values()]
    known = [net for net in nets if net is not None]
    if len(known) != len(nets) or not known:
        return None
    return max(known) - min(known)


def metric_name_error(index: int, name: str) -> str | None:
    """Why the plan's ``metrics[index]`` is not a metric the scorer computes, or None."""
    if name in METRIC_NAMES:
        return None
    return f"field 'metrics.{index}': unknown metric {name!r} (known: {', '.join(METRIC_NAMES)})"


def scoring_problem(plan: Plan, marks: PassMarks) -> tuple[Literal["plan", "marks"], str] | None:
    """Why this plan and these marks cannot be scored (which file, and what), or None: a plan
    metric the scorer does not compute, or a mark it cannot evaluate."""
    for index, name in enumerate(plan.metrics):
        problem = metric_name_error(index, name)
        if problem is not None:
            return "plan", problem
    arm_ids = frozenset(arm.arm_id for arm in plan.arms)
    for index, mark in enumerate(marks.marks):
        problem = mark_definition_error(mark, arm_ids)
        if problem is not None:
            return "marks", mark_problem_message(index, problem)
    return None


def mark_problem_message(index: int, problem: str) -> str:
    """``field 'marks.<index>.<field>': ...`` for a :func:`mark_definition_error` about the
    mark at ``index`` of ``marks.json``'s ``marks``."""
    return "field 'marks." + str(index) + "." + problem.removeprefix("field '")
