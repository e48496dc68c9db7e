"""RunTally.add_batch (columns, numbers as parsed) folds exactly like add (one case at a time,
numbers as scored decimals): the same partial, down to the text of the cost total."""

from __future__ import annotations

import re
import sys
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.scoring import metrics
from attestation.scoring.metrics import RunTally
from attestation.scoring.numbers import scored_value
from attestation.scoring.partial import PartialError, RunPartial, tail_size

Row = tuple[str, str | None, bool, int | float | None, int | float | None]

labels = st.sampled_from(["flag", "clear", "hold"])
# Numbers as a JSON parser hands them over: integers, and doubles of every layout scoring
# distinguishes (integral 2.0 vs 2, zero and -0.0, tiny, huge, long).
raw_numbers = st.one_of(
    st.integers(min_value=0, max_value=2**53 - 1),
    st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 0.0, -0.0, 2, 2.0, 1e-7, 2.5e-6, 1e16, 1e22, 0.1, 0.30000000000000004]),
)
rows = st.tuples(
    labels,
    st.one_of(st.none(), labels, st.just("other")),
    st.booleans(),
    st.one_of(st.none(), raw_numbers),
    st.one_of(st.none(), raw_numbers),
)


def one_by_one(data: list[Row], *, tail: int | None, abstain: str | None) -> RunPartial:
    tally = RunTally("flag", abstain, tail=tail)
    for label, prediction, error, cost, latency in data:
        tally.add(
            label,
            prediction,
            has_error=error,
            cost_usd=None if cost is None else scored_value(cost),
            latency_ms=None if latency is None else scored_value(latency),
        )
    return tally.partial("A1", 1)


def in_batches(data: list[Row], *, tail: int | None, abstain: str | None, size: int) -> RunPartial:
    tally = RunTally("flag", abstain, tail=tail)
    for start in range(0, len(data), size):
        batch = data[start : start + size]
        tally.add_batch(
            [row[0] for row in batch],
            [None if row[2] else row[1] for row in batch],
            [row[3] for row in batch],
            [row[4] for row in batch],
        )
    return tally.partial("A1", 1)


@settings(max_examples=300)
@given(
    data=st.lists(rows, min_size=1, max_size=80),
    size=st.integers(min_value=1, max_value=30),
    known_tail=st.booleans(),
    abstain=st.sampled_from([None, "hold"]),
)
def test_batches_fold_like_single_cases(
    data: list[Row], size: int, known_tail: bool, abstain: str | None
) -> None:
    tail = tail_size(len(data)) if known_tail else None
    try:
        expected = one_by_one(data, tail=tail, abstain=abstain)
    except PartialError as exc:
        # Costs summing beyond the largest double: refused alike (no report states them).
        assert sum(scored_value(row[3]) for row in data if row[3] is not None) > Decimal(
            repr(sys.float_info.max)
        )
        with pytest.raises(PartialError, match=f"^{re.escape(str(exc))}$"):
            in_batches(data, tail=tail, abstain=abstain, size=size)
        return
    got = in_batches(data, tail=tail, abstain=abstain, size=size)
    assert got == expected
    assert got.to_doc() == expected.to_doc()  # the wire text, trailing zeros included


def test_a_long_run_cuts_its_latency_tail_and_counts_distinct_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "_MAX_DISTINCT_COSTS", 10)
    data: list[Row] = [
        ("flag" if n % 3 else "clear", "flag", n % 17 == 0, n % 23 * 0.001, (n * 7919) % 1000 + 0.5)
        for n in range(20_000)
    ]
    tail = tail_size(len(data))
    assert in_batches(data, tail=tail, abstain=None, size=997).to_doc() == (
        one_by_one(data, tail=tail, abstain=None).to_doc()
    )


def test_columns_must_line_up() -> None:
    tally = RunTally("flag", None)
    with pytest.raises(ValueError, match="one label, answer, cost and latency per case"):
        tally.add_batch(["flag"], [], [None], [None])
