"""RFC 8785 conformance of attestation.encoding.canonical (examples from the RFC, and a cross-check
against the independent ``rfc8785`` package on generated JSON)."""

from __future__ import annotations

import json
import struct

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from attestation.contracts import MAX_ENVELOPE_JSON_DEPTH
from attestation.encoding import canonical as canonical_module
from attestation.encoding.canonical import CanonicalizationError, canonicalize, format_number
from attestation.errors import MalformedError

# RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical text.
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def _double(bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(bits))[0]
    return value


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B, ids=[b for b, _ in APPENDIX_B])
def test_number_formatting_matches_rfc_appendix_b(bits: str, expected: str) -> None:
    assert format_number(_double(bits)) == expected


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_nan_and_infinity_are_refused(bits: str) -> None:
    with pytest.raises(CanonicalizationError, match="no JSON representation"):
        canonicalize({"x": _double(bits)})


def test_rfc_section_3_2_2_example() -> None:
    source = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonicalize(json.loads(source)) == expected.encode("utf-8")


def test_rfc_section_3_2_3_sorts_keys_by_utf16_code_units() -> None:
    source = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    keys = list(json.loads(canonicalize(source)))
    # U+1F600 is the surrogate pair D83D DE00, so it sorts before U+FB33 although its
    # code point is larger: the order is by UTF-16 code units, not code points.
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\b\t\n\f\r", '"\\b\\t\\n\\f\\r"'),
        ("\x00\x1f", '"\\u0000\\u001f"'),
        ('"\\', '"\\"\\\\"'),
        ("/\u2028\x7f", '"/\u2028\x7f"'),
    ],
    ids=["short-escapes", "control-u-escapes", "quote-backslash", "no-escape-needed"],
)
def test_string_escapes(text: str, expected: str) -> None:
    assert canonicalize(text) == expected.encode("utf-8")


def test_integers_beyond_2_pow_53_are_refused() -> None:
    assert canonicalize(2**53 - 1) == b"9007199254740991"
    with pytest.raises(CanonicalizationError, match="outside the I-JSON range"):
        canonicalize(2**53)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1: "x"}, "is not a string"),
        (b"bytes", "is not JSON"),
        ("\ud800", "lone surrogate"),
    ],
    ids=["non-string-key", "bytes", "lone-surrogate"],
)
def test_non_json_values_are_malformed(value: object, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        canonicalize(value)


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json_values = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_json_values)
def test_agrees_with_the_rfc8785_package(value: object) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)  # type: ignore[arg-type]  # JSON by construction


_safe_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    # Integral doubles of 2**53 and beyond print without an exponent and would re-parse as
    # out-of-range Python ints, which canonicalize() refuses by design.
    | st.floats(min_value=-(2.0**53) + 1, max_value=2.0**53 - 1)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_safe_values)
def test_canonical_form_is_a_fixed_point(value: object) -> None:
    once = canonicalize(value)
    assert canonicalize(json.loads(once)) == once


