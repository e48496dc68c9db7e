"""Checks before the work, in the user's words, with nothing half-written: every command
refuses a bad input or output path with exit 9 before doing anything expensive."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runner.cli import main
from runner.evidence.simulated import simulated_amd_dir

EXAMPLE_CORPUS = Path(__file__).parents[2] / "runner" / "examples" / "corpus"
CHECKSUM = "sha256:" + "a" * 64


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _run_args(out: Path, *extra: str) -> list[str]:
    return [
        *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "r-1", "--tenant", "acme"),
        *("--evidence", "simulated", "--out", str(out), *extra),
    ]


def _tree(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("existing-dir", "error: --out {tmp}/existing-dir: is a directory; give a file name"),
        ("a-file/envelope.json", "{tmp}/a-file is not a directory"),
        ("no-such-dir/envelope.json", "directory {tmp}/no-such-dir does not exist"),
    ],
    ids=["directory", "under-a-file", "missing-directory"],
)
def test_run_refuses_an_unwritable_out_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, message: str
) -> None:
    (tmp_path / "existing-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    before = _tree(tmp_path)
    code, out, err = _run(capsys, *_run_args(tmp_path / target))
    assert (code, out) == (9, "")
    assert message.format(tmp=tmp_path) in err
    assert '"replayed"' not in err  # refused before the replay
    assert _tree(tmp_path) == before  # nothing written, no directory created


def test_run_refuses_a_result_path_that_is_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "envelope.json"
    (tmp_path / "envelope.json.result.json").mkdir()
    code, _, err = _run(capsys, *_run_args(out))
    assert code == 9
    assert f"error: --result-out {out}.result.json: is a directory" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["corpus", "checksum", "{tmp}/absent"], "error: DIR {tmp}/absent: no such directory"),
        (["corpus", "manifest", "{tmp}/file"], "error: DIR {tmp}/file: is not a directory"),
        (
            ["expected", "--run-id", "r", "--corpus", "{tmp}/absent", "--out", "{tmp}/x.json"],
            "error: --corpus {tmp}/absent: no such file",
        ),
        (["score", "{tmp}/absent.json"], "error: FILE|DIR {tmp}/absent.json: no such file"),
        (
            ["measure", "--ovmf", "{tmp}/absent.fd", "--vcpus", "1"],
            "error: --ovmf {tmp}/absent.fd: no such file",
        ),
        (
            ["vcek", "fetch", "--report", "{tmp}/absent.bin"],
            "error: --report {tmp}/absent.bin: no such file",
        ),
        (
            ["publish", "{tmp}/absent.json", "--target", "dir://{tmp}", "--tenant", "acme"],
            "error: ENVELOPE {tmp}/absent.json: no such file",
        ),
        (
            [
                "run",
                "--corpus",
                "{tmp}/absent",
                "--run-id",
                "r",
                "--tenant",
                "acme",
                "--evidence",
                "simulated",
                "--out",
                "{tmp}/e.json",
            ],
            "error: --corpus {tmp}/absent: not a corpus directory, a .tar.gz file or an https:// URL",
        ),
        (
            ["status", "r", "--tenant", "acme", "--kubeconfig", "{tmp}/absent"],
            "error: --kubeconfig {tmp}/absent: no such file",
        ),
        (
            [
                "run",
                "--corpus",
                str(EXAMPLE_CORPUS),
                "--run-id",
                "r",
                "--tenant",
                "acme",
                "--evidence",
                "simulated",
                "--out",
                "{tmp}/e.json",
                "--endorsement-bundle",
                "{tmp}/file/x",
            ],
            "error: --endorsement-bundle {tmp}/file/x: {tmp}/file is not a directory",
        ),
    ],
    ids=[
        "corpus-checksum",
        "corpus-manifest-file",
        "expected-corpus",
        "score",
        "measure-ovmf",
        "vcek-report",
        "publish-envelope",
        "run-corpus",
        "kubeconfig",
        "under-a-file",
    ],
)
def test_a_missing_input_path_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (tmp_path / "file").write_text("x")
    code, out, err = _run(capsys, *(part.format(tmp=tmp_path) for part in argv))
    assert (code, out) == (9, "")
    assert err == message.format(tmp=tmp_path) + "\n"


def test_expected_out_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["expected", "--run-id", "r", "--corpus-checksum", CHECKSUM, "--out", str(tmp_path)]
    code, _, err = _run(capsys, *argv)
    assert code == 9
    assert err == f"error: --out {tmp_path}: is a directory; give a file name\n"


def test_tenant_fetch_out_under_a_file_is_refused_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    token = tmp_path / "token"
    token.write_text("arp_token\n")
    argv = [
        *("tenant", "fetch", "--server", "https://127.0.0.1:9", "--token-file", str(token)),
        *("--tenant", "acme", "--out", str(tmp_path / "file" / "store")),
    ]
    code, _, err = _run(capsys, *argv)
    assert code == 9
    assert err == f"error: --out {tmp_path}/file/store: {tmp_path}/file is not a directory\n"


def test_a_typo_in_a_state_dir_is_never_a_new_pinned_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "stat"
    argv = [
        *("expected", "--run-id", "r", "--corpus-checksum", CHECKSUM),
        *("--trust-local-simulated-root", "--state-dir", str(typo), "--out", str(tmp_path / "x")),
    ]
    code, _, err = _run(capsys, *argv)
    assert code == 9
    assert err == f"error: --state-dir {typo}: no such directory\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    argv[argv.index(str(typo))] = str(empty)
    code, _, err = _run(capsys, *argv)
    assert code == 9
    assert f"error: --state-dir {empty}: no simulated PKI in {empty}" in err
    assert _tree(tmp_path) == ["empty"]
    assert not simulated_amd_dir(empty).exists()


def test_a_new_state_dir_needs_an_existing_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "no-such-parent" / "state"
    code, _, err = _run(capsys, "simulate", "root", "--state-dir", str(state))
    assert code == 9
    assert err == f"error: --state-dir {state}: directory {state.parent} does not exist\n"


def test_flush_of_a_mistyped_spool_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spool = tmp_path / "spoool"
    code, out, err = _run(capsys, "publish", "--flush", "--spool-dir", str(spool))
    assert (code, out) == (9, "")
    assert err == f"error: --spool-dir {spool}: no such directory (nothing to flush)\n"
    assert not spool.exists()


def test_normalize_leaves_nothing_after_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("plan.json", "marks.json", "runs.jsonl"):
        (corpus / name).write_bytes((EXAMPLE_CORPUS / name).read_bytes())
    (corpus / "cases.jsonl").write_text('{"case_id":"a","label":"x"}\ngarbage\n')
    target = tmp_path / "normalized"
    code, out, err = _run(capsys, "corpus", "normalize", str(corpus), "--out", str(target))
    assert (code, out) == (1, "")
    assert "cases.jsonl:2: invalid JSON" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_normalize_checks_runs_against_cases_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sorting a corpus whose runs score cases it does not hold would write a corpus that
    cannot replay: the checks of `corpus check` run first, and nothing is written."""
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    runs = (corpus / "runs.jsonl").read_text()
    first_case = json.loads(runs.splitlines()[0])["cases"][0]["case_id"]
    (corpus / "runs.jsonl").write_text(runs.replace(f'"{first_case}"', '"no-such-case"'))
    target = tmp_path / "normalized"
    code, out, err = _run(capsys, "corpus", "normalize", str(corpus), "--out", str(target))
    assert (code, out) == (1, "")
    assert err.startswith(f"error: DIR {corpus}: ")
    assert "problem(s), nothing written; first: runs.jsonl: field 'cases." in err
    assert "case 'no-such-case' is not in cases.jsonl" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_normalize_writes_the_whole_corpus_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "normalized"
    code, out, _ = _run(capsys, "corpus", "normalize", str(EXAMPLE_CORPUS), "--out", str(target))
    assert code == 0
    assert out.splitlines()[-1] == json.loads((EXAMPLE_CORPUS / "plan.json").read_text())["set_ref"]
    assert sorted(p.name for p in target.iterdir()) == [
        "cases.jsonl", "marks.json", "plan.json", "runs.jsonl"
    ]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["normalized"]
