"""Per-run exact-match metrics (the pack's metrics menu), accumulated case by case."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from pydantic import JsonValue

from runner.scoring.numbers import POINT_DECIMALS, json_number, money_per_case, points

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


class RunTally:
    """Streams one run's cases; memory holds only counters and the known latencies."""

    def __init__(self, positive_label: str, abstain_label: str | None) -> None:
        self.positive_label = positive_label
        self.abstain_label = abstain_label
        self.cases = 0
        self.correct = 0
        self.positives = 0
        self.true_positives = 0
        self.negatives = 0
        self.false_positives = 0
        self.abstentions = 0
        self.errors = 0
        self.cost_total = Decimal(0)
        self.cost_unknown = 0
        self.latencies: list[Decimal] = []
        self.latency_unknown = 0

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
            self.cost_unknown += 1
        else:
            self.cost_total += cost_usd
        if latency_ms is None:
            self.latency_unknown += 1
        else:
            self.latencies.append(latency_ms)

    def finish(self, arm_id: str, run_index: int) -> RunMetrics:
        recall = points(self.true_positives, self.positives)
        twin_fp = points(self.false_positives, self.negatives)
        net = None if recall is None or twin_fp is None else recall - twin_fp
        accuracy = points(self.correct, self.cases)
        assert accuracy is not None  # a run has at least one case
        return RunMetrics(
            arm_id=arm_id,
            run_index=run_index,
            cases=self.cases,
            accuracy_points=accuracy,
            recall_points=recall,
            twin_fp_points=twin_fp,
            net_points=None if net is None else net.quantize(Decimal(1).scaleb(-POINT_DECIMALS)),
            abstention_points=(
                None if self.abstain_label is None else points(self.abstentions, self.cases)
            ),
            errors=self.errors,
            cost_per_case_usd=(
                money_per_case(self.cost_total, self.cases) if self.cost_unknown == 0 else None
            ),
            cost_known_subtotal_usd=self.cost_total,
            cost_unknown_cases=self.cost_unknown,
            p95_latency_ms=p95(self.latencies) if self.latency_unknown == 0 else None,
            latency_unknown_cases=self.latency_unknown,
        )


def p95(values: list[Decimal]) -> Decimal | None:
    """Nearest-rank 95th percentile: the ceil(0.95 * n)-th smallest value."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (95 * len(ordered) + 99) // 100
    return ordered[rank - 1]
