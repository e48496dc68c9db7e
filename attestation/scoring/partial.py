"""Run partials: the exact, mergeable state of one run's scoring over a range of its cases.

Scoring a run is a fold over its cases, and everything the report needs from a run is a
function of some counters, one sum and one order statistic. So the fold can be cut anywhere
and the pieces added back together without changing a byte of the result:

- the counters (cases, correct answers, positives and true positives, negatives and false
  positives, abstentions, errors, unknown costs, unknown latencies) add;
- the cost total is summed exactly (:data:`EXACT`: a sum that would round raises instead),
  so the total of the parts' totals is the total;
- nearest-rank p95 over n latencies is the k-th largest value with
  k = n - ceil(0.95 n) + 1 (:func:`tail_size`), and the k-th largest value of a union is
  among the union of every part's k largest values: a part keeps only those, its *tail*.
  A latency is the double its JSON text denotes (``numbers.scored_value``), so a tail is
  doubles, exactly. On the wire a part carries its tail's Merkle root
  (:mod:`~attestation.scoring.tails`), not its values: a merge opens each part's tail at
  the p95 (:class:`CommittedPartial`, :func:`merge_committed`).

The unsharded replay is the one-part case of the same code (:func:`merge_partials` of a
single partial is that partial), so a merged result equals the unsharded one by construction.
"""

from __future__ import annotations

import bisect
import decimal
import itertools
import math
import operator
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, overload

from pydantic import Field, model_validator

from attestation.contracts import (
    EVALUATION_BLOCK_CASES,
    Sha256Digest,
    SnakeWireModel,
    evaluation_block_count,
)
from attestation.scoring.numbers import beyond_double, scored_value
from attestation.scoring.tails import tail_bytes, tail_root

#: Exact decimal arithmetic for sums: a double spans at most 633 significant digits (from
#: 5e-324 to 1.8e308), so sums of doubles never come near this precision; Inexact and
#: Rounded are trapped all the same, so a sum that cannot be exact raises rather than rounds
#: (the default context rounds at 28 digits, and where it rounds depends on the grouping).
EXACT: Final = decimal.Context(
    prec=2000,
    rounding=decimal.ROUND_HALF_EVEN,
    traps=[decimal.Inexact, decimal.Rounded, decimal.InvalidOperation, decimal.Overflow],
)
#: A cost total (never normalized away from what the sum produced, so zeros may trail).
_SUM_TEXT: Final = re.compile(r"^(0|[1-9][0-9]*)(\.[0-9]+)?$")
_MAX_SUM_TEXT: Final = 2 * 2000 + 2


class PartialError(ValueError):
    """Partials that cannot be merged: different runs, or a sum that would not be exact."""


def tail_size(case_count: int) -> int:
    """How many of a run's largest latencies nearest-rank p95 over ``case_count`` values
    can need: the p95 is the ``tail_size``-th largest (1 for fewer than 20 cases)."""
    if case_count <= 0:
        return 0
    rank = (95 * case_count + 99) // 100  # ceil(0.95 * n), the rank from the bottom
    return case_count - rank + 1


def shard_range(index: int, count: int, case_count: int) -> tuple[int, int]:
    """``[first, end)``: the ranks in ``cases.jsonl`` (ascending case_id) shard ``index`` of
    ``count`` scores. Shards take whole blocks of :data:`EVALUATION_BLOCK_CASES` cases (the
    leaves of the evaluation digest's trees, so a shard hashes exactly the blocks it scores):
    shard ``index`` has blocks ``index * B // count`` to ``(index + 1) * B // count - 1`` of
    the ``B`` blocks. The ranges of 0..count-1 cover 0..case_count-1 exactly once and differ
    in size by at most one block (a shard may be empty when there are fewer blocks than
    shards)."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is not in 0..{count - 1}")
    blocks = evaluation_block_count(case_count)
    first, end = index * blocks // count, (index + 1) * blocks // count
    return (
        min(first * EVALUATION_BLOCK_CASES, case_count),
        min(end * EVALUATION_BLOCK_CASES, case_count),
    )


def double_of(latency: Decimal) -> float:
    """The double a latency is (it was read as one: ``numbers.scored_value``).

    Raises:
        PartialError: a value that is not exactly a double.
    """
    value = float(latency)
    if scored_value(value) != latency:
        raise PartialError(f"latency {latency} is not a double (JSON numbers are read as doubles)")
    return value


@dataclass(frozen=True, slots=True)
class RunCounters:
    """What every partial of a run holds by value: the run, its :data:`COUNTERS` and its exact
    cost total."""

    arm_id: str
    run_index: int
    cases: int
    correct: int
    positives: int
    true_positives: int
    negatives: int
    false_positives: int
    abstentions: int
    errors: int
    cost_total_usd: Decimal
    cost_unknown_cases: int
    latency_unknown_cases: int


@dataclass(frozen=True, slots=True)
class RunPartial(RunCounters):
    """One run's scoring state over some of its cases (see the module docstring)."""

    #: The largest known latencies (doubles), descending, at most the run's :func:`tail_size`
    #: (a merged run's: a :class:`UnionTail`).
    latency_tail: Sequence[float]

    def to_doc(self) -> RunPartialDoc:
        return RunPartialDoc(
            arm_id=self.arm_id,
            run_index=self.run_index,
            cost_total_usd=f"{self.cost_total_usd:f}",
            latency_tail_root=tail_root(tail_bytes(self.latency_tail)),
            **{name: getattr(self, name) for name in COUNTERS},
        )


