"""``replay_corpus``: the API ``attested-replay run`` calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from attestation.encoding.canonical import canonicalize
from attestation.envelope.binding import result_digest
from runner.corpus.errors import CorpusError
from runner.pipeline.replay import ReplayOutcome, compute_checksum, replay_corpus
from tests.replay.conftest import EXAMPLE_CORPUS, CorpusBuilder
from tests.replay.golden import EXAMPLE_CHECKSUM, EXAMPLE_EVALUATION_DIGEST, EXAMPLE_RESULT_DIGEST
from tests.replay.test_checksum import reference_leaves


def test_example_replay_golden() -> None:
    outcome = replay_corpus(EXAMPLE_CORPUS)
    assert outcome.corpus_checksum == EXAMPLE_CHECKSUM
    assert outcome.case_count == 3000
    assert outcome.evaluation_digest == EXAMPLE_EVALUATION_DIGEST
    assert outcome.result_digest == result_digest(outcome.result) == EXAMPLE_RESULT_DIGEST
    marks = outcome.result["marks"]
    assert isinstance(marks, list)
    results = {m["id"]: m["result"] for m in marks if isinstance(m, dict)}
    assert results == {"M1": "met", "M2": "met", "M3": "missed", "M4": "met", "M5": "unknown"}
    missed = next(m for m in marks if isinstance(m, dict) and m["id"] == "M3")
    assert missed["diagnosis"] == (
        "Run 1: A1 recall_points 91.652 fails >= 95. Run 2: A1 recall_points 91.312 fails >= 95 "
        "(22 error(s) or null prediction(s) in that run scored as wrong)."
    )
    assert outcome.result["set_checksum"] == EXAMPLE_CHECKSUM
    assert outcome.result["evaluation_digest"] == EXAMPLE_EVALUATION_DIGEST


def test_replay_is_deterministic() -> None:
    first = replay_corpus(EXAMPLE_CORPUS)
    second = replay_corpus(EXAMPLE_CORPUS)
    assert canonicalize(first.result) == canonicalize(second.result)
    assert first == second


def test_report_follows_the_template() -> None:
    result = replay_corpus(EXAMPLE_CORPUS).result
    assert list(result) == [
        "evaluation_ref",
        "marks",
        "arms",
        "limits",
        "scorer",
        "positive_label",
        "set_checksum",
        "evaluation_digest",
        "case_count",
    ]
    arms = result["arms"]
    assert isinstance(arms, list)
    first = arms[0]
    assert isinstance(first, dict)
    assert set(first) == {"arm_id", "stable", "spread_points", "runs"}
    runs = first["runs"]
    assert isinstance(runs, list)
    assert isinstance(runs[0], dict)
    assert runs[0]["run_index"] == 1
    assert runs[0]["metrics"] == [
        {"name": "cases", "value": 3000},
        {"name": "accuracy_points", "value": 79.333},
        {"name": "recall_points", "value": 71.38},
        {"name": "twin_fp_points", "value": 15.553},
        {"name": "net_points", "value": 55.827},
        {"name": "abstention_points", "value": None},
        {"name": "errors", "value": 0},
        {"name": "cost_per_case_usd", "value": 0.002},
        {"name": "cost_known_subtotal_usd", "value": 6.0},
        {"name": "cost_unknown_cases", "value": 0},
        {"name": "p95_latency_ms", "value": 861.0},
        {"name": "latency_unknown_cases", "value": 0},
    ]


def test_progress_goes_from_cases_to_scored_runs() -> None:
    seen: list[tuple[int, int | None]] = []
    replay_corpus(EXAMPLE_CORPUS, progress=lambda done, total: seen.append((done, total)))
    assert seen[0][1] is None
    assert seen[-1] == (15000, 15000)  # 3000 cases read + 4 runs x 3000 scored


def test_changed_prediction_changes_result_digest(example_copy: Path) -> None:
    runs = (example_copy / "runs.jsonl").read_text().splitlines()
    record = json.loads(runs[0])
    record["cases"][0]["prediction"] = (
        "flag" if record["cases"][0]["prediction"] == "clear" else "clear"
    )
    runs[0] = json.dumps(record)
    (example_copy / "runs.jsonl").write_text("\n".join(runs) + "\n")
    outcome = replay_corpus(example_copy)
    assert outcome.corpus_checksum == EXAMPLE_CHECKSUM
    assert outcome.evaluation_digest != EXAMPLE_EVALUATION_DIGEST
    assert outcome.result_digest != EXAMPLE_RESULT_DIGEST


def test_evaluation_digest_ignores_formatting(example_copy: Path) -> None:
    plan = json.loads((example_copy / "plan.json").read_text())
    (example_copy / "plan.json").write_text(json.dumps(plan, indent=4, sort_keys=False))
    assert replay_corpus(example_copy).evaluation_digest == EXAMPLE_EVALUATION_DIGEST


def test_changed_label_is_caught_by_set_ref(example_copy: Path) -> None:
    text = (example_copy / "cases.jsonl").read_text()
    (example_copy / "cases.jsonl").write_text(text.replace('"label":"clear"', '"label":"flag"', 1))
    with pytest.raises(CorpusError, match=r"plan\.json: field 'set_ref'") as caught:
        replay_corpus(example_copy)
    assert type(caught.value) is CorpusError


def test_outcome_is_frozen() -> None:
    outcome = replay_corpus(EXAMPLE_CORPUS)
    assert isinstance(outcome, ReplayOutcome)
    with pytest.raises(ValidationError, match="Instance is frozen") as raised:
        outcome.case_count = 1  # type: ignore[misc]
    assert [error["type"] for error in raised.value.errors()] == ["frozen_instance"]
    assert outcome.case_count == 3000


def test_compute_checksum_export() -> None:
    assert compute_checksum(EXAMPLE_CORPUS) == EXAMPLE_CHECKSUM


def test_small_corpus_report(builder: CorpusBuilder) -> None:
    builder.marks["marks"] = [
        {
            "id": "N",
            "metric": "net_gain_points",
            "arm": "A1",
            "baseline": "A0",
            "threshold": 10,
            "rule": "r",
        },
        {"id": "S", "metric": "spread_points_below", "arm": "A1", "threshold": 5, "rule": "r"},
        {"id": "E", "metric": "errors_at_most", "arm": "A1", "threshold": 0, "rule": "r"},
    ]
    builder.predictions[("A1", 2)] = ["flag", "clear", None, "flag"]
    builder.plan["spread_limit_points"] = 60
    result: Any = replay_corpus(builder.write()).result
    marks = {m["id"]: m for m in result["marks"]}
    # A0 nets: 50-50=0 and 50-0=50; A1 nets: 100-0=100 and 50-50=0.
    assert marks["N"]["result"] == "missed"
    assert (
        marks["N"]["diagnosis"]
        == "Run 2: A1 net_points 0.000 minus A0 50.000 is -50.000, below 10 (1 error(s) or null prediction(s) in that run scored as wrong)."
    )
    assert marks["S"]["result"] == "missed"
    assert marks["S"]["diagnosis"] == "A1's net_points differ by 100.000 between runs, not below 5."
    assert marks["E"]["result"] == "missed"
    arms = {a["arm_id"]: a for a in result["arms"]}
    assert arms["A0"]["stable"] is True
    assert arms["A1"]["stable"] is False
    assert arms["A1"]["spread_points"] == 100.0
    assert arms["A0"]["spread_points"] == 50.0


def test_cli_checksum_and_score(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    assert run_cli("corpus", "checksum", str(EXAMPLE_CORPUS)) == (0, EXAMPLE_CHECKSUM + "\n", "")
    code, out, err = run_cli("score", str(EXAMPLE_CORPUS))
    assert (code, err) == (0, "")
    assert result_digest(json.loads(out)) == EXAMPLE_RESULT_DIGEST


def test_cli_corpus_index(example_copy: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    index = example_copy / "runs.index.json"
    assert run_cli("corpus", "index", str(example_copy)) == (
        0,
        f"wrote {index} (4 runs x 12 blocks); evaluation digest {EXAMPLE_EVALUATION_DIGEST}\n",
        "",
    )
    document = json.loads(index.read_text())
    assert (document["format"], document["block_cases"], document["case_count"]) == (
        "attested-replay.runs-index/v3",
        256,
        3000,
    )
    assert [len(run["leaves"]) for run in document["runs"]] == [12 * 64] * 4
    # Where each run's line and blocks start (tests/replay/test_run_offsets.py checks them).
    assert [len(run["offsets"]["blocks"]) for run in document["runs"]] == [12] * 4
    # The blocks of cases.jsonl: where every 256th line starts (then the size), and the
    # leaves the checksum's tree has (written out independently in test_checksum).
    lines = (example_copy / "cases.jsonl").read_bytes().splitlines(keepends=True)
    starts = [sum(map(len, lines[:first])) for first in range(0, 3000, 256)]
    assert document["cases"]["offsets"] == [*starts, sum(map(len, lines))]
    cases = [json.loads(line) for line in lines]
    assert document["cases"]["leaves"] == b"".join(reference_leaves(cases)).hex()


def test_cli_corpus_index_refuses_before_reading_and_writes_nothing_for_a_bad_corpus(
    example_copy: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    index = example_copy / "runs.index.json"
    index.mkdir()
    code, out, err = run_cli("corpus", "index", str(example_copy))
    assert (code, out) == (9, "")
    assert f"{index}: cannot be written (the index is written beside runs.jsonl)" in err
    index.rmdir()
    (example_copy / "marks.json").write_text("{}")
    code, out, err = run_cli("corpus", "index", str(example_copy))
    assert (code, out) == (1, "")
    assert "marks.json" in err
    assert not index.exists()


def test_cli_manifest(tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    out_file = tmp_path / "manifest.json"
    code, out, _ = run_cli(
        "corpus",
        "manifest",
        str(EXAMPLE_CORPUS),
        "--out",
        str(out_file),
        "--frozen-at",
        "2026-01-15",
        "--generator-ref",
        "scripts/make_example_corpus.py --seed 8537",
    )
    assert code == 0
    assert out == f"wrote {out_file} (3000 cases, {EXAMPLE_CHECKSUM})\n"
    manifest = json.loads(out_file.read_text())
    assert manifest["set_checksum"] == EXAMPLE_CHECKSUM
    assert manifest["case_count"] == 3000
    assert manifest["label_access"] == "scorer_only"
    assert manifest["frozen_at"] == "2026-01-15"
    assert manifest["set_id"] == "set-" + EXAMPLE_CHECKSUM[7:23]
    first_line = json.loads((EXAMPLE_CORPUS / "cases.jsonl").read_text().splitlines()[0])
    import hashlib

    assert manifest["cases"][0] == {
        "case_id": first_line["case_id"],
        "input_sha256": hashlib.sha256(canonicalize(first_line["input"])).hexdigest(),
        "label_sha256": hashlib.sha256(canonicalize(first_line["label"])).hexdigest(),
        "split": first_line["split"],
        "group": first_line["group"],
    }
    # Without --out the same bytes go to standard output.
    code, printed, _ = run_cli(
        "corpus",
        "manifest",
        str(EXAMPLE_CORPUS),
        "--frozen-at",
        "2026-01-15",
        "--generator-ref",
        "scripts/make_example_corpus.py --seed 8537",
    )
    assert printed == out_file.read_text()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--set-id", "", "--set-id must be 1 to 80 characters"),
        ("--set-id", "s" * 81, "--set-id must be 1 to 80 characters"),
        ("--generator-ref", "g" * 301, "--generator-ref must be 1 to 300 characters"),
        ("--frozen-at", "15 January 2026", "--frozen-at '15 January 2026' is not YYYY-MM-DD"),
    ],
)
def test_manifest_options_outside_the_template_are_usage_errors(
    tmp_path: Path,
    run_cli: Callable[..., tuple[int, str, str]],
    option: str,
    value: str,
    message: str,
) -> None:
    out_file = tmp_path / "manifest.json"
    argv = ("corpus", "manifest", str(EXAMPLE_CORPUS), "--out", str(out_file), option, value)
    assert run_cli(*argv) == (9, "", f"error: {message}\n")
    assert not out_file.exists()


def test_manifest_needs_split(
    builder: CorpusBuilder, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    del builder.cases[2]["split"]
    code, _, err = run_cli("corpus", "manifest", str(builder.write()))
    assert code == 1
    assert (
        err
        == "error: cases.jsonl:3: field 'split': the frozen-set manifest needs a split on every case\n"
    )
