"""Run records: the single-parse fast path must agree with RFC 8785 exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.corpus.evaluation import is_canonical_line
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
