"""The tail selected from doubles (``tail_select``, ``RunTally.add_batch``) equals the one the
exact sort of the numbers as parsed gives: ints and floats mixed, ties, huge ints, -0.0."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.scoring import metrics, tail_select
from attestation.scoring.metrics import RunTally
from attestation.scoring.partial import KnownLast, RunPartial, tail_size
from attestation.scoring.tail_select import cut_to_largest, kth_largest, largest_descending

# Numbers as a JSON parser hands them over, with many ties and ints beyond 2**53 that share
# a double with their neighbours (the largest int a double holds is below 2**1024).
raw_numbers = st.one_of(
    st.integers(min_value=0, max_value=40),
    st.sampled_from([0, 0.0, -0.0, 2, 2.0, 2**53, 2**53 + 1, float(2**53), 1e308, 2**1023]),
    st.integers(min_value=2**53 - 4, max_value=2**53 + 4),
    st.integers(min_value=0, max_value=int(1.7e308)),
    st.floats(min_value=0, allow_nan=False, allow_infinity=False),
)
tiny_limits = st.sampled_from([(4, 4, 1), (8, 2, 0), (16, 8, 2), (4096, 1024, 16)])


def old_exact_tail(values: list[int | float], k: int) -> list[float]:
    """The selection before doubles: sort the numbers as parsed, then their doubles."""
    top = sorted(values, reverse=True)[:k]
    return sorted((float(v) + 0.0 for v in top), reverse=True)


@contextmanager
def limits(sort_limit: int, sample: int, margin: int) -> Iterator[None]:
    """Small selection limits, so that short lists go through every narrowing branch."""
    with mock.patch.multiple(tail_select, _SORT_LIMIT=sort_limit, _SAMPLE=sample, _MARGIN=margin):
        yield


@settings(max_examples=400)
@given(values=st.lists(raw_numbers, min_size=1, max_size=200), data=st.data(), sizes=tiny_limits)
def test_the_selection_equals_the_exact_sort(
    values: list[int | float], data: st.DataObject, sizes: tuple[int, int, int]
) -> None:
    k = data.draw(st.integers(min_value=1, max_value=len(values)))
    expected = old_exact_tail(values, k)
    held = array("d", values)
    with limits(*sizes):
        assert kth_largest(held, k) == expected[-1]
        assert list(map(repr, largest_descending(held, k))) == list(map(repr, expected))
        kept, last = cut_to_largest(held, k)
    assert sorted(kept, reverse=True) == expected
    assert last == expected[-1]
    assert list(held) == [float(v) for v in values]  # not changed


def test_ties_and_two_values_at_full_size() -> None:
    same = array("d", [5.0]) * 10_000
    assert kth_largest(same, 500) == 5.0
    assert cut_to_largest(same, 500) == (array("d", [5.0]) * 500, 5.0)
    two = array("d", [1.0, 2.0]) * 5_000
    assert kth_largest(two, 5_000) == 2.0
    assert kth_largest(two, 5_001) == 1.0
    spread = array("d", ((n * 7919) % 10_007 for n in range(30_000)))
    assert largest_descending(spread, 1_500) == sorted(spread, reverse=True)[:1_500]
    assert largest_descending(spread, 12_000) == sorted(spread, reverse=True)[:12_000]  # sorted
    signed = array("d", [-0.0, 0.0, 1.0, -0.0])
    assert list(map(repr, largest_descending(signed, 3))) == ["1.0", "0.0", "0.0"]


@pytest.mark.parametrize("k", [0, 4])
def test_a_rank_outside_the_values_is_refused(k: int) -> None:
    with pytest.raises(ValueError, match=f"^no {k}-th largest of 3 values$"):
        kth_largest(array("d", [1.0, 2.0, 3.0]), k)


def folded(latencies: list[int | float | None], size: int, *, last_only: bool) -> RunPartial:
    tally = RunTally("flag", None, tail=tail_size(len(latencies)))
    for start in range(0, len(latencies), size):
        batch = latencies[start : start + size]
        tally.add_batch(["flag"] * len(batch), ["flag"] * len(batch), [None] * len(batch), batch)
    return tally.partial("A1", 1, last_only=last_only)


@settings(max_examples=300)
@given(
    latencies=st.lists(st.one_of(st.none(), raw_numbers), min_size=1, max_size=300),
    size=st.integers(min_value=1, max_value=40),
    sizes=tiny_limits,
)
def test_a_tally_keeps_the_exact_tail_across_cuts(
    latencies: list[int | float | None], size: int, sizes: tuple[int, int, int]
) -> None:
    known = [v for v in latencies if v is not None]
    tail = tail_size(len(latencies))
    expected = old_exact_tail(known, tail)
    # A chunk of 1 cuts the kept latencies whenever they pass the tail by a quarter of it.
    with limits(*sizes), mock.patch.object(metrics, "_COST_CHUNK", 1):
        whole = folded(latencies, size, last_only=False)
        last = folded(latencies, size, last_only=True)
    assert list(map(repr, whole.latency_tail)) == list(map(repr, expected))
    if len(known) < len(latencies) or not expected:
        assert last.latency_tail == ()
    else:
        assert isinstance(last.latency_tail, KnownLast)
        assert len(last.latency_tail) == len(expected)
        assert repr(last.latency_tail[-1]) == repr(expected[-1])


def test_an_int_beyond_the_doubles_is_refused_when_folded() -> None:
    tally = RunTally("flag", None, tail=1)
    with pytest.raises(OverflowError):
        tally.add_batch(["flag"], ["flag"], [None], [2**1024])
