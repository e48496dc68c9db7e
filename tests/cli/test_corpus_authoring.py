"""Writing a corpus as a new user would: `corpus new`, edit, `corpus check` (every error, with
file, line and field, then set_ref and marks_ref), fix, and replay it with simulated evidence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from attestation.cli import main as verify_main
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd import state as simulated_state
from runner.cli import main
from runner.evidence.simulated import simulated_amd_dir


@pytest.fixture
def state_dir(tmp_path: Path, simulated_amd: SimulatedAmd) -> Path:
    directory = tmp_path / "state"
    directory.mkdir()
    simulated_state.store(simulated_amd, simulated_amd_dir(directory))
    return directory


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _check_json(capsys: pytest.CaptureFixture[str], corpus: Path) -> tuple[int, dict[str, Any]]:
    code, out, _ = _cli(capsys, "corpus", "check", str(corpus), "--json")
    return code, json.loads(out)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def test_new_edit_check_and_replay(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "my-corpus"
    code, out, _ = _cli(capsys, "corpus", "new", str(corpus))
    assert code == 0
    assert out.startswith(f"wrote {corpus}: 8 cases, 2 arms x 2 runs, 3 pass marks\n")
    code, report = _check_json(capsys, corpus)
    assert (code, report["ok"], report["errors"]) == (0, True, [])

    # The user's edits: a ninth case, answered in every run, and a question of their own.
    cases = _lines(corpus / "cases.jsonl")
    cases.append({"case_id": "case-09", "label": "flag", "input": "verify your account here"})
    _write_lines(corpus / "cases.jsonl", cases)
    runs = _lines(corpus / "runs.jsonl")
    for run in runs:
        run["cases"].append(
            {"case_id": "case-09", "prediction": "flag", "cost_usd": 0.003, "latency_ms": 512.5}
        )
    _write_lines(corpus / "runs.jsonl", runs)
    plan = json.loads((corpus / "plan.json").read_text())
    plan["question"] = "Which prompt should our scam filter use?"
    (corpus / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")

    # The checksum changed with the cases: check says where, and what the new value is.
    code, report = _check_json(capsys, corpus)
    assert code == 1
    new_set_ref = report["set_ref"]
    assert new_set_ref.startswith("sha256:")
    assert new_set_ref != plan["set_ref"]
    assert [(e["file"], e["line"], e["field"]) for e in report["errors"]] == [
        ("plan.json", 16, "set_ref"),
        *((("runs.jsonl", line, "set_ref")) for line in (1, 2, 3, 4)),
    ]
    assert report["errors"][0]["message"] == (
        f"{plan['set_ref']} is not the corpus checksum {new_set_ref}"
    )

    # The user copies the new set_ref where check said; the corpus is valid and replays.
    plan["set_ref"] = new_set_ref
    (corpus / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    for run in runs:
        run["set_ref"] = new_set_ref
    _write_lines(corpus / "runs.jsonl", runs)
    code, out, _ = _cli(capsys, "corpus", "check", str(corpus))
    assert code == 0
    assert out.splitlines() == [
        "corpus OK: 9 cases, 4 run records",
        f"set_ref    {new_set_ref}",
        f"marks_ref  {report['marks_ref']}",
    ]
    envelope = tmp_path / "envelope.json"
    argv = [
        *("run", "--corpus", str(corpus), "--run-id", "first-run", "--tenant", "my-team"),
        *("--evidence", "simulated", "--state-dir", str(state_dir), "--out", str(envelope)),
    ]
    code, out, _ = _cli(capsys, *argv)
    assert code == 0
    assert "run first-run for tenant my-team: 9 cases replayed" in out
    assert f"corpus checksum   {new_set_ref}" in out
    assert "pass marks        M1=met, M2=missed, M3=unknown" in out
    expected = tmp_path / "expected.json"
    code, _, _ = _cli(
        capsys,
        *("expected", "--run-id", "first-run", "--corpus", str(corpus)),
        *("--trust-local-simulated-root", "--state-dir", str(state_dir), "--out", str(expected)),
    )
    assert code == 0
    assert verify_main(["--envelope", str(envelope), "--expected", str(expected)]) == 0


def test_three_broken_plan_fields_are_all_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    assert main(["corpus", "new", str(corpus)]) == 0
    plan = json.loads((corpus / "plan.json").read_text())
    plan["arms"][1]["role"] = "challenger"
    plan["runs_per_arm"] = 7
    del plan["cost_accounting"]
    (corpus / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    capsys.readouterr()
    code, out, err = _cli(capsys, "corpus", "check", str(corpus))
    assert (code, err) == (1, "")
    assert out.splitlines()[:4] == [
        "plan.json:1: field 'cost_accounting': Field required",
        (
            "plan.json:12: field 'arms.1.role': Input should be 'baseline', 'candidate' or "
            "'control' (found 'challenger')"
        ),
        "plan.json:23: field 'runs_per_arm': Input should be less than or equal to 5 (found 7)",
        "3 problems in " + str(corpus),
    ]
    code, report = _check_json(capsys, corpus)
    assert code == 1
    assert report["errors"] == [
        {"file": "plan.json", "line": 1, "field": "cost_accounting", "message": "Field required"},
        {
            "file": "plan.json",
            "line": 12,
            "field": "arms.1.role",
            "message": "Input should be 'baseline', 'candidate' or 'control' (found 'challenger')",
        },
        {
            "file": "plan.json",
            "line": 23,
            "field": "runs_per_arm",
            "message": "Input should be less than or equal to 5 (found 7)",
        },
    ]
    assert report["set_ref"] == plan["set_ref"]  # cases.jsonl is untouched and valid
    assert report["marks_ref"].startswith("sha256:")
    assert set(report) == {"ok", "errors", "omitted", "set_ref", "marks_ref"}


def test_every_file_and_cross_reference_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    assert main(["corpus", "new", str(corpus)]) == 0
    marks = json.loads((corpus / "marks.json").read_text())
    marks["marks"][0]["metric"] = "happiness"
    marks["marks"][1]["arm"] = "A9"
    (corpus / "marks.json").write_text(json.dumps(marks, indent=2) + "\n")
    cases = _lines(corpus / "cases.jsonl")
    cases[2]["split"] = "train"
    cases[5]["colour"] = "red"
    _write_lines(corpus / "cases.jsonl", cases)
    runs = _lines(corpus / "runs.jsonl")
    runs[1]["cases"][0]["case_id"] = "case-99"
    runs[3]["arm_id"] = "A7"
    _write_lines(corpus / "runs.jsonl", runs)
    capsys.readouterr()
    code, report = _check_json(capsys, corpus)
    assert code == 1
    found = [(e["file"], e["line"], e["field"], e["message"][:40]) for e in report["errors"]]
    assert found == [
        ("marks.json", 9, "marks.0.metric", "unknown mark metric 'happiness' (known: "),
        ("marks.json", 18, "marks.1.arm", "arm 'A9' is not in the plan"),
        ("cases.jsonl", 3, "split", "Input should be 'dev', 'holdout' or 'adv"),
        ("cases.jsonl", 6, "colour", "unknown key (allowed: case_id, label, in"),
        ("runs.jsonl", 4, "arm_id", "arm 'A7' is not in the plan"),
        ("runs.jsonl", None, None, "arm 'A1' has no run record for run_index"),
    ]
    # Without valid cases there is no checksum to hold the run records to.
    assert report["set_ref"] is None
    assert report["marks_ref"] is None


def test_cases_missing_from_runs_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    assert main(["corpus", "new", str(corpus)]) == 0
    runs = _lines(corpus / "runs.jsonl")
    runs[1]["cases"][0]["case_id"] = "case-99"
    runs[2]["cases"].append(dict(runs[2]["cases"][0]))
    _write_lines(corpus / "runs.jsonl", runs)
    capsys.readouterr()
    code, report = _check_json(capsys, corpus)
    assert code == 1
    assert [(e["line"], e["field"], e["message"]) for e in report["errors"]] == [
        (2, "cases.0.case_id", "case 'case-99' is not in cases.jsonl"),
        (2, "cases", "run A0/2 is missing 1 case(s), first 'case-01'"),
        (3, "cases.8.case_id", "duplicate case 'case-01' in this run"),
    ]


def test_an_empty_directory_lists_each_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _check_json(capsys, tmp_path)
    assert code == 1
    assert [(e["file"], e["message"]) for e in report["errors"]] == [
        ("plan.json", "file is missing"),
        ("marks.json", "file is missing"),
        ("cases.jsonl", "file is missing"),
        ("runs.jsonl", "file is missing"),
    ]


def test_max_errors_counts_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus"
    assert main(["corpus", "new", str(corpus)]) == 0
    cases = _lines(corpus / "cases.jsonl")
    for case in cases:
        case["label"] = 7
    _write_lines(corpus / "cases.jsonl", cases)
    capsys.readouterr()
    code, out, _ = _cli(capsys, "corpus", "check", str(corpus), "--max-errors", "3")
    assert code == 1
    lines = out.splitlines()
    assert lines[:3] == [
        f"cases.jsonl:{n}: field 'label': Input should be a valid string (found 7)"
        for n in (1, 2, 3)
    ]
    assert lines[3:5] == ["... and 5 more (--max-errors 3)", f"8 problems in {corpus}"]


def test_new_refuses_a_directory_that_is_not_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    code, out, err = _cli(capsys, "corpus", "new", str(tmp_path / "taken"))
    assert (code, out) == (9, "")
    assert err == f"error: DIR {tmp_path}/taken: is not empty; give a new or empty directory\n"
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


def test_the_frozen_set_rules_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The evaluation design pack's frozen-set rules: case ids never encode the label, and a
    group never spans splits."""
    corpus = tmp_path / "corpus"
    assert main(["corpus", "new", str(corpus)]) == 0
    capsys.readouterr()
    assert _check_json(capsys, corpus)[0] == 0
    cases = _lines(corpus / "cases.jsonl")
    cases[4]["split"] = "dev"  # case-05 of group 'prize', whose case-06 stays in holdout
    cases[5]["case_id"] = "case-06-clear"  # its label is 'clear'
    _write_lines(corpus / "cases.jsonl", cases)
    code, report = _check_json(capsys, corpus)
    assert code == 1
    errors = [(e["line"], e["field"], e["message"]) for e in report["errors"]]
    assert [error for error in errors if error[0] in (5, 6)] == [
        (
            6,
            "case_id",
            (
                "'case-06-clear' contains its label 'clear'; case ids are opaque and never "
                "encode the label"
            ),
        ),
        (
            6,
            "split",
            (
                "case 'case-06-clear' of group 'prize' is in split 'holdout', the group's "
                "first case (line 5) in 'dev'; a group never spans splits"
            ),
        ),
    ]
    # A label's word inside another word is no encoding: 'clear' in 'unclear-7' is not 'clear'.
    cases[5]["case_id"] = "case-06-unclear"
    cases[5]["split"] = "dev"
    _write_lines(corpus / "cases.jsonl", cases)
    code, report = _check_json(capsys, corpus)
    assert [e for e in report["errors"] if e["file"] == "cases.jsonl"] == []


def test_one_bad_value_is_one_problem_in_plain_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    assert main(["corpus", "new", str(corpus)]) == 0
    runs = _lines(corpus / "runs.jsonl")
    runs[0]["cases"][0]["latency_ms"] = "slow"
    _write_lines(corpus / "runs.jsonl", runs)
    capsys.readouterr()
    code, report = _check_json(capsys, corpus)
    assert code == 1
    # Not also "run A0/1 is missing 1 case(s)", and no Python type name ("Decimal").
    assert [(e["line"], e["field"], e["message"]) for e in report["errors"]] == [
        (1, "cases.0.latency_ms", "Input should be a number (found 'slow')")
    ]