#: The counters of a partial (and of the tally that folds one): they add.
COUNTERS: Final = (
    "cases",
    "correct",
    "positives",
    "true_positives",
    "negatives",
    "false_positives",
    "abstentions",
    "errors",
    "cost_unknown_cases",
    "latency_unknown_cases",
)


def exact_sum(values: Sequence[Decimal]) -> Decimal:
    """The exact sum of ``values``; :class:`PartialError` if it cannot be represented."""
    try:
        with decimal.localcontext(EXACT):
            return sum(values, Decimal(0))
    except decimal.DecimalException as exc:
        raise PartialError(f"a cost sum cannot be computed exactly: {exc!r}") from None


def require_reportable_cost(total: Decimal) -> Decimal:
    """``total``, a run's known costs, unless it is beyond the largest double: no report's
    JSON number could state it (:class:`PartialError`; ``corpus check`` refuses it too)."""
    if beyond_double(total):
        raise PartialError(
            f"its known costs sum to {total:.6E} USD, beyond the largest double (about "
            "1.8E+308): no report can state that total"
        )
    return total


def merge_partials(parts: Sequence[RunPartial], *, tail: int) -> RunPartial:
    """One run's partial over the union of the parts' cases.

    Raises:
        PartialError: no parts, parts of different runs, an inexact sum, or costs beyond
            the largest double.
    """
    first, counters = _summed_counters(parts)
    return RunPartial(
        arm_id=first.arm_id,
        run_index=first.run_index,
        cost_total_usd=require_reportable_cost(exact_sum([part.cost_total_usd for part in parts])),
        latency_tail=largest_of_union([part.latency_tail for part in parts], tail),
        **counters,
    )


def _summed_counters(parts: Sequence[RunCounters]) -> tuple[RunCounters, dict[str, int]]:
    """The first of ``parts`` and the sums of their :data:`COUNTERS`, once they are partials
    of one run."""
    if not parts:
        raise PartialError("no partials to merge")
    first = parts[0]
    for part in parts[1:]:
        if (part.arm_id, part.run_index) != (first.arm_id, first.run_index):
            raise PartialError(
                f"partials of runs {first.arm_id}/{first.run_index} and "
                f"{part.arm_id}/{part.run_index} cannot be merged"
            )
    return first, {name: sum(getattr(part, name) for part in parts) for name in COUNTERS}


def largest_of_union(tails: Sequence[Sequence[float]], count: int) -> UnionTail:
    """The ``count`` largest values of the union of descending ``tails``, descending."""
    return UnionTail(tails, count)


