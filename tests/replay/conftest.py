"""Fixtures for the replay tests: small corpora built from plain dicts, and the CLI."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attestation.encoding.canonical import canonicalize
from runner import cli
from runner.corpus.checksum import compute_checksum

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CORPUS = REPO / "runner" / "examples" / "corpus"


def jcs(value: object) -> bytes:
    return canonicalize(value)


class CorpusBuilder:
    """A valid two-arm corpus whose parts a test can change before writing."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cases: list[dict[str, Any]] = [
            {
                "case_id": "case-01",
                "label": "flag",
                "input": "a",
                "split": "holdout",
                "group": "g1",
            },
            {
                "case_id": "case-02",
                "label": "clear",
                "input": "b",
                "split": "holdout",
                "group": "g1",
            },
            {"case_id": "case-03", "label": "flag", "input": "c", "split": "dev", "group": "g2"},
            {"case_id": "case-04", "label": "clear", "input": "d", "split": "dev", "group": "g2"},
        ]
        self.plan: dict[str, Any] = {
            "question": "q",
            "decision": "d",
            "arms": [
                {"arm_id": "A0", "role": "baseline", "change": "none"},
                {"arm_id": "A1", "role": "candidate", "change": "new prompt"},
            ],
            "set_ref": "",
            "metrics": ["recall_points", "net_points"],
            "runs_per_arm": 2,
            "scoring": {"method": "exact_match", "judge_use": "none"},
            "spread_limit_points": 5,
            "cost_accounting": "recorded",
            "positive_label": "flag",
        }
        self.marks: dict[str, Any] = {
            "evaluation_ref": "test-eval",
            "committed_by": "human",
            "committed_at": "2026-01-01",
            "immutable": True,
            "marks": [
                {"id": "M1", "metric": "recall_at_least", "arm": "A1", "threshold": 50, "rule": "r"}
            ],
        }
        self.predictions: dict[tuple[str, int], list[str | None]] = {
            ("A0", 1): ["flag", "flag", "clear", "clear"],
            ("A0", 2): ["flag", "clear", "clear", "clear"],
            ("A1", 1): ["flag", "clear", "flag", "clear"],
            ("A1", 2): ["flag", "clear", "flag", "flag"],
        }
        self.cost: object = 0.01
        self.latency: object = 100

    def run_records(self, checksum: str) -> list[dict[str, Any]]:
        marks_ref = "sha256:" + hashlib.sha256(jcs(self.marks)).hexdigest()
        records = []
        for (arm_id, run_index), predictions in sorted(self.predictions.items()):
            records.append(
                {
                    "arm_id": arm_id,
                    "run_index": run_index,
                    "set_ref": checksum,
                    "marks_ref": marks_ref,
                    "usage": {"source": "test"},
                    "cases": [
                        {
                            "case_id": case["case_id"],
                            "prediction": prediction,
                            "cost_usd": self.cost,
                            "latency_ms": self.latency,
                        }
                        for case, prediction in zip(self.cases, predictions, strict=True)
                    ],
                }
            )
        return records

    def write(
        self,
        *,
        cases_text: str | None = None,
        runs: list[dict[str, Any]] | None = None,
        runs_text: str | None = None,
    ) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        if cases_text is None:
            cases_text = "".join(json.dumps(case) + "\n" for case in self.cases)
        (self.directory / "cases.jsonl").write_text(cases_text, encoding="utf-8")
        (self.directory / "plan.json").write_text(json.dumps(self.plan), encoding="utf-8")
        (self.directory / "marks.json").write_text(json.dumps(self.marks), encoding="utf-8")
        if runs_text is None:
            try:
                checksum = compute_checksum(self.directory)
            except Exception:
                checksum = "sha256:" + "0" * 64  # a broken corpus; the test expects the error
            records = runs if runs is not None else self.run_records(checksum)
            runs_text = "".join(json.dumps(record) + "\n" for record in records)
        (self.directory / "runs.jsonl").write_text(runs_text, encoding="utf-8")
        return self.directory


@pytest.fixture
def builder(tmp_path: Path) -> CorpusBuilder:
    return CorpusBuilder(tmp_path / "corpus")


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    target = tmp_path / "example"
    shutil.copytree(EXAMPLE_CORPUS, target)
    return target


CliResult = tuple[int, str, str]


@pytest.fixture
def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., CliResult]:
    # The real dispatcher and exit-code table, limited to the commands under test so that
    # unrelated subcommands cannot affect these tests.
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("runner.commands.corpus", "runner.commands.score"))

    def invoke(*argv: str) -> CliResult:
        capsys.readouterr()
        code = cli.main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke
