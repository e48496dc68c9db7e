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
  doubles, exactly; on the wire it is their IEEE 754 bytes, which a verifier reads, checks
  and merges in C at any size.

The unsharded replay is the one-part case of the same code (:func:`merge_partials` of a
single partial is that partial), so a merged result equals the unsharded one by construction.
"""

from __future__ import annotations

import array
import base64
import binascii
import bisect
import decimal
import itertools
import math
import operator
import re
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, overload

from pydantic import Field, model_validator

from attestation.contracts import EVALUATION_BLOCK_CASES, SnakeWireModel, evaluation_block_count
from attestation.evaluation.numbers import beyond_double, scored_value

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
#: A tail of the largest possible run within the envelope limit, in base64.
_MAX_TAIL_TEXT: Final = 24 * 1024 * 1024


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


def tail_bytes(tail: Sequence[float]) -> bytes:
    """A tail on the wire: big-endian IEEE 754 binary64, in its order."""
    packed = array.array("d", tail)
    if sys.byteorder == "little":
        packed.byteswap()
    return packed.tobytes()


def tail_from_bytes(data: bytes) -> list[float]:
    packed = array.array("d")
    packed.frombytes(data)
    if sys.byteorder == "little":
        packed.byteswap()
    return packed.tolist()


@dataclass(frozen=True, slots=True)
class RunPartial:
    """One run's scoring state over some of its cases (see the module docstring)."""

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
    #: The largest known latencies (doubles), descending, at most the run's :func:`tail_size`
    #: (a merged run's: a :class:`UnionTail`).
    latency_tail: Sequence[float]

    def to_doc(self) -> RunPartialDoc:
        return RunPartialDoc(
            arm_id=self.arm_id,
            run_index=self.run_index,
            cost_total_usd=f"{self.cost_total_usd:f}",
            latency_tail=base64.b64encode(tail_bytes(self.latency_tail)).decode("ascii"),
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
    if not parts:
        raise PartialError("no partials to merge")
    first = parts[0]
    for part in parts[1:]:
        if (part.arm_id, part.run_index) != (first.arm_id, first.run_index):
            raise PartialError(
                f"partials of runs {first.arm_id}/{first.run_index} and "
                f"{part.arm_id}/{part.run_index} cannot be merged"
            )
    counters = {name: sum(getattr(part, name) for part in parts) for name in COUNTERS}
    return RunPartial(
        arm_id=first.arm_id,
        run_index=first.run_index,
        cost_total_usd=require_reportable_cost(exact_sum([part.cost_total_usd for part in parts])),
        latency_tail=largest_of_union([part.latency_tail for part in parts], tail),
        **counters,
    )


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


def _negative_zero(descending: list[float]) -> bool:
    """Whether a descending tail ending in zeros holds a negative zero (among its last)."""
    zeros = descending[descending.index(0.0) :]
    return any(math.copysign(1.0, value) < 0 for value in zeros)


#: The bit pattern of +infinity: every finite non-negative double's pattern is below it.
_INFINITY_BITS: Final = 0x7FF0000000000000
_BITS: Final = struct.Struct("<Q")
_DOUBLE: Final = struct.Struct("<d")


def _double(bits: int) -> float:
    value: float = _DOUBLE.unpack(_BITS.pack(bits))[0]
    return value


class RunPartialDoc(SnakeWireModel):
    """A :class:`RunPartial` on the wire (snake_case, like the evaluation report)."""

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
    #: The tail, descending: base64 of its big-endian IEEE 754 binary64 values.
    latency_tail: str = Field(max_length=_MAX_TAIL_TEXT)

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

    def to_partial(self, *, tail: int) -> RunPartial:
        """The partial; its tail must be the part's ``tail`` largest known latencies.

        Raises:
            PartialError: a latency text that is not a normalized decimal, a tail that is
                not descending, or one of the wrong length.
        """
        where = f"run {self.arm_id}/{self.run_index}"
        try:
            data = base64.b64decode(self.latency_tail, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise PartialError(f"{where}: the latency tail is not base64: {exc}") from None
        known = self.cases - self.latency_unknown_cases
        if len(data) != 8 * min(tail, known):
            raise PartialError(
                f"{where}: latency tail has {len(data) / 8:g} values, expected {min(tail, known)}"
            )
        values = tail_from_bytes(data)
        # Each check is one pass in C: a sum is finite only if every value is (a finite sum
        # may overflow: then each value is checked); a descending tail whose last value is
        # not negative has none; sorting a descending list is one linear pass (timsort finds
        # one run). A replay writes 0 for a zero latency, never -0 (its tally adds 0.0).
        if (
            (not math.isfinite(sum(values)) and not all(map(math.isfinite, values)))
            or (values and values[-1] < 0)
            or (values and values[-1] == 0 and _negative_zero(values))
        ):
            raise PartialError(f"{where}: a latency in the tail is negative or not finite")
        if values != sorted(values, reverse=True):
            raise PartialError(f"{where}: latency tail is not descending")
        return RunPartial(
            arm_id=self.arm_id,
            run_index=self.run_index,
            cost_total_usd=Decimal(self.cost_total_usd),
            latency_tail=tuple(values),
            **{name: getattr(self, name) for name in COUNTERS},
        )