class UnionTail(Sequence[float]):
    """The ``count`` largest values of the union of descending tails, descending: the tail of
    a merged run, equal to sorting the union and keeping ``count`` (the tests compare both).

    The union of N shards' tails is N times the tail it is cut to, and a report reads one
    value of it, the last (the run's p95): :meth:`last` finds it by bisection over the
    doubles' bit patterns (for non-negative doubles their order is the values' order), each
    step counting the values of at least a candidate with one C bisect per tail, so about 60
    bisects per tail instead of a sort of the union. Any other use builds the whole tail
    once: the values above the last (fewer than ``count``: the tails' heads) sorted, then the
    last repeated.
    """

    __slots__ = ("_count", "_last", "_tails", "_values")

    def __init__(self, tails: Sequence[Sequence[float]], count: int) -> None:
        self._tails = tails
        self._count = max(0, min(count, sum(map(len, tails))))
        self._last: float | None = None
        self._values: tuple[float, ...] | None = None

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[float, ...]: ...
    def __getitem__(self, index: int | slice) -> float | tuple[float, ...]:
        if isinstance(index, int) and self._count and index in (-1, self._count - 1):
            return self.last()
        return self.values()[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return self.values() == tuple(other)

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        return f"UnionTail({self.values()!r})"

    def last(self) -> float:
        """The ``count``-th largest value of the union."""
        if self._last is None:
            if not self._count:
                raise IndexError("an empty tail has no last value")
            tails = self._tails

            def at_least(value: float) -> int:
                # In a descending tail, the values >= v are those whose negation is <= -v.
                return sum(bisect.bisect_right(tail, -value, key=operator.neg) for tail in tails)

            # At least ``count`` values are >= double(low), fewer are >= double(high): so for
            # tails of finite values that are not negative, which checked tails are.
            if at_least(0.0) < self._count or at_least(math.inf):
                raise PartialError("a latency tail holds a negative or infinite value")
            low, high = 0, _INFINITY_BITS
            while high - low > 1:
                middle = (low + high) // 2
                if at_least(_double(middle)) >= self._count:
                    low = middle
                else:
                    high = middle
            self._last = _double(low)
        return self._last

    def values(self) -> tuple[float, ...]:
        """The whole tail."""
        if self._values is None:
            if not self._count:
                self._values = ()
            else:
                last = self.last()
                # The heads of descending tails, sorted descending: timsort merges the runs
                # (it reverses the list and finds ascending runs, whatever their ties).
                above = sorted(
                    itertools.chain.from_iterable(
                        tail[: bisect.bisect_left(tail, -last, key=operator.neg)]
                        for tail in self._tails
                    ),
                    reverse=True,
                )
                self._values = (*above, *itertools.repeat(last, self._count - len(above)))
        return self._values


#: The bit pattern of +infinity: every finite non-negative double's pattern is below it.
_INFINITY_BITS: Final = 0x7FF0000000000000
_BITS: Final = struct.Struct("<Q")
_DOUBLE: Final = struct.Struct("<d")


def _double(bits: int) -> float:
    value: float = _DOUBLE.unpack(_BITS.pack(bits))[0]
    return value


class RunPartialDoc(SnakeWireModel):
    """A :class:`RunPartial` on the wire (snake_case, like the evaluation report): its
    counters and cost total by value, its latency tail by its Merkle root."""

    arm_id: str = Field(min_length=1, max_length=20)
    run_index: int = Field(ge=1, le=5)
    cases: int = Field(ge=0)
    correct: int = Field(ge=0)
    positives: int = Field(ge=0)
    true_positives: int = Field(ge=0)
    negatives: int = Field(ge=0)
    false_positives: int = Field(ge=0)
    abstentions: int = Field(ge=0)
    errors: int = Field(ge=0)
    #: The exact sum of the known costs, as decimal text without exponent.
    cost_total_usd: str = Field(min_length=1, max_length=_MAX_SUM_TEXT, pattern=_SUM_TEXT.pattern)
    cost_unknown_cases: int = Field(ge=0)
    latency_unknown_cases: int = Field(ge=0)
    #: The Merkle root of the tail (descending doubles, :func:`tails.tail_root`); the tail has
    #: the part's ``tail`` largest known latencies, so its length follows from the counters.
    latency_tail_root: Sha256Digest

    @model_validator(mode="after")
    def _consistent(self) -> RunPartialDoc:
        if self.positives + self.negatives != self.cases:
            raise ValueError("positives + negatives is not cases")
        if self.true_positives > self.positives or self.false_positives > self.negatives:
            raise ValueError("more true or false positives than positives or negatives")
        for name in ("correct", "abstentions", "errors", "cost_unknown_cases"):
            if getattr(self, name) > self.cases:
                raise ValueError(f"{name} exceeds cases")
        if self.latency_unknown_cases > self.cases:
            raise ValueError("latency_unknown_cases exceeds cases")
        return self

    def to_committed(self, *, tail: int) -> CommittedPartial:
        """The partial as committed: its tail holds ``min(tail, known latencies)`` values."""
        return CommittedPartial(
            arm_id=self.arm_id,
            run_index=self.run_index,
            cost_total_usd=Decimal(self.cost_total_usd),
            tail_length=min(tail, self.cases - self.latency_unknown_cases),
            tail_root=self.latency_tail_root,
            **{name: getattr(self, name) for name in COUNTERS},
        )


@dataclass(frozen=True, slots=True)
class CommittedPartial(RunCounters):
    """A part's partial as a shard attests it: counters and cost total by value, its latency
    tail by length and Merkle root (opened at the p95 by a merge)."""

    tail_length: int
    tail_root: str


class KnownLast(Sequence[float]):
    """The tail of a merged run when only its last value is known (the p95, proven by the
    shards' openings): ``count`` long; any other value is not known and raises."""

    __slots__ = ("_count", "_last")

    def __init__(self, count: int, last: float) -> None:
        self._count = count
        self._last = last

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[float]: ...
    def __getitem__(self, index: int | slice) -> float | Sequence[float]:
        if isinstance(index, int) and self._count and index in (-1, self._count - 1):
            return self._last
        raise IndexError("a merged tail knows its last value (the p95) only")


def merge_committed(
    parts: Sequence[CommittedPartial], *, tail: int, p95: float | None
) -> RunPartial:
    """One run's partial over the union of the parts' cases, its tail known by its last value
    ``p95`` (which the caller proved from the parts' openings; None when the run has unknown
    latencies, so no p95).

    Raises:
        PartialError: no parts, parts of different runs, an inexact sum, costs beyond the
            largest double, or a p95 given or missing against the latencies known.
    """
    first, counters = _summed_counters(parts)
    known_all = counters["latency_unknown_cases"] == 0 and counters["cases"] > 0
    where = f"run {first.arm_id}/{first.run_index}"
    if known_all and p95 is None:
        raise PartialError(f"{where}: every latency is known and no p95 is opened")
    if not known_all and p95 is not None:
        raise PartialError(f"{where}: a p95 is opened though some latencies are unknown")
    return RunPartial(
        arm_id=first.arm_id,
        run_index=first.run_index,
        cost_total_usd=require_reportable_cost(exact_sum([part.cost_total_usd for part in parts])),
        latency_tail=() if p95 is None else KnownLast(tail, p95),
        **counters,
    )
