"""Parsing the verifier's JSON input documents (policy, expected values, envelope) one way.

Every document goes through the same steps, each with its own message naming the document:
a size cap checked before parsing, strict JSON, a top-level object, then the pydantic model
(camelCase keys only). "Strict JSON" here is stricter than :func:`json.loads`:

* a key repeated in one object is refused: readers disagree on which copy wins (Python and
  pydantic keep the last, others the first), so a document a person reviewed could verify
  with a value they never saw;
* ``NaN``, ``Infinity`` and numbers that overflow to infinity are refused: they are not
  JSON (RFC 8259) and have no canonical form to hash; so are integers longer than any double;
* the bytes must be UTF-8 without a byte order mark (RFC 8259 section 8.1): ``json.loads``
  alone would also accept UTF-16 and UTF-32.

One parser reads them all: Python's ``json`` with the hooks below. (A second path, orjson's
parse accepted when its re-encoding gave back the same bytes, was removed: it was a second
parser of the bytes a verdict depends on, for about 0.35 ms of a 16 KB envelope's verification;
docs/performance.md has the numbers.)

A document may also bound how many JSON values it holds (``max_items``): counted in C
before parsing (every value but the first of an array or object follows a ``,``, and every
array and object opens with ``[`` or ``{``, so ``,`` + ``[`` + ``{`` is an upper bound), so
memory stays bounded by the document's size however small its values are: Python objects
cost 30-100 bytes each, while a value in the text can be 2 bytes.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Sequence
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

from attestation.encoding.gc_pause import paused_gc
from attestation.errors import MalformedError

ModelT = TypeVar("ModelT", bound=BaseModel)


#: No JSON integer needs more digits: a double (RFC 8259's interoperable range, I-JSON) ends
#: below 1.8e308. Python itself refuses to read integers past 4300 digits (a ValueError that
#: would otherwise escape as an internal error); this bound keeps such inputs malformed (1).
MAX_INTEGER_DIGITS: Final = 309


class _NotStrictJsonError(ValueError):
    """Valid for :func:`json.loads` but not strict JSON (duplicate key, NaN, infinity)."""


def _object_without_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    document = dict(pairs)  # built in C; a repeated key leaves fewer entries than pairs
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _NotStrictJsonError(f"key {key!r} appears more than once in one object")
            seen.add(key)
    return document


def _refuse_constant(name: str) -> float:
    raise _NotStrictJsonError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotStrictJsonError(f"number {text} is out of range")
    return value


def _bounded_integer(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INTEGER_DIGITS:
        raise _NotStrictJsonError(f"an integer of {digits} digits is out of range")
    return int(text)


def parse_strict_json(data: bytes, *, what: str) -> object:
    """Parse strict JSON (UTF-8 without a byte order mark, no duplicate keys, no NaN/infinity,
    no number beyond the double range).

    Raises:
        MalformedError: naming ``what`` and the problem.
    """
    if data.startswith(codecs.BOM_UTF8):
        raise MalformedError(f"{what} starts with a byte order mark; it must be plain UTF-8")
    try:
        # Decoded here: json.loads would otherwise guess UTF-16 and UTF-32 from the bytes.
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedError(f"{what} is not UTF-8: {error.reason} at byte {error.start}") from None
    try:
        with paused_gc():
            return json.loads(
                text,
                object_pairs_hook=_object_without_duplicate_keys,
                parse_constant=_refuse_constant,
                parse_float=_finite_float,
                parse_int=_bounded_integer,
            )
    except json.JSONDecodeError as error:
        raise MalformedError(f"{what} is not valid JSON: {error}") from None
    except (_NotStrictJsonError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise MalformedError(f"{what} is not valid JSON: {reason}") from None


#: pydantic's words for a type, in its messages, which name Python classes.
_TYPE_WORDS: Final = (
    (re.compile(r"an instance of Decimal"), "a number"),
    (re.compile(r" or instance of [A-Za-z_][\w\[\],\- ]*"), ""),
)


def plain_message(message: str) -> str:
    """A pydantic message in the words of a JSON document, without Python type names
    ("Input should be an instance of Decimal" -> "Input should be a number")."""
    for pattern, words in _TYPE_WORDS:
        message = pattern.sub(words, message)
    return message


def problem_path(location: Sequence[str | int]) -> str:
    """The dotted key path of a problem, without the union members pydantic inserts (a
    member's label is its type: ``TcbMinimum``, ``dict[str-enum[ProductLine],TcbMinimum]``;
    wire keys start with a lowercase letter)."""
    keys = [
        str(part)
        for part in location
        if isinstance(part, int) or not (part[:1].isupper() or "[" in part)
    ]
    return ".".join(keys)


def describe_validation_error(error: ValidationError) -> str:
    """Every problem of a pydantic validation as ``key.path: message``, joined by ``; ``; the
    alternatives of a union that all fail at one key are one problem."""
    described: list[str] = []
    for problem in error.errors(include_url=False):
        text = f"{problem_path(problem['loc']) or '<root>'}: {plain_message(problem['msg'])}"
        if text not in described:
            described.append(text)
    return "; ".join(described)


def json_item_bound(data: bytes) -> int:
    """An upper bound of the JSON values in ``data`` (strings holding ``,[{`` count too)."""
    return data.count(b",") + data.count(b"[") + data.count(b"{") + 1


def json_items_over(data: bytes, limit: int) -> int | None:
    """:func:`json_item_bound` of ``data`` when it is over ``limit``, else None.

    The bound is at most ``len(data) + 1`` (each ``,``, ``[`` and ``{`` counted is a byte of
    its own), so a document shorter than ``limit`` bytes is never counted: an envelope of
    16 KiB is three passes over its bytes cheaper to publish.
    """
    if len(data) < limit:
        return None
    items = json_item_bound(data)
    return items if items > limit else None


#: Every byte but the structure's: brackets, braces and quotes.
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b'[]{}"')
#: Objects' braces as arrays' brackets: only the depth counts.
_SQUARE: Final = bytes.maketrans(b"{}", b"[]")
_ESCAPED_QUOTE: Final = re.compile(rb'\\"')


def json_nests_deeper(data: bytes, limit: int) -> bool:
    """Whether arrays and objects in ``data`` nest deeper than ``limit`` (strings skipped).

    Linear, and checked before parsing: a deeply nested document would otherwise reach the
    interpreter's recursion limit inside the parser or, worse, parse and then fail in
    whatever walks it recursively (the canonicalizer). Exact for valid JSON; a document it
    misjudges because it is not JSON is refused by the parser.

    Every step runs in C (a 16 KB envelope: about 25 us): with the escaped backslashes and
    then the escaped quotes removed, every quote left opens or closes a string (outside
    strings JSON has no backslash), so every other piece between quotes is outside strings;
    the brackets there are the structure, and at most ``limit`` passes measure its depth.
    Without an escaped quote (``\\"``, which every escaped backslash before a quote also
    shows) every quote already opens or closes a string, and escaped backslashes elsewhere
    change no quote or bracket, so one search for it decides whether to remove them. It is a
    compiled pattern's: ``re`` finds a literal's first byte with ``memchr``, where ``in``
    with a two-byte needle steps through every byte (about 6 against 20-40 us over 16 KB).
    """
    if _ESCAPED_QUOTE.search(data):
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(_SQUARE, _NOT_STRUCTURE)
    if marks.count(b"[") <= limit:
        return False  # not even that many openers, inside strings or not: no deeper nesting
    brackets = b"".join(marks.split(b'"')[::2])
    # Each pass removes every innermost pair, one level of nesting: valid JSON nested
    # ``depth`` deep is empty after exactly ``depth`` passes.
    for removed in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            # Unbalanced (not JSON): closers, then openers left open, which nest on top.
            return brackets.count(b"[") + removed > limit
        brackets = shorter
    return bool(brackets)


def load_json_document(
    data: bytes, model: type[ModelT], *, what: str, limit: int, max_items: int | None = None
) -> ModelT:
    """Parse one JSON document of at most ``limit`` bytes (and, if given, at most
    ``max_items`` JSON values) into ``model`` (camelCase keys). Both bounds are checked
    before any object is built.

    Raises:
        MalformedError: too large, too many values, not strict JSON, not an object, or a
            schema violation (an unknown key, a missing key, a bad value), each naming ``what``.
    """
    document = load_json_object(data, what=what, limit=limit, max_items=max_items)
    return validate_document(document, model, what=what)


def load_json_object(
    data: bytes,
    *,
    what: str,
    limit: int,
    max_items: int | None = None,
    max_depth: int | None = None,
) -> dict[str, object]:
    """The steps of :func:`load_json_document` before the model: the bounds (size, values,
    nesting), strict JSON and a top-level object.

    Raises:
        MalformedError: too large, too many values, nested too deeply, not strict JSON or not
            an object.
    """
    if len(data) > limit:
        raise MalformedError(f"{what} is {len(data)} bytes, over the {limit}-byte limit")
    if max_items is not None:
        items = json_items_over(data, max_items)
        if items is not None:
            raise MalformedError(
                f"{what} holds up to {items} JSON values, over the limit of {max_items} "
                "(refused before parsing: as objects they would need far more memory than "
                "the document's size)"
            )
    if max_depth is not None and json_nests_deeper(data, max_depth):
        raise MalformedError(
            f"{what} nests arrays and objects deeper than {max_depth} levels (refused before "
            "parsing)"
        )
    document = parse_strict_json(data, what=what)
    if not isinstance(document, dict):
        raise MalformedError(f"{what} must be a JSON object")
    return document


def validate_document(document: dict[str, object], model: type[ModelT], *, what: str) -> ModelT:
    """A parsed JSON object as ``model`` (camelCase keys only).

    Raises:
        MalformedError: a schema violation (an unknown key, a missing key, a bad value),
            naming ``what``.
    """
    try:
        return model.model_validate(document, by_alias=True, by_name=False)
    except ValidationError as error:
        raise MalformedError(f"{what} is invalid: {describe_validation_error(error)}") from None
