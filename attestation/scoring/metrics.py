"""Per-run exact-match metrics (the pack's metrics menu): folded case by case into a
:class:`~.partial.RunPartial`, then finished into :class:`RunMetrics` by :func:`finish_run`.

A whole run and a merge of shards' partials go through the same :func:`finish_run`.
"""

from __future__ import annotations

import decimal
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from itertools import repeat
from operator import eq, is_not, le
from typing import TYPE_CHECKING, Final, TypeVar

from pydantic import JsonValue

from attestation.scoring.numbers import (
    POINT_DECIMALS,
    json_number,
    money_per_case,
    points,
    scored_value,
)
from attestation.scoring.partial import (
    COUNTERS,
    EXACT,
    KnownLast,
    RunPartial,
    double_of,
    exact_sum,
    require_reportable_cost,
    tail_size,
)
from attestation.scoring.tail_select import (
    cut_to_largest,
    doubles,
    kth_largest,
    largest_descending,
)

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
#: Distinct (type, value) costs counted by :meth:`RunTally.add_batch` before they are summed.
_MAX_DISTINCT_COSTS: Final = 1 << 16
_NOT_NONE: Final = partial(is_not, None)
_NEVER: Final = object()

#: A JSON number as a parser hands it over (int or float), or null.
RawNumber = int | float | None


if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

_Ordered = TypeVar("_Ordered", bound="SupportsRichComparison")


def _largest(count: int, values: Sequence[_Ordered]) -> list[_Ordered]:
    """The ``count`` largest of ``values``, descending: ``heapq.nlargest(count, values)``
    (documented as equal to this), in C. A tail keeps about 5% of a run's cases and is cut
    from about twice its size, where ``nlargest``'s Python-level heap loop costs 8x a sort
    (measured: 20,001 of 50,000 latencies, 89 ms against 11 ms), and a shard pays that for
    every run whatever its share."""
    return sorted(values, reverse=True)[:count]


class RunTally:
    """Folds one run's cases into a :class:`RunPartial`.

    ``tail`` is how many of the largest latencies to keep: :func:`tail_size` of the run's
    whole case count (a shard knows it before it scores); ``None`` keeps them all and sizes
    the tail from the cases folded (a whole run folded without knowing its size).
    Memory: the counters, a chunk of costs, and the kept latencies, cut back to the ``tail``
    largest: by :meth:`add` whenever they outgrow twice that by a chunk (Python decimals),
    by :meth:`add_batch` whenever they outgrow it by a quarter of it or a chunk (8-byte
    doubles, :mod:`.tail_select`; a cut is a few C-level passes, so cutting often is cheap).
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
        # add_batch: costs counted by (type, value); latencies kept as their doubles, at or
        # above _latency_floor (the smallest of the tail kept at the last cut).
        self._cost_counts: Counter[tuple[type, int | float]] = Counter()
        self._raw_latencies = doubles()
        self._latency_floor: float | None = None
        self._only_positive = {positive_label: positive_label}

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

    def add_batch(
        self,
        labels: Sequence[str],
        answers: Sequence[str | None],
        costs: Sequence[RawNumber],
        latencies: Sequence[RawNumber],
    ) -> None:
        """Fold many cases at once: the same state as :meth:`add` once per case, with
        ``answers[i]`` the prediction (None for an error or a null prediction) and each
        number the int or float a JSON parser read (scored as :func:`scored_value` of it).

        Counting runs in C (``list.count``, ``map``): a few dozen nanoseconds per case.
        Costs are counted by (type, value) and each distinct one is converted once: the
        sum is exact, so grouping cannot change it, and ``scored_value`` depends on the type
        (``12.0`` has one decimal place, ``12`` none). Zeros add nothing and are dropped.
        Latencies are held as the doubles they are scored as (``float`` of each; an int past
        the double range raises ``OverflowError`` here). ``float`` is monotone, so the
        largest doubles are the doubles of the largest parsed values, ties included.
        """
        count = len(labels)
        if not len(answers) == len(costs) == len(latencies) == count:
            raise ValueError("add_batch needs one label, answer, cost and latency per case")
        self.cases += count
        self.errors += answers.count(None)
        self.correct += sum(map(eq, answers, labels))
        if self.abstain_label is not None:
            self.abstentions += answers.count(self.abstain_label)
        positives = labels.count(self.positive_label)
        self.positives += positives
        self.negatives += count - positives
        said_positive = answers.count(self.positive_label)
        # answer == label == positive label: the labels mapped to themselves when positive.
        true_positives = sum(map(eq, answers, map(self._only_positive.get, labels, repeat(_NEVER))))
        self.true_positives += true_positives
        self.false_positives += said_positive - true_positives
        self.cost_unknown_cases += costs.count(None)
        nonzero = list(filter(None, costs))
        self._cost_counts.update(zip(map(type, nonzero), nonzero, strict=True))
        if len(self._cost_counts) > _MAX_DISTINCT_COSTS:
            self._sum_counted_costs()
        known = doubles()
        known.extend(filter(_NOT_NONE, latencies))  # type: ignore[arg-type]
        self.latency_unknown_cases += count - len(known)
        floor = self._latency_floor
        self._raw_latencies.extend(known if floor is None else filter(partial(le, floor), known))
        if self.tail and len(self._raw_latencies) >= self.tail + max(self.tail // 4, _COST_CHUNK):
            self._raw_latencies, self._latency_floor = cut_to_largest(
                self._raw_latencies, self.tail
            )

    def _sum_counted_costs(self) -> None:
        with decimal.localcontext(EXACT):
            terms = [
                (Decimal(value) if kind is int else Decimal(repr(value))) * times
                for (kind, value), times in self._cost_counts.items()
            ]
        self._cost_total = exact_sum([self._cost_total, *terms])
        self._cost_counts.clear()

    def _sum_costs(self) -> None:
        self._cost_total = exact_sum([self._cost_total, *self._costs])
        self._costs.clear()

    def _cut_latencies(self, tail: int) -> None:
        self._latencies = _largest(tail, self._latencies)

    def partial(self, arm_id: str, run_index: int, *, last_only: bool = False) -> RunPartial:
        """The state so far, as the partial of run ``arm_id``/``run_index``.

        ``last_only``: the tail as a :class:`KnownLast` (its length and its last value, the
        p95, all a whole run's report reads), or empty when a latency is unknown; the tail's
        values are never built as Python floats.
        """
        self._sum_costs()
        self._sum_counted_costs()
        require_reportable_cost(self._cost_total)
        tail = tail_size(self.cases) if self.tail is None else self.tail
        self._cut_latencies(tail)
        # A parsed number is its double (largest_descending makes -0.0 the 0 scoring reads).
        self._raw_latencies.extend(map(double_of, self._latencies))
        self._latencies = []
        kept = self._raw_latencies
        latency_tail: Sequence[float]
        if not last_only:
            latency_tail = tuple(largest_descending(kept, tail))
        elif self.latency_unknown_cases or not kept or not tail:
            latency_tail = ()
        else:
            count = min(tail, len(kept))
            latency_tail = KnownLast(count, kth_largest(kept, count) + 0.0)
        return RunPartial(
            arm_id=arm_id,
            run_index=run_index,
            cost_total_usd=self._cost_total,
            latency_tail=latency_tail,
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
