"""Run partials: cut anywhere, merged back exactly; tails, ranges and the wire form."""

from __future__ import annotations

import dataclasses
import decimal
import hashlib
import itertools
import math
import struct
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.scoring.metrics import RunTally
from attestation.scoring.numbers import scored_value
from attestation.scoring.partial import (
    PartialError,
    RunPartial,
    RunPartialDoc,
    largest_of_union,
    merge_committed,
    merge_partials,
    shard_range,
    tail_size,
)
from attestation.scoring.tails import tail_bytes, tail_root

Case = tuple[str, str | None, bool, Decimal | None, Decimal | None]

labels = st.sampled_from(["flag", "clear", "hold"])
# Numbers as scoring reads them: the exact decimal of a double (numbers.scored_value).
doubles = st.floats(min_value=0, allow_nan=False, allow_infinity=False).map(scored_value)
# Costs are summed exactly whatever their digits.
costs = st.one_of(doubles, st.decimals(min_value=0, max_value=10**6, places=9, allow_nan=False))
cases = st.tuples(
    labels,
    st.one_of(st.none(), labels),
    st.booleans(),
    st.one_of(st.none(), costs),
    st.one_of(st.none(), doubles),
)


def fold(rows: list[Case], *, tail: int) -> RunPartial:
    tally = RunTally("flag", "hold", tail=tail)
    for label, prediction, error, cost, latency in rows:
        tally.add(label, prediction, has_error=error, cost_usd=cost, latency_ms=latency)
    return tally.partial("A1", 2)


def _shards(rows: list[Case], count: int, tail: int) -> list[RunPartial]:
    return [fold(rows[slice(*shard_range(i, count, len(rows)))], tail=tail) for i in range(count)]


@given(rows=st.lists(cases, max_size=60), count=st.integers(min_value=1, max_value=9))
def test_the_merge_of_shards_is_the_whole(rows: list[Case], count: int) -> None:
    tail = tail_size(len(rows))
    try:
        whole = fold(rows, tail=tail)
    except PartialError:
        # Costs beyond the largest double: a shard's, or the merge of the shards', refused too.
        with pytest.raises(PartialError, match=r"^its known costs sum to "):
            merge_partials(_shards(rows, count, tail), tail=tail)
        return
    parts = []
    for index in range(count):
        first, end = shard_range(index, count, len(rows))
        parts.append(fold(rows[first:end], tail=tail))
    assert merge_partials(parts, tail=tail) == whole
    # and through the wire form: counters and costs by value, each tail by its root; the
    # merged tail by its last value (the p95, which a merge proves from the roots)
    docs = [RunPartialDoc.model_validate(part.to_doc().model_dump()) for part in parts]
    committed = [doc.to_committed(tail=tail) for doc in docs]
    for part, wire in zip(parts, committed, strict=True):
        assert wire.tail_root == tail_root(tail_bytes(part.latency_tail))
        assert wire.tail_length == len(part.latency_tail)
    known_all = whole.latency_unknown_cases == 0 and whole.cases > 0
    p95 = whole.latency_tail[tail - 1] if known_all else None
    merged = merge_committed(committed, tail=tail, p95=p95)
    assert dataclasses.replace(merged, latency_tail=()) == dataclasses.replace(
        whole, latency_tail=()
    )
    if p95 is not None:
        assert len(merged.latency_tail) == tail
        assert merged.latency_tail[tail - 1] == p95


