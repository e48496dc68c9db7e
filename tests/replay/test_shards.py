"""Sharded replays: the merge of N shards' results is the unsharded report, byte for byte.

Corpora: the pack's worked example (as a corpus directory), the bundled 3000-case example,
a generated corpus with every kind of value (abstentions, errors, unknown costs and
latencies, wide cost spreads, tied latencies) where N does not divide the cases, and
hypothesis-generated corpora.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.encoding.canonical import canonicalize
from attestation.envelope.binding import result_digest
from attestation.envelope.model import ShardPosition
from attestation.scoring.shards import (
    CheckedShard,
    RunKey,
    ShardMergeError,
    check_shard_result,
    merge_shard_results,
    parse_shard_result,
)
from runner.corpus.checksum import compute_checksum
from runner.corpus.errors import CorpusError
from runner.pipeline.replay import replay_corpus, write_runs_index
from runner.shard_tails import read_tails, tail_openings

from .conftest import EXAMPLE_CORPUS, CorpusBuilder, jcs

WORKED = Path(__file__).resolve().parents[1] / "assets" / "worked-example.json"


def shards_with_tails(
    corpus: Path, count: int
) -> list[tuple[CheckedShard, dict[RunKey, list[float]]]]:
    """Each shard's checked result and its tails (from its tails file, checked against the
    roots the result attests)."""
    results = []
    for index in range(count):
        outcome = replay_corpus(corpus, shard=ShardPosition(index=index, count=count))
        assert outcome.shard == ShardPosition(index=index, count=count)
        assert outcome.result_digest == result_digest(outcome.result)
        assert outcome.tails is not None
        parsed = parse_shard_result(outcome.result, where=f"shard {index}")
        checked = check_shard_result(parsed, where=f"shard {index}")
        results.append((checked, read_tails(outcome.tails, checked, where=f"shard {index}")))
    return results


def shard_results(corpus: Path, count: int) -> list[CheckedShard]:
    return [checked for checked, _ in shards_with_tails(corpus, count)]


def merged_report(corpus: Path, count: int) -> dict[str, Any]:
    """The merge of the shards' results with the tail openings their tails give."""
    shards = shards_with_tails(corpus, count)
    checked = [shard for shard, _ in shards]
    openings = tail_openings(checked, [tails for _, tails in shards])
    return merge_shard_results(checked, openings)


def assert_merge_is_unsharded(corpus: Path, counts: list[int]) -> dict[str, Any]:
    whole = replay_corpus(corpus)
    reference = canonicalize(whole.result)
    for count in counts:
        assert canonicalize(merged_report(corpus, count)) == reference, f"N={count}"
    return whole.result


