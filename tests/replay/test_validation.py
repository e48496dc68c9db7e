"""Every corpus validation error names its file, line and field, and is an InputError."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from runner.corpus.check import check_corpus
from runner.corpus.checksum import compute_checksum
from runner.corpus.errors import CorpusError, CorpusOrderError
from runner.errors import InputError
from runner.pipeline.replay import replay_corpus
from tests.replay.conftest import CorpusBuilder


def lines(cases: list[dict[str, object]]) -> str:
    return "".join(json.dumps(case) + "\n" for case in cases)


def expect_error(directory: Path, message: str, error: type[CorpusError] = CorpusError) -> None:
    with pytest.raises(error) as caught:
        replay_corpus(directory)
    assert type(caught.value) is error
    assert isinstance(caught.value, InputError)
    assert message in str(caught.value)
    # `corpus check` applies the same rules and reports the replay's error among all it finds.
    report = check_corpus(directory)
    assert not report.ok
    # (check also gives plan.json and marks.json problems their line; the replay does not)
    reported = [
        text
        for problem in report.problems
        for text in (problem.text(), replace(problem, line=None).text())
    ]
    assert any(message in text for text in reported), (message, reported)


def test_valid_corpus_replays(builder: CorpusBuilder) -> None:
    outcome = replay_corpus(builder.write())
    assert outcome.case_count == 4
    marks = outcome.result["marks"]
    assert isinstance(marks, list)
    assert [mark["result"] for mark in marks if isinstance(mark, dict)] == ["met"]


def test_unknown_key_in_case(builder: CorpusBuilder) -> None:
    builder.cases[2]["colour"] = "red"
    expect_error(builder.write(), "cases.jsonl:3: field 'colour': unknown key")


def test_wrong_type_names_field(builder: CorpusBuilder) -> None:
    builder.cases[1]["label"] = 7
    expect_error(builder.write(), "cases.jsonl:2: field 'label': Input should be a valid string")


def test_duplicate_case_id(builder: CorpusBuilder) -> None:
    text = lines([*builder.cases[:2], builder.cases[1], *builder.cases[2:]])
    expect_error(
        builder.write(cases_text=text),
        "cases.jsonl:3: field 'case_id': duplicate case id 'case-02' (also on line 2)",
    )


def test_wrong_order_tells_to_normalize(builder: CorpusBuilder) -> None:
    text = lines([builder.cases[1], builder.cases[0], *builder.cases[2:]])
    expect_error(
        builder.write(cases_text=text),
        "cases.jsonl:2: field 'case_id': 'case-01' comes after 'case-02'",
        CorpusOrderError,
    )
    with pytest.raises(CorpusOrderError, match="attested-replay corpus normalize"):
        compute_checksum(builder.directory)


def test_bad_json_line(builder: CorpusBuilder) -> None:
    text = lines(builder.cases[:3]) + '{"case_id": "case-04", "label": \n'
    expect_error(builder.write(cases_text=text), "cases.jsonl:4: invalid JSON")


def test_duplicate_json_key(builder: CorpusBuilder) -> None:
    text = lines(builder.cases[:3]) + '{"case_id":"case-04","label":"flag","label":"clear"}\n'
    expect_error(
        builder.write(cases_text=text), "cases.jsonl:4: invalid JSON: duplicate key 'label'"
    )


def test_nan_is_refused(builder: CorpusBuilder) -> None:
    text = lines(builder.cases[:3]) + '{"case_id":"case-04","label":"flag","input":NaN}\n'
    expect_error(builder.write(cases_text=text), "cases.jsonl:4: invalid JSON: NaN is not JSON")


def test_empty_line(builder: CorpusBuilder) -> None:
    text = lines(builder.cases[:2]) + "\n" + lines(builder.cases[2:])
    expect_error(builder.write(cases_text=text), "cases.jsonl:3: empty line")


def test_explicit_null_split(builder: CorpusBuilder) -> None:
    builder.cases[0]["split"] = None
    expect_error(builder.write(), "cases.jsonl:1: field 'split': split may be omitted but not null")


def test_case_id_must_be_opaque_ascii(builder: CorpusBuilder) -> None:
    builder.cases[3]["case_id"] = "Case-04"
    expect_error(
        builder.write(),
        "cases.jsonl:4: field 'case_id': a case id is lowercase ASCII letters, digits and '-'",
    )


def test_huge_integer_input(builder: CorpusBuilder) -> None:
    builder.cases[3]["input"] = 2**60
    expect_error(builder.write(), "cases.jsonl:4: integer 1152921504606846976 is outside")


def test_no_cases(builder: CorpusBuilder) -> None:
    expect_error(builder.write(cases_text=""), "cases.jsonl: the corpus has no cases")


def test_prediction_for_unknown_case(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    records[2]["cases"][1]["case_id"] = "case-99"
    expect_error(
        builder.write(runs=records),
        "runs.jsonl:3: field 'cases.1.case_id': case 'case-99' is not in cases.jsonl",
    )


def test_missing_case_in_run(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    del records[1]["cases"][2]
    expect_error(
        builder.write(runs=records),
        "runs.jsonl:2: field 'cases': run A0/2 is missing 1 case(s), first 'case-03'",
    )


def test_duplicate_case_in_run(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    records[0]["cases"][3] = records[0]["cases"][0]
    expect_error(
        builder.write(runs=records),
        "runs.jsonl:1: field 'cases.3.case_id': duplicate case 'case-01' in this run",
    )


def test_unknown_key_in_run_case(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    records[3]["cases"][0]["confidence"] = 0.9
    expect_error(
        builder.write(runs=records), "runs.jsonl:4: field 'cases.0.confidence': unknown key"
    )


def test_cost_must_be_a_number(builder: CorpusBuilder) -> None:
    builder.cost = "0.01"
    expect_error(
        builder.write(),
        "runs.jsonl:1: field 'cases.0.cost_usd': Input should be a number",
    )


def test_runs_out_of_order(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    records[1], records[2] = records[2], records[1]
    expect_error(
        builder.write(runs=records),
        "runs.jsonl:3: field 'arm_id': run A0/2 comes after A1/1",
        CorpusOrderError,
    )


def test_missing_run(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    del records[3]
    expect_error(
        builder.write(runs=records), "runs.jsonl: arm 'A1' has no run record for run_index 2"
    )


def test_run_names_another_set(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records("sha256:" + "1" * 64)
    expect_error(builder.write(runs=records), "runs.jsonl:1: field 'set_ref':")


def test_run_names_other_marks(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    records[0]["marks_ref"] = "sha256:" + "2" * 64
    expect_error(builder.write(runs=records), "runs.jsonl:1: field 'marks_ref':")


def test_unknown_arm_in_run(builder: CorpusBuilder) -> None:
    builder.predictions[("A9", 1)] = ["flag"] * 4
    expect_error(builder.write(), "runs.jsonl:5: field 'arm_id': arm 'A9' is not in the plan")


def test_unknown_mark_metric(builder: CorpusBuilder) -> None:
    builder.marks["marks"][0]["metric"] = "happiness"
    expect_error(
        builder.write(), "marks.json: field 'marks.0.metric': unknown mark metric 'happiness'"
    )


def test_mark_without_threshold(builder: CorpusBuilder) -> None:
    del builder.marks["marks"][0]["threshold"]
    expect_error(builder.write(), "marks.json: field 'marks.0.threshold': recall_at_least needs")


def test_plan_unknown_metric(builder: CorpusBuilder) -> None:
    builder.plan["metrics"] = ["recall_points", "vibes"]
    expect_error(builder.write(), "plan.json: field 'metrics.1': unknown metric 'vibes'")


def test_plan_needs_baseline(builder: CorpusBuilder) -> None:
    builder.plan["arms"][0]["role"] = "control"
    expect_error(builder.write(), "plan.json: the plan needs at least one baseline arm")


def test_plan_set_ref_must_match(builder: CorpusBuilder) -> None:
    builder.plan["set_ref"] = "sha256:" + "3" * 64
    expect_error(builder.write(), "plan.json: field 'set_ref':")


def test_exclusions_refused(builder: CorpusBuilder) -> None:
    builder.plan["exclusions_rule"] = "drop timeouts"
    expect_error(builder.write(), "exclusions are not supported")


def test_missing_file(builder: CorpusBuilder) -> None:
    directory = builder.write()
    (directory / "marks.json").unlink()
    expect_error(directory, "marks.json: file is missing")


def test_oversized_case_line(builder: CorpusBuilder, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.corpus import checksum

    monkeypatch.setattr(checksum, "MAX_CASE_LINE_BYTES", 150)
    builder.cases[1]["input"] = "x" * 200
    with pytest.raises(CorpusError, match=r"cases.jsonl:2: line longer than 150 bytes") as caught:
        compute_checksum(builder.write())
    assert type(caught.value) is CorpusError


def test_invalid_corpus_exits_1(
    builder: CorpusBuilder, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    builder.cases[0]["colour"] = "red"
    directory = builder.write()
    code, out, err = run_cli("corpus", "checksum", str(directory))
    assert (code, out) == (1, "")
    assert err == (
        "error: cases.jsonl:1: field 'colour': unknown key "
        "(allowed: case_id, label, input, split, group)\n"
    )
    code, out, err = run_cli("score", str(directory))
    assert (code, out) == (1, "")


def test_bad_usage_exits_9(run_cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    code, _, err = run_cli("corpus", "normalize", str(tmp_path))
    assert code == 9
    assert "--out" in err
    code, _, err = run_cli(
        "corpus",
        "normalize",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--memory-budget",
        "lots",
    )
    assert code == 9
    assert "not a size" in err


def test_missing_directory(tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    missing = tmp_path / "nowhere"
    code, out, err = run_cli("corpus", "checksum", str(missing))
    assert (code, out) == (9, "")
    assert err == f"error: DIR {missing}: no such directory\n"
    with pytest.raises(CorpusError, match="not a corpus directory") as caught:
        replay_corpus(missing)
    assert type(caught.value) is CorpusError


def test_explicit_null_error_in_run(builder: CorpusBuilder) -> None:
    builder.write()
    records = builder.run_records(compute_checksum(builder.directory))
    records[0]["cases"][2]["error"] = None
    expect_error(
        builder.write(runs=records),
        "runs.jsonl:1: field 'cases.2.error': error may be omitted but not null",
    )


def test_a_label_equal_to_the_abstain_label_is_refused(builder: CorpusBuilder) -> None:
    builder.plan["abstain_label"] = "review"
    builder.cases[2]["label"] = "review"
    expect_error(
        builder.write(),
        "cases.jsonl:3: field 'label': case 'case-03' is labelled with the plan's abstain_label "
        "'review'; a label must be an answer, not an abstention",
    )