@given(latencies=st.lists(doubles, min_size=1, max_size=300))
def test_the_tail_holds_the_nearest_rank_p95(latencies: list[Decimal]) -> None:
    n = len(latencies)
    tail = tail_size(n)
    ordered = sorted(latencies)
    p95 = ordered[-(-95 * n // 100) - 1]  # the ceil(0.95 n)-th smallest
    rows: list[Case] = [("flag", "flag", False, None, value) for value in latencies]
    assert scored_value(fold(rows, tail=tail).latency_tail[tail - 1]) == p95


def test_a_latency_that_is_not_a_double_is_refused() -> None:
    rows: list[Case] = [("flag", "flag", False, None, Decimal("0.10000000000000000001"))]
    with pytest.raises(PartialError, match="is not a double"):
        fold(rows, tail=1)


def test_tail_sizes() -> None:
    assert [tail_size(n) for n in (0, 1, 8, 19, 20, 21, 100, 400_000)] == [
        0,
        1,
        1,
        1,
        2,
        2,
        6,
        20_001,
    ]


@pytest.mark.parametrize(
    ("count", "cases"), [(1, 0), (3, 8), (7, 8), (11, 8), (3, 1100), (7, 3000), (8, 400_000)]
)
def test_shard_ranges_are_whole_blocks_covering_every_case_once(count: int, cases: int) -> None:
    ranges = [shard_range(index, count, cases) for index in range(count)]
    assert ranges[0][0] == 0
    assert ranges[-1][1] == cases
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(count - 1))
    # every edge but the end of the cases is a block edge; sizes differ by a block at most
    assert all(end % 256 == 0 or end == cases for _, end in ranges)
    sizes = [end - first for first, end in ranges[:-1]]
    last = ranges[-1][1] - ranges[-1][0]
    assert max([*sizes, last]) - min(sizes or [last]) <= 256


def test_shard_ranges_of_400000_cases() -> None:
    ranges = [shard_range(index, 8, 400_000) for index in range(8)]
    assert ranges[:3] == [(0, 49_920), (49_920, 99_840), (99_840, 150_016)]
    assert ranges[-1] == (349_952, 400_000)


def test_shard_index_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shard index 3 is not in 0\.\.2"):
        shard_range(3, 3, 10)


def test_cost_sums_are_exact_where_the_default_context_rounds() -> None:
    big, small = Decimal("1e20"), Decimal("0.000000001")
    assert big + small == big  # 28 digits: the default context drops the small cost
    rows: list[Case] = [("flag", "flag", False, big, None), ("flag", "flag", False, small, None)]
    assert fold(rows, tail=1).cost_total_usd == Decimal("100000000000000000000.000000001")
    halves = [fold(rows[:1], tail=1), fold(rows[1:], tail=1)]
    assert merge_partials(halves, tail=1).cost_total_usd == Decimal(
        "100000000000000000000.000000001"
    )


def test_a_sum_that_cannot_be_exact_raises() -> None:
    huge = Decimal("1e999999")
    rows: list[Case] = [("flag", "flag", False, huge, None)] * 10
    with pytest.raises(PartialError, match="cannot be computed exactly"):
        fold(rows, tail=1)
    assert decimal.getcontext().prec == 28  # the exact context never leaks


def test_partials_of_different_runs_are_not_merged() -> None:
    one = fold([], tail=0)
    with pytest.raises(PartialError, match="runs A1/2 and A1/1 cannot be merged"):
        merge_partials([one, dataclasses.replace(one, run_index=1)], tail=0)
    with pytest.raises(PartialError, match="no partials"):
        merge_partials([], tail=0)


def test_wire_form_is_compact_and_exact() -> None:
    rows: list[Case] = [
        ("flag", "flag", False, Decimal("0.0020"), Decimal("812.37")),
        ("clear", "flag", False, Decimal("0.002"), Decimal("1E+3")),
        ("clear", None, True, None, None),
    ]
    doc = fold(rows, tail=2).to_doc()
    assert doc.cost_total_usd == "0.0040"
    # one block: the root is the leaf hash of the tail's big-endian doubles (RFC 6962)
    leaf = hashlib.sha256(b"\x00" + struct.pack(">2d", 1000.0, 812.37)).hexdigest()
    assert doc.latency_tail_root == f"sha256:{leaf}"
    assert doc.model_dump()["false_positives"] == 1


def test_wire_counts_must_be_consistent() -> None:
    with pytest.raises(ValueError, match="positives \\+ negatives is not cases"):
        RunPartialDoc(
            arm_id="A1",
            run_index=1,
            cases=3,
            correct=0,
            positives=1,
            true_positives=0,
            negatives=1,
            false_positives=0,
            abstentions=0,
            errors=0,
            cost_total_usd="0",
            cost_unknown_cases=0,
            latency_unknown_cases=0,
            latency_tail_root="sha256:" + "0" * 64,
        )


# The union of shard tails: bisection for the k-th largest, equal to sorting the union.
tail_values = st.one_of(
    st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 5e-324, 1.0, 1.7976931348623157e308]),
)


@given(
    tails=st.lists(st.lists(tail_values, max_size=40), min_size=1, max_size=9),
    count=st.integers(min_value=0, max_value=400),
)
def test_the_largest_of_a_union_of_tails_are_those_of_its_sort(
    tails: list[list[float]], count: int
) -> None:
    descending = [sorted(tail, reverse=True) for tail in tails]
    expected = sorted(itertools.chain.from_iterable(descending), reverse=True)[:count]
    assert list(largest_of_union(descending, count)) == expected


def test_the_largest_of_a_union_with_ties_across_tails() -> None:
    tails = [[9.0, 7.0, 7.0, 7.0], [8.0, 7.0, 7.0], [7.0, 1.0]]
    assert largest_of_union(tails, 3) == (9.0, 8.0, 7.0)
    assert largest_of_union(tails, 7) == (9.0, 8.0, 7.0, 7.0, 7.0, 7.0, 7.0)
    assert largest_of_union(tails, 8) == (9.0, 8.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0)
    assert largest_of_union(tails, 9) == (9.0, 8.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 1.0)


@pytest.mark.parametrize("tails", [[[3.0, -1.0], [2.0]], [[math.inf, 1.0], [2.0]]])
def test_a_union_of_tails_outside_the_latency_range_is_refused(tails: list[list[float]]) -> None:
    with pytest.raises(PartialError, match="negative or infinite"):
        largest_of_union(tails, 3)[-1]
