"""Numbers in scoring: what a corpus number is worth, exact rounding, JSON rendering.

A number in a corpus file is the double its text denotes (the double the digests hash), and
scoring reads the exact decimal of that double's RFC 8785 text (:func:`scored_value`; the
replay's JSON hooks in ``runner.corpus.numbers`` refuse what no double represents). Counts
are integers and money is ``Decimal``, so every reported value is computed exactly and
rounded once, half to even; JSON numbers are produced from those decimals, whose short digit
strings survive the float round trip unchanged.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Final

_ZERO: Final = Decimal(0)

POINT_DECIMALS: Final = 3
MONEY_DECIMALS: Final = 9  # nano-dollars: enough for per-case API prices


def round_fraction(value: Fraction, decimals: int) -> Decimal:
    """``value`` rounded half to even at ``decimals`` places, exactly."""
    scaled = round(value * 10**decimals)  # Fraction.__round__ rounds half to even
    return Decimal(scaled).scaleb(-decimals)


def points(part: int, whole: int) -> Decimal | None:
    """``100 * part / whole`` in points with three decimals; None for an empty whole."""
    if whole == 0:
        return None
    return round_fraction(Fraction(100 * part, whole), POINT_DECIMALS)


def money_per_case(total: Decimal, cases: int) -> Decimal:
    return round_fraction(Fraction(total) / cases, MONEY_DECIMALS)


def beyond_double(value: Decimal) -> bool:
    """Whether ``value`` is beyond the largest double, so no JSON number of a report can state
    it: a run's known costs must sum to less (``corpus check`` and the replay refuse it)."""
    return math.isinf(float(value))


def json_number(value: Decimal | None) -> float | None:
    """A JSON number for a rounded decimal (at most 15 significant digits round-trip)."""
    if value is None:
        return None
    return float(value)


def text(value: Decimal | None, *, places: int | None = None) -> str:
    """Human text for a value inside details and diagnoses."""
    if value is None:
        return "null"
    if places is not None:
        return f"{value:.{places}f}"
    return f"{value.normalize():f}"


def scored_value(value: float) -> Decimal:
    """The exact decimal scoring uses for a parsed JSON number: the value of its RFC 8785 text.

    ``repr`` writes a double's shortest round-trip digits, the same digits RFC 8785 writes
    (only the layout differs, e.g. ``1e-05`` vs ``0.00001``), so the values are equal. Negative
    zero is 0, as RFC 8785 writes it.
    """
    if isinstance(value, int):
        return Decimal(value)
    return Decimal(repr(value)) if value else _ZERO
