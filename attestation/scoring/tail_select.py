"""The largest latencies of a run, selected from doubles held in an ``array('d')``.

A run's tail is 5% of its cases (200,000 at 4M): held as Python numbers it costs 32 bytes a
value, and a sort copies it again. Here the values stay 8-byte doubles; a selection narrows
them with C-level passes (``filter`` and ``map`` of ``operator`` comparisons, one transient
float at a time) around pivots read from a small sorted sample, and sorts Python floats only
once at most :data:`_SORT_LIMIT` remain. ``largest_descending`` sorts them all when it keeps
a quarter or more of them (the Python floats are then at most four times the list it returns).

Every result is exact: the ``k``-th largest is the value a full descending sort puts at
``k - 1``. A selection over doubles equals one over the ints and floats they were read from
(``float`` is monotone, so it maps the ``k``-th largest to the ``k``-th largest).
"""

from __future__ import annotations

from array import array
from functools import partial
from itertools import repeat
from operator import eq, ge, gt, le, lt
from typing import Final

#: At most this many candidates are sorted as Python floats.
_SORT_LIMIT: Final = 4096
#: About this many candidates are sampled to place the pivots.
_SAMPLE: Final = 1024
#: The pivots sit this many sample ranks either side of the sought rank.
_MARGIN: Final = 16
#: ``largest_descending`` sorts every value when it keeps at least 1 in this many of them
#: (measured: a selection costs as much as the sort at about a fifth; 0.12 s against 0.20 s
#: for 200,000 of 500,000 latencies).
_SORT_ALL_SHARE: Final = 4


def doubles() -> array[float]:
    """An empty array of doubles (what a tally holds its latencies in)."""
    return array("d")


def _count(predicate: partial[bool], values: array[float]) -> int:
    return sum(map(predicate, values))


def _narrowed(values: array[float], k: int) -> tuple[array[float], int] | float:
    """One pass of the selection: fewer candidates and the rank sought among them, or the
    ``k``-th largest itself when a pivot is it."""
    size = len(values)
    sample = sorted(values[:: size // _SAMPLE + 1], reverse=True)
    rank = (k - 1) * len(sample) // size
    hi = sample[max(rank - _MARGIN, 0)]
    lo = sample[min(rank + _MARGIN, len(sample) - 1)]
    above = _count(partial(lt, hi), values)  # hi < x
    below = _count(partial(gt, lo), values)  # x < lo
    band = size - above - below
    if k <= above:
        return array("d", filter(partial(lt, hi), values)), k
    if k > above + band:
        return array("d", filter(partial(gt, lo), values)), k - above - band
    if lo == hi:
        return lo
    if band < size:
        between = filter(partial(le, lo), filter(partial(ge, hi), values))
        return array("d", between), k - above
    # Every value lies in [lo, hi]: split at one pivot, which is among the values, so each
    # side excludes it and shrinks.
    pivot = sample[rank]
    greater = _count(partial(lt, pivot), values)
    if k <= greater:
        return array("d", filter(partial(lt, pivot), values)), k
    equal = _count(partial(eq, pivot), values)
    if k <= greater + equal:
        return pivot
    return array("d", filter(partial(gt, pivot), values)), k - greater - equal


def kth_largest(values: array[float], k: int) -> float:
    """The ``k``-th largest of ``values`` (``1 <= k <= len(values)``), as a full descending
    sort would place it. ``values`` is not changed."""
    if not 1 <= k <= len(values):
        raise ValueError(f"no {k}-th largest of {len(values)} values")
    candidates = values
    while len(candidates) > _SORT_LIMIT:
        narrowed = _narrowed(candidates, k)
        if isinstance(narrowed, float):
            return narrowed
        candidates, k = narrowed
    return sorted(candidates, reverse=True)[k - 1]


def cut_to_largest(values: array[float], k: int) -> tuple[array[float], float]:
    """The ``k`` largest of ``values`` (``1 <= k <= len(values)``) in no particular order,
    and the smallest of them: ties at that value are kept only as often as they are needed
    (zeros of either sign are one value)."""
    last = kth_largest(values, k)
    kept = array("d", filter(partial(lt, last), values))
    kept.extend(repeat(last, k - len(kept)))
    return kept, last


def largest_descending(values: array[float], k: int) -> list[float]:
    """The ``min(k, len(values))`` largest of ``values``, descending: equal to
    ``sorted(values, reverse=True)[:k]`` with each zero unsigned."""
    count = min(k, len(values))
    if count == 0:
        return []
    if count * _SORT_ALL_SHARE >= len(values):
        # A large part of the values (a shard's tail: 200,000 of 500,000 at 4M cases and
        # N = 8): one sort of them all is cheaper than selecting and then sorting.
        ordered = sorted(values, reverse=True)
        del ordered[count:]
    else:
        kept, _ = cut_to_largest(values, count)
        ordered = sorted(kept, reverse=True)
    return [value + 0.0 for value in ordered]
