"""Defects a new user met (issue 31), each pinned: bad input is exit 1 naming the file and
line, never exit 9 with a traceback."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest

from runner.cli import main as runner_main
from tests.e2e.conftest import EXAMPLE_CORPUS, GenuineRun


def _corpus_with_runs(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    runs = corpus / "runs.jsonl"
    text = runs.read_text(encoding="utf-8")
    assert text.count(old) >= count
    runs.write_text(text.replace(old, new, count), encoding="utf-8")
    return corpus


def _commands(corpus: Path, genuine_run: GenuineRun, out: Path) -> list[list[str]]:
    return [
        ["corpus", "index", str(corpus)],
        ["score", str(corpus)],
        ["tenant", "reproduce", "--envelope", str(genuine_run.envelope), "--corpus", str(corpus)],
        [
            "run", "--corpus", str(corpus), "--run-id", "r-1", "--tenant", "acme",
            "--evidence", "simulated", "--state-dir", str(genuine_run.state_dir),
            "--out", str(out),
        ],
    ]  # fmt: skip


def test_a_non_ascii_case_id_in_runs_is_exit_1_naming_the_line(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first entry of the second run record (line 2) gets an id no case can have.
    first = EXAMPLE_CORPUS.joinpath("cases.jsonl").read_text().split('"', 4)[3]
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    lines = (corpus / "runs.jsonl").read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(f'"{first}"', f'"{first[:-1]}é"', 1)
    (corpus / "runs.jsonl").write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "envelope.json"
    for argv in _commands(corpus, genuine_run, out):
        code = runner_main(argv)
        captured = capsys.readouterr()
        text = captured.err + captured.out  # tenant reproduce reports on standard output
        assert code == 1, (argv[:2], text)
        assert (
            "runs.jsonl:2: field 'cases.0.case_id': a case id is lowercase ASCII letters, digits and '-' (found"
            in text
        ), (argv[:2], text)
        assert "Traceback" not in text
    assert not out.exists()


def test_costs_beyond_the_largest_double_are_refused_by_check_and_replay(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _corpus_with_runs(tmp_path, '"cost_usd":0.002,', '"cost_usd":1e308,', 2)
    assert runner_main(["corpus", "check", str(corpus)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        "runs.jsonl:1: field 'cases': the known costs of run A0/1 sum to 2.000000E+308 USD, "
        "beyond the largest double (about 1.8E+308): no report can state that total\n"
    )
    for argv in _commands(corpus, genuine_run, tmp_path / "envelope.json")[1:]:
        code = runner_main(argv)
        captured = capsys.readouterr()
        assert code == 1, (argv[:2], captured.err)
        assert "runs.jsonl:1: run A0/1: its known costs sum to 2.000000E+308 USD" in (
            captured.err + captured.out
        ), argv[:2]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run_argv(genuine_run: GenuineRun, out: Path, *extra: str) -> list[str]:
    return [
        "run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "r-tty", "--tenant", "acme",
        "--evidence", "simulated", "--state-dir", str(genuine_run.state_dir), "--out", str(out),
        *extra,
    ]  # fmt: skip


def test_run_on_a_terminal_prints_its_summary_without_the_info_events(
    genuine_run: GenuineRun,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert runner_main(_run_argv(genuine_run, tmp_path / "a.json")) == 0
    # The 13 info events repeated what the summary says; the progress bar stays.
    assert "info" not in terminal.getvalue()
    assert "result" in capsys.readouterr().out
    # --log-level brings them back; a pipe or file gets every event.
    assert runner_main(_run_argv(genuine_run, tmp_path / "b.json", "--log-level", "info")) == 0
    assert "info" in terminal.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert runner_main(_run_argv(genuine_run, tmp_path / "c.json")) == 0
    assert '"level": "info"' in pipe.getvalue()