def write_corpus(
    directory: Path,
    *,
    cases: list[dict[str, Any]],
    plan: dict[str, Any],
    marks: dict[str, Any],
    runs: dict[tuple[str, int], list[dict[str, Any]]],
) -> Path:
    """A corpus from plain values; ``runs`` maps (arm, run index) to per-case entries."""
    directory.mkdir(parents=True)
    ordered = sorted(cases, key=lambda case: case["case_id"])
    (directory / "cases.jsonl").write_bytes(b"".join(jcs(case) + b"\n" for case in ordered))
    (directory / "plan.json").write_bytes(jcs(plan))
    (directory / "marks.json").write_bytes(jcs(marks))
    checksum = compute_checksum(directory)
    marks_ref = "sha256:" + hashlib.sha256(jcs(marks)).hexdigest()
    lines = [
        jcs(
            {
                "arm_id": arm,
                "run_index": index,
                "set_ref": checksum,
                "marks_ref": marks_ref,
                "usage": {"source": "test"},
                "cases": entries,
            }
        )
        for (arm, index), entries in sorted(runs.items())
    ]
    (directory / "runs.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return directory


def plan_for(arms: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "question": "q",
        "decision": "d",
        "arms": [
            {"arm_id": arm, "role": "baseline" if i == 0 else "candidate", "change": arm}
            for i, arm in enumerate(arms)
        ],
        "set_ref": "",
        "metrics": ["accuracy_points", "recall_points", "net_points", "p95_latency_ms"],
        "runs_per_arm": 2,
        "scoring": {"method": "exact_match", "judge_use": "none"},
        "spread_limit_points": 5,
        "cost_accounting": "recorded",
        "positive_label": "flag",
        **extra,
    }


def marks_for(marks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "evaluation_ref": "shards",
        "committed_by": "human",
        "committed_at": "2026-01-01",
        "immutable": True,
        "marks": marks,
    }


def worked_example_corpus(directory: Path) -> Path:
    """The pack's worked example as a corpus directory (no latencies were recorded)."""
    example = json.loads(WORKED.read_text())
    per_arm: dict[str, int] = {}
    runs = {}
    for run in example["runs"]:
        per_arm[run["arm"]] = per_arm.get(run["arm"], 0) + 1
        runs[(run["arm"], per_arm[run["arm"]])] = [
            {
                "case_id": case["case_id"],
                "prediction": run["predictions"][case["case_id"]],
                "cost_usd": run["cost_usd"][case["case_id"]],
                "latency_ms": None,
            }
            for case in example["cases"]
        ]
    return write_corpus(
        directory,
        cases=example["cases"],
        plan=plan_for(["A0", "A1"]),
        marks=marks_for(example["pass_marks"]),
        runs=runs,
    )


def varied_corpus(directory: Path, *, cases: int, seed: int) -> Path:
    """Every kind of value the scorer treats differently, from one seed."""
    rng = random.Random(seed)
    labels = ["flag", "clear"]
    corpus_cases = [{"case_id": f"case-{n:04d}", "label": rng.choice(labels)} for n in range(cases)]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for arm in ("A0", "A1", "A2"):
        for index in (1, 2):
            entries = []
            for case in corpus_cases:
                entry: dict[str, Any] = {
                    "case_id": case["case_id"],
                    "prediction": rng.choice([*labels, "review", None]),
                    # wide spreads: nano-dollars beside large totals
                    "cost_usd": rng.choice([0.002, 0.01, 1e-9, 12345.678, 0.1, 0.2]),
                    # ties and a few distinct values, so the tail crosses shard borders
                    "latency_ms": rng.choice([100, 250.5, 250.5, 999, 1200.25]),
                }
                if rng.random() < 0.1:
                    entry["error"] = "timeout"
                entries.append(entry)
            runs[(arm, index)] = entries
    # one run with an unknown cost and one with an unknown latency
    runs[("A1", 2)][-1]["cost_usd"] = None
    runs[("A2", 1)][0]["latency_ms"] = None
    marks = marks_for(
        [
            {"id": "M1", "metric": "net_gain_points", "arm": "A1", "baseline": "A0",
             "threshold": 1, "rule": "r"},
            {"id": "M2", "metric": "p95_latency_at_most", "arm": "A1", "threshold": 1000,
             "rule": "r"},
            {"id": "M3", "metric": "cost_per_case_at_most", "arm": "A0", "threshold": 3000,
             "rule": "r"},
            {"id": "M4", "metric": "spread_points_below", "arm": "A2", "threshold": 5,
             "rule": "r"},
            {"id": "M5", "metric": "twin_fp_not_higher", "arm": "A2", "baseline": "A0",
             "threshold": None, "rule": "r"},
        ]
    )  # fmt: skip
    return write_corpus(
        directory,
        cases=corpus_cases,
        plan=plan_for(["A0", "A1", "A2"], abstain_label="review"),
        marks=marks,
        runs=runs,
    )


def test_worked_example_sharded_gives_the_pack_results(tmp_path: Path) -> None:
    corpus = worked_example_corpus(tmp_path / "worked")
    # 8 cases: 3 and 7 do not divide them; 11 leaves shards without cases
    report = assert_merge_is_unsharded(corpus, [1, 2, 3, 7, 8, 11])
    assert [(mark["id"], mark["result"]) for mark in report["marks"]] == [
        ("M1", "met"),
        ("M2", "met"),
        ("M3", "missed"),
        ("M4", "met"),
        ("M5", "unknown"),
    ]
    expected = json.loads(WORKED.read_text())["expected"]["metrics"]
    runs = {
        f"{arm['arm_id']}-{run['run_index']}": {m["name"]: m["value"] for m in run["metrics"]}
        for arm in report["arms"]
        for run in arm["runs"]
    }
    for run_id, values in expected.items():
        for name, value in values.items():
            if name != "arm":
                assert runs[run_id][name] == value, (run_id, name)


def test_bundled_example_corpus_sharded(tmp_path: Path) -> None:
    assert_merge_is_unsharded(EXAMPLE_CORPUS, [1, 2, 3, 7])


def test_bundled_example_corpus_sharded_with_its_runs_index(tmp_path: Path) -> None:
    """Each shard hashes its own blocks only and takes the other leaves from the index."""
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    write_runs_index(corpus)
    assert_merge_is_unsharded(corpus, [1, 2, 3, 7])


# Shards take whole blocks of 256 cases: 23 cases are one block (every shard but the last is
# empty), 1100 are five blocks (the last short), 1800 eight: 2, 3 and 7 divide none of them.
@pytest.mark.parametrize("indexed", [False, True])
@pytest.mark.parametrize(("cases", "seed"), [(23, 1), (1100, 2), (1800, 3)])
def test_varied_corpus_sharded_when_n_does_not_divide(
    tmp_path: Path, cases: int, seed: int, indexed: bool
) -> None:
    corpus = varied_corpus(tmp_path / "varied", cases=cases, seed=seed)
    if indexed:
        write_runs_index(corpus)
    report = assert_merge_is_unsharded(corpus, [1, 2, 3, 7])
    metrics = {m["name"]: m["value"] for m in report["arms"][2]["runs"][0]["metrics"]}
    assert metrics["p95_latency_ms"] is None  # an unknown latency makes p95 null
    assert metrics["latency_unknown_cases"] == 1


@settings(max_examples=25, deadline=None)
@given(
    cases=st.integers(min_value=1, max_value=1300),
    seed=st.integers(min_value=0, max_value=10**6),
    count=st.integers(min_value=1, max_value=9),
)
def test_generated_corpora_sharded(
    tmp_path_factory: pytest.TempPathFactory, cases: int, seed: int, count: int
) -> None:
    corpus = varied_corpus(tmp_path_factory.mktemp("gen") / "c", cases=cases, seed=seed)
    assert_merge_is_unsharded(corpus, [count])


# -- the merge refuses anything but one complete set ------------------------------------


@pytest.fixture
def three(tmp_path: Path) -> list[CheckedShard]:
    return shard_results(varied_corpus(tmp_path / "v", cases=700, seed=9), 3)  # a block each


@pytest.mark.parametrize(
    ("order", "message"),
    [
        ([0, 1], "shard 2 of 3 is missing"),
        ([0, 2], "shard 1 of 3 is missing"),
        ([0, 1, 1], "shard 1 of 3 appears more than once"),
        ([0, 2, 1], "position 1 holds shard 2"),
        ([0, 1, 2, 2], "shard 2 of 3 appears more than once"),
        ([], "no shard results to merge"),
    ],
)
def test_incomplete_sets_are_refused(
    three: list[CheckedShard], order: list[int], message: str
) -> None:
    with pytest.raises(ShardMergeError, match=message):
        merge_shard_results([three[i] for i in order], ())


def test_shards_of_another_split_or_corpus_are_refused(tmp_path: Path) -> None:
    corpus = varied_corpus(tmp_path / "a", cases=23, seed=9)
    halves = shard_results(corpus, 2)
    thirds = shard_results(corpus, 3)
    with pytest.raises(ShardMergeError, match="results of 2 and of 3 shards"):
        merge_shard_results([halves[0], thirds[1]], ())
    other = shard_results(varied_corpus(tmp_path / "b", cases=23, seed=10), 2)
    with pytest.raises(ShardMergeError, match="shard 1 of 2 differs from shard 0 in set_checksum"):
        merge_shard_results([halves[0], other[1]], ())


def test_a_shard_result_is_checked_on_reading(three: list[CheckedShard]) -> None:
    document = three[1].result.model_dump(mode="json")
    document["first_case"] += 1
    with pytest.raises(
        ShardMergeError, match="case range \\[257, 512\\) is not shard 1 of 3 of 700 cases"
    ):
        parse_shard_result(document, where="shard 1")
    with pytest.raises(ShardMergeError, match="shard 1 carries no result"):
        parse_shard_result(None, where="shard 1")


def test_a_shard_of_a_bad_run_fails_like_the_unsharded_replay(
    builder: CorpusBuilder,
) -> None:
    corpus = builder.write()
    runs = [json.loads(line) for line in (corpus / "runs.jsonl").read_text().splitlines()]
    runs[0]["cases"][3]["case_id"] = "case-99"  # an unknown case in another shard's range
    (corpus / "runs.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
    message = r"runs\.jsonl:1: field 'cases\.3\.case_id': case 'case-99' is not in cases\.jsonl"
    with pytest.raises(CorpusError, match=message):
        replay_corpus(corpus)
    # Every shard checks every entry of every run (the entry of rank k must be the corpus
    # case of rank k), so shard 0 refuses too, though case-99 is in shard 1's range.
    for index in (0, 1):
        with pytest.raises(CorpusError, match=message):
            replay_corpus(corpus, shard=ShardPosition(index=index, count=2))


def test_every_shard_checks_the_run_structure(builder: CorpusBuilder) -> None:
    corpus = builder.write()
    runs = [json.loads(line) for line in (corpus / "runs.jsonl").read_text().splitlines()]
    runs[0]["cases"].append(runs[0]["cases"][0])
    (corpus / "runs.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
    for index in (0, 1):
        with pytest.raises(CorpusError, match="has 5 case results, the corpus has 4 cases"):
            replay_corpus(corpus, shard=ShardPosition(index=index, count=2))
    runs[0]["cases"].pop()
    runs[0]["cases"][3] = "not an object"  # in shard 1's half: shard 0 must still refuse it
    (corpus / "runs.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
    with pytest.raises(CorpusError, match=r"field 'cases\.3': Input should be a valid dictionary"):
        replay_corpus(corpus, shard=ShardPosition(index=0, count=2))


def test_a_shard_result_does_not_grow_with_the_cases(tmp_path: Path) -> None:
    """Ten times the cases: the tails file grows tenfold, the attested shard result by the
    digits of its counters and cost totals only."""
    sizes = {}
    for cases in (700, 7000):
        corpus = varied_corpus(tmp_path / str(cases), cases=cases, seed=5)
        outcome = replay_corpus(corpus, shard=ShardPosition(index=1, count=2))
        assert outcome.tails is not None
        sizes[cases] = (len(canonicalize(outcome.result)), len(outcome.tails))
    (small_result, small_tails), (large_result, large_tails) = sizes[700], sizes[7000]
    assert large_tails > 8 * small_tails
    # 6 runs x (10 counters + 1 cost total), each at most a few digits longer
    assert 0 <= large_result - small_result <= 6 * 11 * 3
