"""The pack's worked example through ``attested-replay score`` (issue #3's first done-when)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from attestation.encoding.canonical import canonicalize

WORKED = Path(__file__).resolve().parents[1] / "assets" / "worked-example.json"
#: The pack record's whole value, metadata included (see tests/replay/assets/README.md).
PACK_VALUE = Path(__file__).resolve().parent / "assets" / "pack-worked-example.json"
#: ``value_sha256`` of the worked example in the pack's descriptor.
PACK_VALUE_SHA256 = "68a2a02056104e275efaf2ea42233bf1276c33c9c9d4b18d5429fa7f1c859849"


def test_worked_example_equals_expected_exactly(
    run_cli: Callable[..., tuple[int, str, str]],
) -> None:
    code, out, err = run_cli("score", str(WORKED))
    assert (code, err) == (0, "")
    expected = json.loads(WORKED.read_text())["expected"]
    printed = json.loads(out)
    assert printed == expected
    assert printed["marks"] == {
        "M1": "met",
        "M2": "met",
        "M3": "missed",
        "M4": "met",
        "M5": "unknown",
    }
    assert printed["metrics"]["A1-2"]["errors"] == 1
    assert printed["metrics"]["A1-2"]["cost_per_case_usd"] is None
    # Same JSON types as the pack: points are numbers with a fraction, errors an integer.
    for run in printed["metrics"].values():
        assert isinstance(run["recall_points"], float)
        assert isinstance(run["errors"], int)


def test_the_packs_own_record_value_scores_as_published(
    run_cli: Callable[..., tuple[int, str, str]],
) -> None:
    value = json.loads(PACK_VALUE.read_bytes())
    assert hashlib.sha256(canonicalize(value)).hexdigest() == PACK_VALUE_SHA256
    assert "title" in value  # the descriptive keys are there and are not scoring input
    code, out, err = run_cli("score", str(PACK_VALUE))
    assert (code, err) == (0, "")
    assert json.loads(out) == value["expected"]
    assert out == run_cli("score", str(WORKED))[1]


def test_a_key_that_is_neither_input_nor_pack_metadata_is_refused(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    value = json.loads(PACK_VALUE.read_bytes())
    value["run_per_arm"] = 2  # a misspelt input must not pass as metadata
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(value))
    code, out, err = run_cli("score", str(path))
    assert (code, out) == (1, "")
    assert err == (
        "error: typo.json: field 'run_per_arm': unknown key (allowed: positive_label, "
        "runs_per_arm, cases, runs, pass_marks, expected)\n"
    )


def test_scoring_twice_is_byte_identical(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    first = run_cli("score", str(WORKED))
    second = run_cli("score", str(WORKED))
    assert first == second


def test_expected_key_is_ignored(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    data = json.loads(WORKED.read_text())
    original = run_cli("score", str(WORKED))[1]
    data["expected"] = {"metrics": {}, "marks": {"M1": "missed"}}
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(data))
    assert run_cli("score", str(altered))[1] == original
    del data["expected"]
    altered.write_text(json.dumps(data))
    assert run_cli("score", str(altered))[1] == original


def test_changed_prediction_changes_result(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    data = json.loads(WORKED.read_text())
    data["runs"][3]["predictions"]["case-08"] = "flag"
    data["runs"][3]["cost_usd"]["case-08"] = 0.01
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(data))
    code, out, _ = run_cli("score", str(path))
    printed = json.loads(out)
    assert code == 0
    assert printed["marks"] == {
        "M1": "met",
        "M2": "met",
        "M3": "met",
        "M4": "missed",  # A1's net is now 75 then 100: a spread of 25
        "M5": "met",
    }
    assert printed["metrics"]["A1-2"] == {
        "arm": "A1",
        "recall_points": 100.0,
        "twin_fp_points": 0.0,
        "net_points": 100.0,
        "errors": 0,
        "cost_per_case_usd": 0.01,
    }


def test_unknown_key_and_unknown_metric_exit_1(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    data = json.loads(WORKED.read_text())
    data["surprise"] = 1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli("score", str(path))
    assert (code, out) == (1, "")
    assert "bad.json: field 'surprise': unknown key" in err

    data = json.loads(WORKED.read_text())
    data["pass_marks"][0]["metric"] = "vibes"
    path.write_text(json.dumps(data))
    code, _, err = run_cli("score", str(path))
    assert code == 1
    assert "field 'pass_marks.0': field 'metric': unknown mark metric 'vibes'" in err


def test_missing_prediction_is_an_error(
    tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    data = json.loads(WORKED.read_text())
    del data["runs"][0]["predictions"]["case-03"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    code, _, err = run_cli("score", str(path))
    assert code == 1
    assert "field 'runs.0.predictions': missing case 'case-03'" in err
