"""``corpus normalize``: canonical, sorted output whose checksum equals the original's."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.corpus import normalize as normalize_module
from runner.corpus.checksum import compute_checksum
from runner.corpus.errors import CorpusError, CorpusOrderError
from runner.corpus.normalize import normalize_corpus
from runner.errors import UsageError
from runner.pipeline.replay import replay_corpus
from tests.replay.conftest import EXAMPLE_CORPUS
from tests.replay.golden import EXAMPLE_CHECKSUM


def scramble(source: Path, target: Path) -> Path:
    """The example corpus, shuffled and reformatted (valid, but neither sorted nor canonical)."""
    target.mkdir()
    rng = random.Random(3)
    cases = (source / "cases.jsonl").read_text().splitlines()
    rng.shuffle(cases)
    (target / "cases.jsonl").write_text(
        "".join(
            json.dumps(json.loads(line), indent=None, separators=(", ", ": ")) + "\n"
            for line in cases
        )
    )
    runs = [json.loads(line) for line in (source / "runs.jsonl").read_text().splitlines()]
    for run in runs:
        rng.shuffle(run["cases"])
    rng.shuffle(runs)
    (target / "runs.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
    for name in ("plan.json", "marks.json"):
        (target / name).write_text(json.dumps(json.loads((source / name).read_text()), indent=2))
    return target


def test_scrambled_corpus_is_refused_then_normalized(tmp_path: Path) -> None:
    scrambled = scramble(EXAMPLE_CORPUS, tmp_path / "scrambled")
    with pytest.raises(CorpusOrderError):
        compute_checksum(scrambled)
    result = normalize_corpus(scrambled, tmp_path / "in-memory")
    assert result.spill_files == 0
    assert result.checksum == EXAMPLE_CHECKSUM
    for name in ("cases.jsonl", "runs.jsonl", "plan.json", "marks.json"):
        assert (tmp_path / "in-memory" / name).read_bytes() == (EXAMPLE_CORPUS / name).read_bytes()


def test_external_merge_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scrambled = scramble(EXAMPLE_CORPUS, tmp_path / "scrambled")
    monkeypatch.setattr(normalize_module, "MERGE_FAN_IN", 8)  # forces a multi-pass merge too
    result = normalize_corpus(scrambled, tmp_path / "external", memory_budget=20_000)
    assert result.spill_files > 8
    assert result.checksum == EXAMPLE_CHECKSUM
    assert (tmp_path / "external" / "cases.jsonl").read_bytes() == (
        EXAMPLE_CORPUS / "cases.jsonl"
    ).read_bytes()
    assert sorted(p.name for p in (tmp_path / "external").iterdir()) == [
        "cases.jsonl",
        "marks.json",
        "plan.json",
        "runs.jsonl",
    ]
    assert (
        replay_corpus(tmp_path / "external").result_digest
        == replay_corpus(EXAMPLE_CORPUS).result_digest
    )


def test_duplicates_found_while_merging(tmp_path: Path) -> None:
    source = scramble(EXAMPLE_CORPUS, tmp_path / "scrambled")
    with (source / "cases.jsonl").open("a") as handle:
        handle.write((EXAMPLE_CORPUS / "cases.jsonl").read_text().splitlines()[10] + "\n")
    with pytest.raises(
        CorpusError, match=r"cases.jsonl: field 'case_id': duplicate case id"
    ) as caught:
        normalize_corpus(source, tmp_path / "out", memory_budget=10_000)
    assert type(caught.value) is CorpusError


def test_refuses_non_empty_target(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    with pytest.raises(UsageError, match="not an empty directory"):
        normalize_corpus(EXAMPLE_CORPUS, tmp_path / "out")


def test_normalize_cli(tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    scrambled = scramble(EXAMPLE_CORPUS, tmp_path / "scrambled")
    code, out, err = run_cli(
        "corpus",
        "normalize",
        str(scrambled),
        "--out",
        str(tmp_path / "n"),
        "--memory-budget",
        "64K",
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == EXAMPLE_CHECKSUM
    assert "external merge" in out
