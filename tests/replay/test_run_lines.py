"""Run records: the single-parse fast path must agree with RFC 8785 exactly."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.corpus.errors import CorpusError
from runner.corpus.evaluation import is_canonical_line, parse_run_line
from runner.corpus.jsonio import parse_line_with_number_check
from runner.pipeline.replay import replay_corpus
from tests.replay.golden import (
    EXAMPLE_EVALUATION_DIGEST,
    EXAMPLE_RESULT_DIGEST,
)

NUMBERS = st.integers(min_value=-(2**60), max_value=2**60) | st.floats(
    allow_nan=False, allow_infinity=False
).filter(lambda x: abs(x) < 2**53 or abs(x) >= 1e21)
VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300)
@given(obj=st.dictionaries(st.text(max_size=4), VALUES, max_size=4), style=st.integers(0, 2))
def test_fast_path_never_accepts_a_non_canonical_line(obj: dict[str, Any], style: int) -> None:
    if style == 0:
        line = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    elif style == 1:
        line = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    else:
        line = json.dumps(obj)
    raw = line.encode("utf-8", "surrogatepass")
    try:
        data, safe = parse_line_with_number_check(raw, "runs.jsonl", 1)
    except Exception:
        return  # e.g. duplicate keys cannot arise here, but invalid text is not our concern
    if is_canonical_line(raw, data, numbers_safe=safe):
        assert raw == rfc8785.dumps(data)


def test_canonical_example_lines_take_the_fast_path() -> None:
    from tests.replay.conftest import EXAMPLE_CORPUS

    for line in (EXAMPLE_CORPUS / "runs.jsonl").read_bytes().splitlines():
        data, safe = parse_line_with_number_check(line, "runs.jsonl", 1)
        assert is_canonical_line(line, data, numbers_safe=safe)


def test_reformatted_runs_give_the_same_digests(example_copy: Path) -> None:
    lines = (example_copy / "runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    # Spaces, another key order and numbers written differently (2e-3, 0.0020) are the same
    # JSON values, hence the same RFC 8785 bytes.
    text = "".join(json.dumps(dict(reversed(list(r.items())))) + "\n" for r in records)
    text = text.replace('"cost_usd": 0.002,', '"cost_usd": 2e-3,', 5)
    text = text.replace('"cost_usd": 0.0105,', '"cost_usd": 0.01050,', 5)
    assert "2e-3" in text
    assert "0.01050" in text
    (example_copy / "runs.jsonl").write_text(text)
    outcome = replay_corpus(example_copy)
    assert outcome.evaluation_digest == EXAMPLE_EVALUATION_DIGEST
    assert outcome.result_digest == EXAMPLE_RESULT_DIGEST


# -- the msgspec path for whole run records ------------------------------------------------

CASE_VALUES = (
    st.none()
    | st.floats(min_value=0, allow_nan=False, allow_infinity=False)
    | (st.integers(min_value=0, max_value=2**53 - 1))
)
RUN_CASES = st.lists(
    st.fixed_dictionaries(
        {
            "case_id": st.from_regex(r"c-[0-9]{4}", fullmatch=True),
            "prediction": st.none() | st.text(max_size=8),
            "cost_usd": CASE_VALUES,
            "latency_ms": CASE_VALUES,
        },
        optional={"error": st.text(max_size=12)},
    ),
    min_size=1,
    max_size=8,
)


def _outcome(read: Callable[[], object]) -> tuple[str, object]:
    try:
        return "read", read()
    except CorpusError as exc:
        return "refused", str(exc)


@settings(max_examples=300)
@given(
    cases=RUN_CASES,
    extra=st.dictionaries(st.text(max_size=4), VALUES, max_size=3),
    ascii_only=st.booleans(),
    spaced=st.booleans(),
)
def test_run_records_read_by_msgspec_give_the_exact_paths_bytes_and_values(
    cases: list[dict[str, Any]], extra: dict[str, Any], ascii_only: bool, spaced: bool
) -> None:
    record = {**extra, "arm_id": "A1", "run_index": 1, "cases": cases}
    separators = (", ", ": ") if spaced else (",", ":")
    raw = json.dumps(record, ensure_ascii=ascii_only, separators=separators).encode(
        "utf-8", "surrogatepass"
    )
    exact = _outcome(lambda: parse_line_with_number_check(raw, "runs.jsonl", 1)[0])
    fast = _outcome(lambda: parse_run_line(raw, 1))
    if exact[0] == "refused":  # the fast path declined: the exact path's message
        assert fast == exact
        return
    value: Any = exact[1]
    assert fast == ("read", (value, rfc8785.dumps(value)))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"arm_id":"A1","arm_id":"A2","cases":[]}', "duplicate key 'arm_id'"),
        (b'{"cases":[{"cost_usd":9007199254740993}]}', "outside the I-JSON range"),
        (b'{"cases":[{"latency_ms":NaN}]}', "NaN is not JSON"),
        (b'{"cases":[{"latency_ms":1e400}]}', "beyond the range of a double"),
        (b'{"a":1}{"b":2}', "invalid JSON"),
    ],
)
def test_lines_the_fast_path_declines_get_the_exact_paths_error(line: bytes, message: str) -> None:
    with pytest.raises(CorpusError, match=message):
        parse_run_line(line, 7)


def test_numbers_written_any_way_hash_as_rfc_8785_writes_them() -> None:
    line = b'{"cases":[{"cost_usd":12.0,"latency_ms":1e-06},{"cost_usd":2.5E-7,"latency_ms":100}]}'
    data, canonical = parse_run_line(line, 1)
    assert canonical == (
        b'{"cases":[{"cost_usd":12,"latency_ms":0.000001},{"cost_usd":2.5e-7,"latency_ms":100}]}'
    )
    assert data["cases"][0] == {"cost_usd": 12.0, "latency_ms": 1e-06}


def _member(key: str, value: Any, *, escape_colons: bool) -> str:
    name = json.dumps(key)
    if escape_colons:
        name = name.replace(":", "\\u003a")
    return f"{name}:{json.dumps(value)}"


def _object(members: list[tuple[str, Any]], *, escape_colons: bool) -> str:
    return "{" + ",".join(_member(k, v, escape_colons=escape_colons) for k, v in members) + "}"


@settings(max_examples=300)
@given(
    cases=RUN_CASES,
    where=st.none() | st.integers(min_value=0),
    member=st.tuples(
        st.sampled_from(["case_id", "error", "a:b", ":", "\ue000", "\U00010000"]), VALUES
    ),
    escape_colons=st.booleans(),
)
def test_a_duplicated_member_is_refused_whichever_path_reads_the_line(
    cases: list[dict[str, Any]],
    where: int | None,
    member: tuple[str, Any],
    escape_colons: bool,
) -> None:
    # msgspec keeps the last of two equal keys; the colon count must send the line to the
    # exact path, which names the problem (escaped colons in keys count as colons).
    case_texts = [_object(list(case.items()), escape_colons=escape_colons) for case in cases]
    header: list[tuple[str, Any]] = [("arm_id", "A1"), ("run_index", 1)]
    if where is None:  # in the header
        header += [member, member]
    else:  # in one of the cases
        index = where % len(cases)
        members = [*cases[index].items(), member, member]
        case_texts[index] = _object(members, escape_colons=escape_colons)
    head = _object(header, escape_colons=escape_colons)[:-1]
    raw = (head + ',"cases":[' + ",".join(case_texts) + "]}").encode("utf-8", "surrogatepass")
    with pytest.raises(CorpusError) as exact:
        parse_line_with_number_check(raw, "runs.jsonl", 1)
    with pytest.raises(CorpusError) as fast:
        parse_run_line(raw, 1)
    assert str(fast.value) == str(exact.value)
