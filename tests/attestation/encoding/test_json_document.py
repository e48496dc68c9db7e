"""The one parser of the verifier's JSON documents: strict JSON, one message shape per document."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.contracts import MAX_EXPECTED_BYTES, MAX_POLICY_BYTES
from attestation.encoding.canonical import CanonicalizationError, canonicalize
from attestation.encoding.json_document import (
    json_item_bound,
    json_items_over,
    json_nests_deeper,
    parse_strict_json,
)
from attestation.envelope.expected import load_expected
from attestation.errors import MalformedError
from attestation.verify.policy import load_policy

EXPECTED_OK = b'"runId": "r", "corpusChecksum": "sha256:' + b"0" * 64 + b'"'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"a": "\xff"}', "policy is not UTF-8: invalid start byte at byte 7"),
        ('{"a": 1}'.encode("utf-16"), "policy is not UTF-8: invalid start byte at byte 0"),
        ('{"a": 1}'.encode("utf-32-be"), "policy is not valid JSON: Expecting value"),
        (b'\xef\xbb\xbf{"a": 1}', "policy starts with a byte order mark; it must be plain UTF-8"),
        (
            b'{"a": ' + b"1" * 310 + b"}",
            "policy is not valid JSON: an integer of 310 digits is out",
        ),
        (b'{"a": -' + b"1" * 5000 + b"}", "an integer of 5000 digits is out of range"),
    ],
    ids=["invalid-utf8", "utf16", "utf32-no-bom", "bom", "long-integer", "huge-integer"],
)
def test_only_utf8_and_integers_a_double_can_hold(text: bytes, message: str) -> None:
    with pytest.raises(MalformedError) as raised:
        parse_strict_json(text, what="policy")
    assert message in str(raised.value)
    assert parse_strict_json(b'{"a": -' + b"9" * 309 + b"}", what="policy") == {
        "a": -int("9" * 309)
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'{"a": 1, "a": 2}', "key 'a' appears more than once in one object"),
        (b'{"a": {"b": 1, "b": 1}}', "key 'b' appears more than once in one object"),
        (b'{"c": 1, "d": 2, "e": 3, "d": 2}', "key 'd' appears more than once in one object"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b'{"a": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"a": 1e400}', "number 1e400 is out of range"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a": 1} x', "Extra data"),
    ],
    ids=[
        "duplicate",
        "nested-duplicate",
        "duplicate-among-others",
        "nan",
        "infinity",
        "overflow",
        "deep",
        "trailing",
    ],
)
def test_not_strict_json_is_refused_naming_the_document(text: bytes, problem: str) -> None:
    with pytest.raises(MalformedError) as raised:
        parse_strict_json(text, what="policy")
    assert str(raised.value).startswith("policy is not valid JSON: ")
    assert problem in str(raised.value)


def test_strict_json_still_parses_ordinary_documents() -> None:
    assert parse_strict_json(b'{"a": [1, 2.5, -0.0, 1e300, null, true, "x"]}', what="x") == {
        "a": [1, 2.5, -0.0, 1e300, None, True, "x"]
    }


def test_a_duplicated_policy_key_cannot_weaken_the_policy() -> None:
    """A reviewer reading the first allowDebug sees false; last-wins parsers would allow debug."""
    with pytest.raises(MalformedError, match="key 'allowDebug' appears more than once"):
        load_policy(b'{"allowDebug": false, "allowDebug": true}')


@pytest.mark.parametrize(
    ("load", "what", "limit", "minimal"),
    [
        (load_policy, "policy", MAX_POLICY_BYTES, b"{}"),
        (load_expected, "expected-values file", MAX_EXPECTED_BYTES, b"{" + EXPECTED_OK + b"}"),
    ],
    ids=["policy", "expected"],
)
def test_every_document_reports_problems_the_same_way(
    load: object, what: str, limit: int, minimal: bytes
) -> None:
    assert callable(load)
    load(minimal)
    cases = [
        (b" " * (limit + 1), f"{what} is {limit + 1} bytes, over the {limit}-byte limit"),
        (b"{", f"{what} is not valid JSON: "),
        (b'"text"', f"{what} must be a JSON object"),
        (
            minimal[:-1] + (b", " if minimal != b"{}" else b"") + b'"bogus": 1}',
            f"{what} is invalid: bogus: Extra inputs are not permitted",
        ),
    ]
    for document, message in cases:
        with pytest.raises(MalformedError) as raised:
            load(document)
        assert str(raised.value).startswith(message), (document[:40], str(raised.value))


@given(
    data=st.binary(max_size=64) | st.text(alphabet=",[{}]1 ", max_size=64).map(str.encode),
    limit=st.integers(0, 70),
)
def test_items_over_a_limit_agrees_with_the_bound_whatever_it_skips(
    data: bytes, limit: int
) -> None:
    bound = json_item_bound(data)
    assert json_items_over(data, limit) == (bound if bound > limit else None)


def test_a_document_shorter_than_the_limit_can_still_reach_it_exactly() -> None:
    assert json_item_bound(b",,,") == 4
    assert json_items_over(b",,,", 4) is None
    assert json_items_over(b",,,", 3) == 4


# -- the one parser reads every spelling of a value as json.loads does -------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**300), 10**300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"]), max_size=4), children)
    ),
    max_leaves=24,
)


def typed(value: object) -> object:
    """``value`` with every number's type beside it: 1 and 1.0 (and 0.0 and -0.0) differ."""
    if isinstance(value, dict):
        return ("object", [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("array", [typed(item) for item in value])
    return (type(value).__name__, repr(value))


def spellings(value: object) -> list[bytes]:
    """Spellings of ``value``: compact and indented, as Python's ``json`` and RFC 8785 write
    them (a run's envelope is indented, receipts and log entries are canonical)."""
    found = []
    for sort in (False, True):
        found.append(
            json.dumps(value, separators=(",", ":"), sort_keys=sort, ensure_ascii=False).encode()
        )
        found.append(
            (json.dumps(value, indent=2, sort_keys=sort, ensure_ascii=False) + "\n").encode()
        )
    with contextlib.suppress(CanonicalizationError):  # no RFC 8785 form beyond 2**53
        found.append(canonicalize(value))
    return found


@given(value=JSON_VALUES)
def test_every_spelling_of_a_value_reads_back_as_that_value(value: object) -> None:
    for data in spellings(value):
        assert typed(parse_strict_json(data, what="document")) == typed(json.loads(data))


def test_a_document_over_a_mebibyte_is_read_like_any_other() -> None:
    data = b'{"a":"' + b"x" * (1024 * 1024) + b'"}'
    assert parse_strict_json(data, what="envelope") == {"a": "x" * (1024 * 1024)}


# -- nesting depth, counted before parsing ---------------------------------------------------

_tricky_text = st.text(alphabet='[]{}"\\\\abn/\u00e9', max_size=6)
_nested = st.recursive(
    st.none() | st.integers() | _tricky_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(_tricky_text, children, max_size=3)
    ),
    max_leaves=30,
)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@given(_nested, st.sampled_from([None, 2]), st.booleans())
def test_json_nests_deeper_is_exact_for_valid_json(
    value: object, indent: int | None, ascii_only: bool
) -> None:
    """Brackets, quotes and backslashes inside strings (escaped or not) never count."""
    data = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    depth = _depth(value)
    for limit in range(max(0, depth - 2), depth + 2):
        assert json_nests_deeper(data, limit) is (depth > limit)


@pytest.mark.parametrize(
    ("data", "depth"),
    [
        # escapes but no escaped quote: the quotes are read as they stand
        (b'["-----BEGIN\\n[[[\\n", "\\\\[", {"a\\\\": ["\\n"]}]', 3),
        # a string ending in an escaped backslash, then brackets outside strings
        (b'[["\\\\"], [["\\\\\\"[["]]]', 3),
        (b'{"k": "\\"]]]\\\\", "v": [[[]]]}', 4),
    ],
)
def test_json_nests_deeper_reads_escapes_exactly(data: bytes, depth: int) -> None:
    assert _depth(json.loads(data)) == depth
    assert json_nests_deeper(data, depth - 1) is True
    assert json_nests_deeper(data, depth) is False
