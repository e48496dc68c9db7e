"""RFC 8785 JSON Canonicalization Scheme (JCS).

Every hashed JSON object in attested-replay (the envelope binding, the result, the corpus
cases) is hashed over these bytes. The verifier must not depend on anything but
``cryptography`` and ``pydantic``, so the canonicalizer lives here; the test suite checks it
against the RFC's examples and against the independent ``rfc8785`` package.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Final

from attestation.errors import MalformedError

# RFC 8785 section 3.2.2.3: numbers are IEEE-754 doubles; integers beyond 2**53 cannot be
# represented exactly, so they are refused rather than silently rounded.
MAX_SAFE_INTEGER: Final = 2**53 - 1


class CanonicalizationError(MalformedError):
    """A value that has no RFC 8785 form (NaN, infinity, huge integer, lone surrogate...)."""


def canonicalize(value: object) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON-compatible value.

    The walk is recursive: a value nested deeper than the interpreter's recursion limit allows
    (about 490 levels of objects) has no canonical form here and is refused as malformed, never
    left to escape as a ``RecursionError``. Envelopes never get that deep: their nesting is
    bounded before parsing (``MAX_ENVELOPE_JSON_DEPTH`` in :mod:`attestation.contracts`).

    Most values take :func:`_c_encoded` (``json``'s C encoder, which writes exactly these
    bytes for the values it accepts); whatever it cannot vouch for takes the exact walk below,
    which defines the result and writes every error.
    """
    fast = _c_encoded(value)
    return fast if fast is not None else exact_canonicalize(value)


def exact_canonicalize(value: object) -> bytes:
    """:func:`canonicalize` by the exact walk alone (the definition the fast path is tested
    against)."""
    parts: list[str] = []
    try:
        _write(value, parts)
    except RecursionError:
        raise CanonicalizationError(
            "value nests too deeply to canonicalize (the interpreter's recursion limit)"
        ) from None
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError(f"string contains a lone surrogate: {exc}") from exc


#: ``json``'s C encoder in RFC 8785's layout: no spaces, keys sorted (by code point), non-ASCII
#: text as is, the string escapes RFC 8785 3.2.2.2 asks for (see ``_quote``), no NaN.
_C_ENCODE: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode
_C_DECODE: Final = json.JSONDecoder().decode
#: What the C encoder writes otherwise than RFC 8785, looked for anywhere in its output with
#: every digit but ``0`` written as ``1`` (inside strings too: such a value only takes the
#: slower exact walk): a double's ``repr`` where it differs from ECMAScript's (an integral
#: ``12.0`` left, exponents ``1e-05`` and ``1e+16``).
_NONZERO_AS_ONE: Final = bytes.maketrans(b"23456789", b"11111111")
_C_DIFFERS: Final = tuple(
    digit + tail for digit in (b"0", b"1") for tail in (b".0,", b".0]", b".0}", b"e-", b"e+")
)
#: Every digit written as ``0``, to find runs of 16 digits in C: a number that long may be an
#: integer beyond +-(2**53-1), which the exact walk refuses (:func:`_holds_long_number`).
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_SIXTEEN_DIGITS: Final = b"0" * 16
#: What precedes a number in the encoder's output (after an optional ``-``).
_BEFORE_NUMBER: Final = frozenset(b":,[")
#: UTF-8 lead bytes of U+E000..U+FFFF and of U+10000..: the only characters whose code-point
#: order (the C encoder's key sort) differs from RFC 8785's UTF-16 order, when both occur.
_BMP_HIGH: Final = re.compile(rb"[\xee\xef]")
_ASTRAL: Final = re.compile(rb"[\xf0-\xf4]")


def _c_encoded(value: object) -> bytes | None:
    """``value``'s RFC 8785 bytes by ``json``'s C encoder, or None when the exact walk must
    decide: the encoder refused it (a type or NaN it does not take, a lone surrogate, too
    deep), a double or long integer it writes otherwise, a key order that may differ, or a
    value that does not read back equal (the encoder turns non-string keys into strings and
    accepts subclasses the exact walk may not: decoding its output must give ``value``; a
    double reads back as the equal integer RFC 8785 writes for it)."""
    try:
        data = _C_ENCODE(value).encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        return None
    if b".0" in data and b"-0.0" not in data:
        # Integral doubles below 1e16 as ECMAScript writes them: "6.0" -> "6". ``repr`` ends
        # no other fraction in 0, so ".0" before a delimiter is an integral double's, or text
        # in a string, which the read-back below catches.
        data = data.replace(b".0,", b",").replace(b".0]", b"]").replace(b".0}", b"}")
    shape = data.translate(_NONZERO_AS_ONE)
    if shape.endswith(b".0") or any(pattern in shape for pattern in _C_DIFFERS):
        return None
    if _holds_long_number(data):
        return None
    if not data.isascii() and _BMP_HIGH.search(data) and _ASTRAL.search(data):
        return None
    try:
        same = _C_DECODE(data.decode("utf-8")) == value
    except RecursionError:
        return None
    return data if same else None


