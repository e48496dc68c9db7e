"""RFC 8785 bytes of many JSON lines per call, in C (msgspec), with checks that hand every
line the fast path cannot vouch for to the exact path.

The exact path (``json`` with duplicate-key and number hooks, the pydantic models, the
pure-Python canonicalizer in ``attestation.encoding.canonical``) defines the result and writes
the error messages; this module only has to produce identical bytes faster, or decline. For a
chunk of complete lines it decodes every line into a typed msgspec ``Struct`` (validated in
C), re-encodes them with sorted keys, and accepts the result only if:

* every line holds exactly one JSON object (msgspec's line decoder would also accept several
  values on a line or one value across lines): the chunk starts with ``{`` and ends with
  ``}\\n``, every other newline sits between ``}`` and ``{``, and there are as many values as
  lines (inside a value ``}`` is never directly followed by ``{``, so such a newline can only
  separate top-level values);
* no object had a duplicate key (msgspec keeps the last one): the input and the output hold
  the same number of colons, counting ``\\u003a`` escapes in the input. Dropping a member
  drops at least its own colon, and strings keep theirs;
* no integer lies beyond +-(2**53-1) (msgspec keeps Python integers): no 16-digit integer
  token in the output;
* key order agrees: msgspec sorts keys by code point, RFC 8785 by UTF-16 code unit. The two
  orders differ only between U+E000..U+FFFF and U+10000.. (UTF-8 lead bytes EE-EF and F0-F4),
  so a chunk whose output holds both kinds of bytes declines.

Numbers go through :func:`msgspec_number`, the msgspec form of ``runner.corpus.numbers``: the
double is parsed by Python's ``float`` (correctly rounded) and returned so that msgspec writes
the RFC 8785 text: msgspec's layout for doubles equals RFC 8785's except integral values
(``12.0``) and magnitudes in [1e-6, 1e-5) (``1e-6``); those come back as ``int`` (below
2**53) or as ``msgspec.Raw`` holding RFC 8785's text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from attestation.encoding.canonical import format_number
from runner.corpus.numbers import parse_float

_INTEGRAL_LIMIT: Final = 2.0**53
_ENCODE_LINES: Final = msgspec.json.Encoder(order="sorted").encode_lines
_DECODE_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError)


def msgspec_number(text: str) -> float | Raw:
    """A JSON number with a fraction or exponent, as msgspec must hold it to write RFC 8785:
    the double ``runner.corpus.numbers.parse_float`` reads (called once per float, so the
    common case stays inline)."""
    value = float(text)
    if value.is_integer():
        if -_INTEGRAL_LIMIT < value < _INTEGRAL_LIMIT:
            return int(value)  # also -0.0 -> 0
        return Raw(format_number(value).encode("ascii"))
    if -1e-5 < value < 1e-5:
        if value >= 1e-6 or value <= -1e-6:
            return Raw(format_number(value).encode("ascii"))
    elif math.isinf(value):
        parse_float(text)  # raises NumberRangeError with the message
    return value


def number_value(value: float | Raw) -> float:
    """The int or double a value from :func:`msgspec_number` (or msgspec) stands for."""
    if type(value) is Raw:
        return float(bytes(value))
    return value


class CaseLine(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``cases.jsonl``: mirrors ``runner.corpus.models.Case`` (which writes the messages)."""

    case_id: Annotated[str, Meta(pattern=r"\A[a-z0-9-]{1,40}\Z")]
    label: Annotated[str, Meta(min_length=1, max_length=200)]
    input: Any = UNSET
    split: Literal["dev", "holdout", "adversarial"] | UnsetType = UNSET
    group: Annotated[str, Meta(min_length=1, max_length=60)] | UnsetType = UNSET


RecordT = TypeVar("RecordT")


class LineDecoder:
    """Typed decoder for one kind of JSON line."""

    def __init__(self, record_type: type[RecordT]) -> None:
        self._decode_lines = msgspec.json.Decoder(
            record_type, float_hook=msgspec_number
        ).decode_lines

    def canonical_chunk(self, chunk: bytes) -> tuple[Sequence[Any], bytes] | None:
        """The records of ``chunk`` (complete lines, each ending in ``\\n``) and the RFC 8785
        bytes of every line, each followed by ``\\n``; None when the exact path must decide."""
        # Every newline but the last must sit between "}" and "{" (two scans, not three).
        lines = chunk.count(b"\n")
        if chunk[:1] != b"{" or chunk[-2:] != b"}\n" or chunk.count(b"}\n{") != lines - 1:
            return None
        try:
            records = self._decode_lines(chunk)
        except _DECODE_ERRORS:
            return None
        if len(records) != lines:
            return None
        canonical = _ENCODE_LINES(records)
        if not output_matches_input(chunk, canonical):
            return None
        return records, canonical


_SHAPE: Final = bytes(
    ord("0") if chr(byte).isdigit() else ord("<") if byte in b":,[-" else ord(" ")
    for byte in range(128)
) + bytes(
    ord("B") if byte in (0xEE, 0xEF) else ord("A") if 0xF0 <= byte <= 0xF4 else ord(" ")
    for byte in range(128, 256)
)
_BIG_INTEGER: Final = b"<" + b"0" * 16


def colon_count(text: bytes) -> int:
    """The colons of JSON text, ``\\u003a`` escapes included (see the module docstring)."""
    count = text.count(b":")
    if b"\\u003" in text:
        count += text.count(b"\\u003a") + text.count(b"\\u003A")
    return count


def output_matches_input(source: bytes, canonical: bytes) -> bool:
    """The checks of the module docstring that compare msgspec's output with its input."""
    if colon_count(source) != canonical.count(b":"):
        return False
    shape = canonical.translate(_SHAPE)
    if _BIG_INTEGER in shape:
        return False
    return canonical.isascii() or not (b"A" in shape and b"B" in shape)
