"""The fast canonical path (msgspec, whole chunks) either agrees byte for byte with the
exact path and the independent ``rfc8785`` package, or declines: generated nested, non-ASCII,
float-heavy and adversarial lines."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import msgspec
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attestation.encoding.canonical import canonicalize, format_number
from runner.corpus.canonical_lines import CaseLine, LineDecoder, msgspec_number, number_value
from runner.corpus.errors import CorpusError
from runner.corpus.jsonio import parse_line
from runner.corpus.models import Case, validate_record

CASES = LineDecoder(CaseLine)


def exact(line: bytes) -> bytes | None:
    """The exact path's bytes for one case line, or None when it refuses the line."""
    try:
        data = parse_line(line, "cases.jsonl", 1)
        validate_record(Case, data, "cases.jsonl", 1)
        return canonicalize(data)
    except (CorpusError, ValueError):
        return None


def doubles() -> st.SearchStrategy[float]:
    return (
        st.floats(allow_nan=False, allow_infinity=False)
        | st.builds(
            lambda raw: struct.unpack(">d", raw)[0], st.binary(min_size=8, max_size=8)
        ).filter(math.isfinite)
        | st.sampled_from(
            [1e-6, 1.5e-6, 9.99e-6, 1e-5, 1e16, 1e20, 2.0**53, 2.0**60, -0.0, 100.0, 5e-324, 1e21]
        )
    )


TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=10
) | st.sampled_from(
    ["\uff01", "\U0001f600", "\ue000", "\ufffd", "é", "\x00", "\x1f", "\x7f", "\u2028", ":", '"']
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.integers(-(2**64), 2**64)
    | doubles()
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=25,
)


@st.composite
def case_lines(draw: st.DrawFn) -> bytes:
    case: dict[str, Any] = {
        "case_id": draw(st.sampled_from(["a-1", "b-2", "case-0123", "Bad", "", "x" * 41])),
        "label": draw(st.sampled_from(["flag", "clear", "", "é" * 200, "x" * 201])),
    }
    if draw(st.booleans()):
        case["input"] = draw(VALUES)
    if draw(st.booleans()):
        case["split"] = draw(st.sampled_from(["dev", "holdout", "other", None]))
    if draw(st.booleans()):
        case["group"] = draw(st.sampled_from(["g", "", "g" * 61, 7]))
    if draw(st.integers(0, 9)) == 0:
        case["extra"] = 1
    items = draw(st.permutations(list(case.items())))
    text = json.dumps(
        dict(items),
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
    )
    return text.encode("utf-8")


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(case_lines(), min_size=1, max_size=4))
def test_fast_chunks_equal_the_exact_path_or_decline(lines: list[bytes]) -> None:
    chunk = b"".join(line + b"\n" for line in lines)
    fast = CASES.canonical_chunk(chunk)
    if fast is None:
        return
    records, canonical = fast
    assert len(records) == len(lines)
    expected = [exact(line) for line in lines]
    assert None not in expected  # the fast path never accepts what the exact path refuses
    assert canonical == b"".join(e + b"\n" for e in expected if e is not None)
    assert canonical == b"".join(rfc8785.dumps(json.loads(line)) + b"\n" for line in lines)


@pytest.mark.parametrize(
    "text",
    [
        b'{"case_id":"a","label":"x","case_id":"b"}',  # duplicate key
        b'{"case_id":"a","label":"x","input":{"k":1,"\\u006b":2}}',  # duplicate after escape
        b'{"case_id":"a","label":"x","input":{"k":"\\u003a","k":1}}',  # escaped colon + duplicate
        b'{"case_id":"a","label":"x","input":9007199254740992}',  # integer beyond 2**53-1
        b'{"case_id":"a","label":"x","input":-18446744073709551616}',
        b'{"case_id":"a","label":"x","input":1e400}',  # no double
        b'{"case_id":"a","label":"x","input":{"\\uff01":1,"\\ud83d\\ude00":2}}',  # UTF-16 order
        b'{"case_id":"a","label":"x"} {"case_id":"b","label":"y"}',  # two objects, one line
        b'{"case_id":"a",\n"label":"x"}',  # one object, two lines
        b'{"case_id":"a","label":"x"}\n\n{"case_id":"b","label":"y"}',  # empty line
        b'{"case_id":"a","label":"x"}  ',  # trailing spaces: the exact path decides
        b'\xef\xbb\xbf{"case_id":"a","label":"x"}',  # byte order mark
        b'{"case_id":"a","label":"x\xff"}',  # not UTF-8
        b'{"case_id":"a","label":"\xed\xa0\x80"}',  # an encoded surrogate is not UTF-8
        b'{"case_id":"a","label":"x\ty"}',  # raw control character
        b'{"case_id":"a","label":"\\ud800"}',  # lone surrogate escape
        b'{"case_id":"a","label":"x","input":NaN}',
        b'{"case_id":"a\\n","label":"x"}',  # "$" would match before a final newline
        b'{"case_id":"a","label":"x","split":null}',
        b'[{"case_id":"a","label":"x"}]',
    ],
)
def test_the_fast_path_declines(text: bytes) -> None:
    assert CASES.canonical_chunk(text + b"\n") is None


def test_utf16_order_is_taken_from_the_exact_path() -> None:
    line = json.dumps({"case_id": "a", "label": "x", "input": {"\uff01": 1, "\U0001f600": 2}})
    data = line.encode()
    assert CASES.canonical_chunk(data + b"\n") is None
    assert exact(data) == rfc8785.dumps(json.loads(line))
    assert (
        exact(data)
        == b'{"case_id":"a","input":{"\xf0\x9f\x98\x80":2,"\xef\xbc\x81":1},"label":"x"}'
    )


@settings(max_examples=3000, deadline=None)
@given(doubles())
def test_number_hook_gives_the_rfc_8785_text(value: float) -> None:
    held = msgspec_number(repr(value))
    assert msgspec.json.encode(held).decode() == format_number(value)
    assert number_value(held) == value


def test_number_hook_refuses_what_no_double_holds() -> None:
    with pytest.raises(ValueError, match="beyond the range of a double"):
        msgspec_number("1e400")
    assert msgspec_number("1e-400") == 0
    assert msgspec_number("-0.0") == 0
    assert msgspec_number("12.000") == 12
    assert isinstance(msgspec_number("12.000"), int)
