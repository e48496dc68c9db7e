"""Run records: formatting does not change the digests; the exact reader's messages and
number forms (the streaming reader against a reference: test_run_records.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from runner.corpus.errors import CorpusError
from runner.corpus.evaluation_files import exact_run_parts
from runner.corpus.jsonio import parse_line
from runner.pipeline.replay import replay_corpus
from tests.replay.golden import (
    EXAMPLE_EVALUATION_DIGEST,
    EXAMPLE_RESULT_DIGEST,
)


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


# -- the exact reader's messages, and numbers as RFC 8785 writes them ------------------------


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
def test_the_exact_reader_names_what_is_wrong(line: bytes, message: str) -> None:
    with pytest.raises(CorpusError, match=message):
        parse_line(line, "runs.jsonl", 7)


def test_numbers_written_any_way_hash_as_rfc_8785_writes_them() -> None:
    line = b'{"cases":[{"cost_usd":12.0,"latency_ms":1e-06},{"cost_usd":2.5E-7,"latency_ms":100}]}'
    data = parse_line(line, "runs.jsonl", 1)
    cases = data.pop("cases")
    header, leaves = exact_run_parts(data, cases, range(1), 1)
    assert header == b"{}"
    assert leaves == [
        hashlib.sha256(
            b'\x00[{"cost_usd":12,"latency_ms":0.000001},{"cost_usd":2.5e-7,"latency_ms":100}]'
        ).digest()
    ]
    assert cases[0] == {"cost_usd": 12.0, "latency_ms": 1e-06}