def _holds_long_number(data: bytes) -> bool:
    """Whether the encoder's output ``data`` writes a number of 16 digits or more: a run of 16
    digits at the start or after ``:``, ``,`` or ``[`` (and an optional ``-``), where the
    encoder writes numbers. A run elsewhere is text (a hex digest), which the read-back checks
    like any other; runs are rare, so the few found are judged one by one."""
    digits = data.translate(_DIGITS_AS_ZERO)
    start = digits.find(_SIXTEEN_DIGITS)
    while start >= 0:
        before = start - 1
        if before >= 0 and digits[before] == ord("-"):
            before -= 1
        if before < 0 or digits[before] in _BEFORE_NUMBER:
            return True
        end = start + len(_SIXTEEN_DIGITS)
        while end < len(digits) and digits[end] == ord("0"):
            end += 1
        start = digits.find(_SIXTEEN_DIGITS, end)
    return False


def _write(value: object, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise CanonicalizationError(f"integer {value} is outside the I-JSON range +-(2**53-1)")
        out.append(int.__repr__(value))  # its number, whatever a subclass's str() says
    elif isinstance(value, float):
        out.append(format_number(value))
    elif isinstance(value, str):
        out.append(_quote(value) if len(value) < _LONG_STRING else _quote_long(value))
    elif isinstance(value, Mapping):
        _write_object(value, out)
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise CanonicalizationError(f"type {type(value).__name__} is not JSON")


def _write_object(value: Mapping[object, object], out: list[str]) -> None:
    keys: list[str] = []
    for key in value:
        if not isinstance(key, str):
            raise CanonicalizationError(f"object key {key!r} is not a string")
        keys.append(key)
    # Section 3.2.3: sort by UTF-16 code units, not by code points.
    keys.sort(key=lambda k: k.encode("utf-16-be", "surrogatepass"))
    out.append("{")
    for index, key in enumerate(keys):
        if index:
            out.append(",")
        out.append(_quote(key))
        out.append(":")
        _write(value[key], out)
    out.append("}")


#: The C string encoder of ``json`` escapes exactly what RFC 8785 3.2.2.2 escapes: ``"`` and
#: ``\\``, the short forms ``\\b \\t \\n \\f \\r`` and every other control character as
#: ``\\u00xx`` (lowercase hex), nothing else (ensure_ascii=False). A lone surrogate passes
#: through and fails the final UTF-8 encoding, as RFC 8785 requires. It runs in C: a 16 MiB
#: string is one call, not 16 million list entries.
_quote: Final = json.JSONEncoder(ensure_ascii=False).encode

#: From this length a string is first checked for anything to escape (base64 of a report or
#: of a shard's latency tail, hundreds of KB, has none).
_LONG_STRING: Final = 4096
#: What RFC 8785 escapes in ASCII text: the control characters, ``"`` and ``\\``.
_ESCAPED_ASCII: Final = bytes(range(0x20)) + b'"\\'


def _quote_long(value: str) -> str:
    """``_quote`` of a long string: an ASCII string with nothing to escape is itself in
    quotes, which one C pass over its bytes tells (``bytes.translate`` deleting what RFC 8785
    escapes removes nothing) at a third of the encoder's cost; anything else goes to it."""
    if value.isascii():  # known in O(1): CPython flags ASCII strings
        text = value.encode("ascii")
        if len(text.translate(None, _ESCAPED_ASCII)) == len(text):
            return f'"{value}"'
    return _quote(value)


def format_number(number: float) -> str:
    """ECMAScript ``Number.prototype.toString`` for a finite double (RFC 8785 3.2.2.3)."""
    if math.isnan(number) or math.isinf(number):
        raise CanonicalizationError(f"{number} has no JSON representation")
    if number == 0:
        return "0"  # also for -0.0
    sign = "-" if number < 0 else ""
    # repr() yields the shortest digit string that round-trips, as ECMAScript requires.
    decimal = Decimal(repr(abs(number))).normalize()
    _, digit_tuple, exponent = decimal.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(str(d) for d in digit_tuple)
    k = len(digits)
    n = exponent + k  # the decimal point sits after the n-th digit
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        mantissa = digits[0] if k == 1 else f"{digits[0]}.{digits[1:]}"
        power = n - 1
        body = f"{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"
    return sign + body
