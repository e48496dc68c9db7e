"""Per-run exact-match metrics (the pack's metrics menu): folded case by case into a
:class:`~.partial.RunPartial`, then finished into :class:`RunMetrics` by :func:`finish_run`.

A whole run and a merge of shards' partials go through the same :func:`finish_run`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from pydantic import JsonValue

from attestation.evaluation.numbers import (
    POINT_DECIMALS,
    json_number,
    money_per_case,
    points,
    scored_value,
)
from attestation.evaluation.partial import COUNTERS, RunPartial, double_of, exact_sum, tail_size

#: Names and order of the metrics every report run carries.
METRIC_NAMES: tuple[str, ...] = (
    "cases",
    "accuracy_points",
    "recall_points",
    "twin_fp_points",
    "net_points",
    "abstention_points",
    "errors",
    "cost_per_case_usd",
    "cost_known_subtotal_usd",
    "cost_unknown_cases",
    "p95_latency_ms",
    "latency_unknown_cases",
)


@dataclass(frozen=True, slots=True)
class RunMetrics:
    arm_id: str
    run_index: int
    cases: int
    accuracy_points: Decimal
    recall_points: Decimal | None
    twin_fp_points: Decimal | None
    net_points: Decimal | None
    abstention_points: Decimal | None
    errors: int
    cost_per_case_usd: Decimal | None
    cost_known_subtotal_usd: Decimal
    cost_unknown_cases: int
    p95_latency_ms: Decimal | None
    latency_unknown_cases: int

    def value(self, name: str) -> Decimal | int | None:
        result: Decimal | int | None = getattr(self, name)
        return result

    def report_metrics(self) -> list[JsonValue]:
        """The evaluation-report ``metrics`` list (name/value pairs, fixed order)."""
        out: list[JsonValue] = []
        for name in METRIC_NAMES:
            value = self.value(name)
            rendered: JsonValue = value if isinstance(value, int) else json_number(value)
            out.append({"name": name, "value": rendered})
        return out


#: Costs are summed in chunks of this many values (a C-level ``sum`` per chunk).
_COST_CHUNK: Final = 4096


class RunTally:
    """Folds one run's cases into a :class:`RunPartial`.

    ``tail`` is how many of the largest latencies to keep: :func:`tail_size` of the run's
    whole case count (a shard knows it before it scores); ``None`` keeps them all and sizes
    the tail from the cases folded (a whole run folded without knowing its size).
    Memory: the counters, a chunk of costs, and the kept latencies (cut back to the ``tail``
    largest whenever the list outgrows it by a chunk).
    """

    def __init__(
        self, positive_label: str, abstain_label: str | None, *, tail: int | None = None
    ) -> None:
        self.positive_label = positive_label
        self.abstain_label = abstain_label
        self.tail = tail
        self.cases = 0
        self.correct = 0
        self.positives = 0
        self.true_positives = 0
        self.negatives = 0
        self.false_positives = 0
        self.abstentions = 0
        self.errors = 0
        self.cost_unknown_cases = 0
        self.latency_unknown_cases = 0
        self._cost_total = Decimal(0)
        self._costs: list[Decimal] = []
        self._latencies: list[Decimal] = []

    def add(
        self,
        label: str,
        prediction: str | None,
        *,
        has_error: bool,
        cost_usd: Decimal | None,
        latency_ms: Decimal | None,
    ) -> None:
        self.cases += 1
        # An error or a missing (null) prediction is an error, and an error is never right.
        answer = None if has_error else prediction
        if answer is None:
            self.errors += 1
        elif answer == label:
            self.correct += 1
        if self.abstain_label is not None and answer == self.abstain_label:
            self.abstentions += 1
        said_positive = answer == self.positive_label
        if label == self.positive_label:
            self.positives += 1
            self.true_positives += said_positive
        else:
            self.negatives += 1
            self.false_positives += said_positive
        if cost_usd is None:
            self.cost_unknown_cases += 1
        else:
            self._costs.append(cost_usd)
            if len(self._costs) >= _COST_CHUNK:
                self._sum_costs()
        if latency_ms is None:
            self.latency_unknown_cases += 1
        else:
            self._latencies.append(latency_ms)
            if self.tail is not None and len(self._latencies) >= 2 * self.tail + _COST_CHUNK:
                self._cut_latencies(self.tail)

    def _sum_costs(self) -> None:
        self._cost_total = exact_sum([self._cost_total, *self._costs])
        self._costs.clear()

    def _cut_latencies(self, tail: int) -> None:
        self._latencies = heapq.nlargest(tail, self._latencies)

    def partial(self, arm_id: str, run_index: int) -> RunPartial:
        """The state so far, as the partial of run ``arm_id``/``run_index``."""
        self._sum_costs()
        self._cut_latencies(tail_size(self.cases) if self.tail is None else self.tail)
        return RunPartial(
            arm_id=arm_id,
            run_index=run_index,
            cost_total_usd=self._cost_total,
            latency_tail=tuple(map(double_of, self._latencies)),
            **{name: getattr(self, name) for name in COUNTERS},
        )

    def finish(self, arm_id: str, run_index: int) -> RunMetrics:
        """The metrics of the cases folded so far, as run ``arm_id``/``run_index``."""
        return finish_run(
            self.partial(arm_id, run_index), abstentions_scored=self.abstain_label is not None
        )


def finish_run(partial: RunPartial, *, abstentions_scored: bool) -> RunMetrics:
    """The metrics of a whole run from its partial over every case (one part or a merge).

    ``abstentions_scored``: the plan has an abstain label (else abstention points are null).
    """
    recall = points(partial.true_positives, partial.positives)
    twin_fp = points(partial.false_positives, partial.negatives)
    net = None if recall is None or twin_fp is None else recall - twin_fp
    accuracy = points(partial.correct, partial.cases)
    assert accuracy is not None  # a run has at least one case
    # Nearest-rank p95 over n latencies is the tail_size(n)-th largest.
    tail = tail_size(partial.cases)
    known_all = partial.latency_unknown_cases == 0
    return RunMetrics(
        arm_id=partial.arm_id,
        run_index=partial.run_index,
        cases=partial.cases,
        accuracy_points=accuracy,
        recall_points=recall,
        twin_fp_points=twin_fp,
        net_points=None if net is None else net.quantize(Decimal(1).scaleb(-POINT_DECIMALS)),
        abstention_points=(
            points(partial.abstentions, partial.cases) if abstentions_scored else None
        ),
        errors=partial.errors,
        cost_per_case_usd=(
            money_per_case(partial.cost_total_usd, partial.cases)
            if partial.cost_unknown_cases == 0
            else None
        ),
        cost_known_subtotal_usd=partial.cost_total_usd,
        cost_unknown_cases=partial.cost_unknown_cases,
        p95_latency_ms=scored_value(partial.latency_tail[tail - 1]) if known_all else None,
        latency_unknown_cases=partial.latency_unknown_cases,
    )
