"""What a number in a corpus file means — for its digests and for scoring, defined once.

Every JSON number in a corpus file is the IEEE-754 double nearest to its text: RFC 8785
(whose bytes the corpus checksum, the evaluation digest and ``marks_ref`` hash) and I-JSON
read numbers that way, and every JSON parser rounds the same way. Scoring reads the *same*
double, never the text: a cost, latency, threshold or spread limit is the exact decimal value
of the text RFC 8785 writes for the double (the shortest digits that round-trip:
``attestation.scoring.numbers.scored_value``, shared with the verifier). So the
digests determine every value scoring uses, and two corpora with equal digests score alike:
``50.000000000000000001`` is the double 50 for the digest and for the pass mark alike, and
``1e-400`` is 0 in both.

Refused, because they have no double: integers beyond +-(2**53-1) (I-JSON; RFC 8785 refuses
them too) and magnitudes beyond the largest double (``1e400``).
"""

from __future__ import annotations

import math

from attestation.encoding.canonical import MAX_SAFE_INTEGER


class NumberRangeError(ValueError):
    """A JSON number literal that no IEEE double represents."""


def parse_float(text: str) -> float:
    """A JSON number with a fraction or an exponent: the nearest double (``json`` hook)."""
    value = float(text)
    if math.isinf(value):
        raise NumberRangeError(f"number {text} is beyond the range of a double")
    return value


def parse_int(text: str) -> int:
    """A JSON integer; refused beyond +-(2**53-1), where doubles skip integers (``json`` hook)."""
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise NumberRangeError(
            f"integer {text} is outside the I-JSON range +-(2**53-1) that a double holds exactly"
        )
    return value
