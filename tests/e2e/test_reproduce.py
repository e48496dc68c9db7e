"""``attested-replay tenant reproduce``: re-derive a genuine run's result from a corpus.

The genuine run is the session's simulated run of the bundled example corpus; the tampered
cases change exactly one thing (a label, a case, the plan, the bound result, the code).
"""

from __future__ import annotations

import importlib
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from attestation.envelope.binding import result_digest
from attestation.envelope.model import Workload
from runner.cli import main as runner_main
from runner.pipeline import RunRequest, run
from runner.pipeline.replay import ReplayOutcome, replay_corpus
from runner.workload import current_workload
from tests.e2e.conftest import EXAMPLE_CORPUS, GenuineRun

# runner.pipeline exports the function ``run``, which hides the module of the same name.
run_module = importlib.import_module("runner.pipeline.run")
CHECKSUM = "sha256:fc3c6e0b6c2a2b393dd0f8d028b90e336179bcf77983748ecbf1fa2506a53262"


def _reproduce(
    capsys: pytest.CaptureFixture[str], envelope: Path, corpus: Path
) -> tuple[int, dict[str, Any]]:
    code = runner_main(
        ["tenant", "reproduce", "--envelope", str(envelope), "--corpus", str(corpus), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert report["exitCode"] == code
    return code, report


def _compared(report: dict[str, Any]) -> dict[str, tuple[str, str | None, bool | None]]:
    return {c["name"]: (c["bound"], c["recomputed"], c["same"]) for c in report["comparisons"]}


def _copy_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    return corpus


@pytest.fixture(scope="module")
def example_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    archive = tmp_path_factory.mktemp("export") / "corpus.tar.gz"
    assert runner_main(["corpus", "export", str(EXAMPLE_CORPUS), "--out", str(archive)]) == 0
    return archive


def test_genuine_run_reproduces_from_the_directory(
    genuine_run: GenuineRun, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _reproduce(capsys, genuine_run.envelope, EXAMPLE_CORPUS)

    assert code == 0
    assert report["reproduced"] is True
    assert report["failureClass"] is None
    binding = genuine_run.envelope_json["binding"]
    assert isinstance(binding, dict)
    assert _compared(report) == {
        "corpus checksum": (CHECKSUM, CHECKSUM, True),
        "evaluation digest": (binding["evaluationDigest"], binding["evaluationDigest"], True),
        "result digest": (binding["resultDigest"], binding["resultDigest"], True),
        "scoring code": (
            current_workload().code_digest,
            current_workload().code_digest,
            True,
        ),
    }
    assert report["resultDifferences"] == []
    assert report["trust"].startswith("This check trusts no hardware")


def test_genuine_run_reproduces_from_a_corpus_export(
    genuine_run: GenuineRun, example_export: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _reproduce(capsys, genuine_run.envelope, example_export)

    assert (code, report["reproduced"]) == (0, True)
    assert _compared(report)["corpus checksum"] == (CHECKSUM, CHECKSUM, True)


def _plain_archive(path: Path) -> Path:
    """The corpus files in one top-level directory of a .tar.gz (what `run` takes by URL)."""
    with tarfile.open(path, "w:gz") as tar:
        for name in ("cases.jsonl", "marks.json", "plan.json", "runs.jsonl"):
            tar.add(EXAMPLE_CORPUS / name, arcname=f"corpus/{name}")
    return path


@pytest.mark.parametrize("kind", ["export", "plain"])
def test_every_corpus_input_takes_both_archives(  # noqa: PLR0917 - fixtures
    genuine_run: GenuineRun,
    example_export: Path,
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    """One resolver: `run`, `expected` and `tenant reproduce` take a directory, a corpus export
    and a plain archive of the corpus files alike."""
    archive = example_export if kind == "export" else _plain_archive(tmp_path / "plain.tar.gz")
    code, report = _reproduce(capsys, genuine_run.envelope, archive)
    assert (code, _compared(report)["corpus checksum"]) == (0, (CHECKSUM, CHECKSUM, True))
    expected = tmp_path / "expected.json"
    assert (
        runner_main(
            [
                *("expected", "--run-id", "r-1", "--corpus", str(archive)),
                *("--measurement", "ab" * 48, "--out", str(expected)),
            ]
        )
        == 0
    )
    assert json.loads(expected.read_text())["corpusChecksum"] == CHECKSUM
    envelope = tmp_path / "envelope.json"
    assert (
        runner_main(
            [
                "run",
                "--corpus",
                str(archive),
                "--run-id",
                "r-1",
                "--tenant",
                "acme",
                "--evidence",
                "simulated",
                "--state-dir",
                str(state_dir),
                "--out",
                str(envelope),
            ]
        )
        == 0
    )
    assert json.loads(envelope.read_text())["binding"]["corpusChecksum"] == CHECKSUM


def test_text_output_says_it_trusts_no_hardware(
    genuine_run: GenuineRun, capsys: pytest.CaptureFixture[str]
) -> None:
    code = runner_main(
        [
            "tenant",
            "reproduce",
            "--envelope",
            str(genuine_run.envelope),
            "--corpus",
            str(EXAMPLE_CORPUS),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("REPRODUCED: run run-e2e-1 (tenant acme): the corpus, evaluation")
    assert f"  corpus checksum    same     {CHECKSUM}\n" in out
    assert "This check trusts no hardware" in out
    assert "did not look at the envelope's SEV-SNP evidence" in out


def test_one_label_changed_is_another_corpus(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _copy_corpus(tmp_path)
    cases = (corpus / "cases.jsonl").read_text().splitlines(keepends=True)
    first = json.loads(cases[0])
    first["label"] = "clear" if first["label"] == "flag" else "flag"
    cases[0] = json.dumps(first, separators=(",", ":"), sort_keys=True) + "\n"
    (corpus / "cases.jsonl").write_text("".join(cases))

    code, report = _reproduce(capsys, genuine_run.envelope, corpus)

    assert code == 8
    assert report["failureClass"] == "expectation"
    assert report["reason"].startswith("the corpus differs from the one the envelope binds")
    compared = _compared(report)
    assert compared["corpus checksum"][0] == CHECKSUM
    assert compared["corpus checksum"][2] is False
    # Nothing was scored: the corpus check comes first.
    assert compared["evaluation digest"][1:] == (None, None)
    assert compared["result digest"][1:] == (None, None)


def test_one_case_removed_is_another_corpus(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _copy_corpus(tmp_path)
    cases = (corpus / "cases.jsonl").read_text().splitlines(keepends=True)
    (corpus / "cases.jsonl").write_text("".join(cases[:100] + cases[101:]))

    code, report = _reproduce(capsys, genuine_run.envelope, corpus)

    assert (code, report["failureClass"]) == (8, "expectation")
    assert _compared(report)["corpus checksum"][2] is False


def test_another_plan_is_another_evaluation(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _copy_corpus(tmp_path)
    plan = json.loads((corpus / "plan.json").read_bytes())
    plan["question"] = "Does the candidate prompt do anything at all?"
    (corpus / "plan.json").write_text(json.dumps(plan))

    code, report = _reproduce(capsys, genuine_run.envelope, corpus)

    assert (code, report["failureClass"]) == (8, "expectation")
    assert report["reason"].startswith("the evaluation (plan, marks or run records) differs")
    compared = _compared(report)
    assert compared["corpus checksum"][2] is True
    assert compared["evaluation digest"][2] is False
    # The result carries the evaluation digest, so it differs too; the evaluation is named.
    assert compared["result digest"][2] is False


def _forged_run(
    state_dir: Path,
    out: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    workload: Workload | None = None,
) -> Path:
    """A simulated run whose TEE bound a result the scoring code did not compute."""

    def forged_replay(corpus_dir: Path, **kwargs: Any) -> ReplayOutcome:
        outcome = replay_corpus(corpus_dir, **kwargs)
        result = json.loads(json.dumps(outcome.result))
        accuracy = result["arms"][0]["runs"][0]["metrics"][1]
        assert accuracy["name"] == "accuracy_points"
        accuracy["value"] = 99.999
        return outcome.model_copy(update={"result": result, "result_digest": result_digest(result)})

    monkeypatch.setattr(run_module, "replay_corpus", forged_replay)
    if workload is not None:
        monkeypatch.setattr(run_module, "current_workload", lambda: workload)
    envelope = out / "forged.json"
    run(
        RunRequest(
            corpus=str(EXAMPLE_CORPUS),
            run_id="forged-1",
            tenant="acme",
            evidence="simulated",
            out=envelope,
            state_dir=state_dir,
        )
    )
    return envelope


def test_a_bound_result_the_same_code_does_not_compute_is_binding(
    state_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    envelope = _forged_run(state_dir, tmp_path, monkeypatch)
    monkeypatch.undo()

    code, report = _reproduce(capsys, envelope, EXAMPLE_CORPUS)

    assert (code, report["failureClass"]) == (7, "binding")
    assert "the numbers are not from the published code" in report["reason"]
    compared = _compared(report)
    assert [compared[name][2] for name in compared] == [True, True, False, True]
    [difference] = report["resultDifferences"]
    assert (
        difference == "result.arms[0].runs[0].metrics[1].value: envelope 99.999, recomputed 79.333"
    )


def test_other_scoring_code_with_another_result_is_expectation(
    state_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = Workload(name="attested-replay", version="0.0.9", code_digest="sha256:" + "ab" * 32)
    envelope = _forged_run(state_dir, tmp_path, monkeypatch, workload=other)
    monkeypatch.undo()

    code, report = _reproduce(capsys, envelope, EXAMPLE_CORPUS)

    assert (code, report["failureClass"]) == (8, "expectation")
    assert "sha256:" + "ab" * 32 in report["reason"]
    assert current_workload().code_digest in report["reason"]
    assert "attested-replay 0.0.9" in report["reason"]
    assert _compared(report)["scoring code"] == (
        "sha256:" + "ab" * 32,
        current_workload().code_digest,
        False,
    )


def test_a_result_changed_after_binding_is_binding(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(genuine_run.envelope.read_bytes())
    document["result"]["arms"][0]["runs"][0]["metrics"][1]["value"] = 1.5
    envelope = tmp_path / "tampered.json"
    envelope.write_text(json.dumps(document))

    code, report = _reproduce(capsys, envelope, EXAMPLE_CORPUS)

    assert (code, report["failureClass"]) == (7, "binding")
    assert report["reason"].endswith("the result was changed after binding")


def test_a_malformed_envelope_and_a_tampered_archive_are_malformed(
    genuine_run: GenuineRun,
    example_export: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    not_an_envelope = tmp_path / "envelope.json"
    not_an_envelope.write_text('{"apiVersion": "attested-replay.dev/v1"}')
    code, report = _reproduce(capsys, not_an_envelope, EXAMPLE_CORPUS)
    assert (code, report["failureClass"]) == (1, "malformed")
    assert report["reason"] == (
        "--envelope: envelope has no 'kind' (it must be 'AttestationEnvelope' or "
        "'MergedAttestationEnvelope')"
    )

    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(example_export.read_bytes()[:-4000])
    code, report = _reproduce(capsys, genuine_run.envelope, truncated)
    assert (code, report["failureClass"]) == (1, "malformed")
    assert report["reason"].startswith(f"--corpus {truncated}: ")


def test_unreadable_inputs_are_usage_errors(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    assert (
        runner_main(
            ["tenant", "reproduce", "--envelope", str(missing), "--corpus", str(EXAMPLE_CORPUS)]
        )
        == 9
    )
    assert capsys.readouterr().err == f"error: --envelope {missing}: no such file\n"
    assert (
        runner_main(
            [
                "tenant",
                "reproduce",
                "--envelope",
                str(genuine_run.envelope),
                "--corpus",
                str(missing),
            ]
        )
        == 9
    )
    assert capsys.readouterr().err == f"error: --corpus {missing}: no such file\n"