# Long strings (a base64 report or latency tail) take a path that checks for anything to
# escape first: it must give the bytes the rfc8785 package gives, whatever a long string holds.
BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
SPECIAL = ['"', "\\", "\x00", "\x1f", "\n", "\x7f", "é", "\u2028", "😀", "/"]
long_text = st.builds(
    lambda base, extra, at: base[:at] + extra + base[at:],
    # a short piece repeated past the long-string length: small inputs for hypothesis
    st.text(alphabet=BASE64, min_size=1, max_size=40).map(
        lambda piece: piece * (4096 // len(piece) + 1)
    ),
    st.text(alphabet=st.sampled_from(SPECIAL), max_size=3),
    st.integers(min_value=0, max_value=4096),
)


@given(text=long_text)
def test_long_strings_agree_with_the_rfc8785_package(text: str) -> None:
    assert canonicalize({"tail": text}) == rfc8785.dumps({"tail": text})


def test_a_long_string_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(CanonicalizationError, match="lone surrogate"):
        canonicalize("A" * 5000 + "\ud800")


# -- nesting: every depth an envelope may have, and a refusal (not a crash) beyond ----------


def _nest(depth: int, kinds: list[bool], leaf: object, keys: list[str]) -> object:
    """``leaf`` inside ``depth`` arrays and objects (``kinds[i]``: object at level i), each
    level also holding a sibling scalar so that key order and separators matter."""
    value = leaf
    for level in reversed(range(depth)):
        key = keys[level % len(keys)]
        value = {key: value, "~": level} if kinds[level % len(kinds)] else [level, value]
    return value


@given(
    depth=st.integers(min_value=1, max_value=MAX_ENVELOPE_JSON_DEPTH),
    kinds=st.lists(st.booleans(), min_size=1, max_size=8),
    keys=st.lists(st.text(max_size=4), min_size=1, max_size=4),
    leaf=_json_scalars,
)
def test_agrees_with_rfc8785_at_every_depth_up_to_the_envelope_limit(
    depth: int, kinds: list[bool], keys: list[str], leaf: object
) -> None:
    value = _nest(depth, kinds, leaf, keys)
    assert canonicalize(value) == rfc8785.dumps(value)  # type: ignore[arg-type]  # JSON by construction


def test_every_depth_up_to_the_envelope_limit_canonicalizes() -> None:
    """Exhaustive over depth (the property test samples it): objects and arrays alternating."""
    for depth in range(1, MAX_ENVELOPE_JSON_DEPTH + 1):
        value = _nest(depth, [True, False], "x", ["k"])
        assert canonicalize(value) == rfc8785.dumps(value)  # type: ignore[arg-type]


def test_nesting_past_the_recursion_limit_is_malformed_not_a_crash() -> None:
    value: object = 1
    for _ in range(5000):
        value = {"a": value}
    with pytest.raises(CanonicalizationError, match="nests too deeply to canonicalize"):
        canonicalize(value)


_tricky_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**53), max_value=2**53).map(float),
    st.sampled_from([0.0, -0.0, 1e-5, 1e-6, 1e-7, 1e15, 1e16, 1e21, 5e-324, 2.5e-06, 123.0]),
)
_tricky_text = st.text(
    alphabet=st.one_of(
        st.characters(), st.sampled_from(["\ue000", "\uffff", "\U0001f600", '"', "\\", "\x7f"])
    ),
    max_size=8,
)
_tricky_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | _tricky_floats
    | _tricky_text,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(_tricky_text, children, max_size=4)
        | st.dictionaries(st.integers(0, 3), children, min_size=1, max_size=2)
    ),
    max_leaves=20,
)


@given(_tricky_values)
def test_the_c_encoder_path_gives_the_exact_bytes_or_declines(value: object) -> None:
    """Whatever the fast path returns is the exact walk's bytes (and rfc8785's); what it
    declines, the exact walk decides (refusing what has no RFC 8785 form)."""
    fast = canonical_module._c_encoded(value)
    try:
        exact = canonical_module.exact_canonicalize(value)
    except CanonicalizationError:
        assert fast is None
        return
    assert fast in (None, exact)
    assert canonicalize(value) == exact


def test_the_c_encoder_path_takes_an_envelope_shaped_value() -> None:
    value = {"b": [1, 2.5, "x\u00e9"], "a": {"z": None, "y": True}, "c": 0.1}
    assert (
        canonical_module._c_encoded(value)
        == b'{"a":{"y":true,"z":null},"b":[1,2.5,"x\xc3\xa9"],"c":0.1}'
    )
    assert canonical_module._c_encoded({"a": [12.0, -3.0, 0.0]}) == b'{"a":[12,-3,0]}'
    # A long digit run inside a string (a hex digest) is text: the fast path takes it.
    digest = {"d": "sha256:fc3c6e0b6c2a2b393dd0f8d028b90e336179bcf77983748ecbf1fa25"}
    assert canonical_module._c_encoded(digest) == (
        b'{"d":"sha256:fc3c6e0b6c2a2b393dd0f8d028b90e336179bcf77983748ecbf1fa25"}'
    )
    for declined in (
        {"a": -0.0},
        {"a": "x:1.0,"},
        {"a": 1e-05},
        {1: "x"},
        [2**53],
        2**53,
        {"a": -(2**60)},
        [1, 1234567890123456],
        {"a": ":1234567890123456"},
        {"\ue000": 1, "\U0001f600": 2},
        (1, 2),
    ):
        assert canonical_module._c_encoded(declined) is None


@pytest.mark.parametrize(
    ("data", "long_number"),
    [
        (b"1234567890123456", True),
        (b"-1234567890123456", True),
        (b'{"a":1234567890123456}', True),
        (b'{"a":-12345678901234567}', True),
        (b"[1,1234567890123456]", True),
        (b"[123456789012345]", False),
        (b'{"d":"sha256:e28511155972519283969e43"}', False),
        (b'{"d":"sha256:1234567890123456ab"}', True),  # after ':' in text: declined too
        (b'{"d":"e28511155972519283969e43"}', False),
        (b'{"d":"x-1234567890123456","e":"ab12345678901234567890"}', False),
        (b'{"d":"ab12345678901234567890","n":12345678901234567}', True),
    ],
)
def test_a_number_of_16_digits_is_found_where_numbers_are_written(
    data: bytes, *, long_number: bool
) -> None:
    assert canonical_module._holds_long_number(data) is long_number
