"""Every command explains itself: a one-line summary, a description, help on every option,
defaults shown, its family's exit codes in the epilog, no markup; --version and --log-level
anywhere. The walk covers every parser ``attested-replay`` builds, so a new command is held to
the same rules without a new test."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from attestation import cli as verifier_cli
from attestation.exit_codes import EXIT_CODES, MEANINGS
from runner import __version__
from runner.cli import build_parser, main
from runner.commands.parsing import PathArgument
from runner.exit_codes import FAMILY_EXIT_CODES, Family

REAL = Path(__file__).parents[1] / "assets" / "real"
MARKUP = re.compile(r"``|:(?:func|class|mod|data|meth):|\*\*")


def _leaf_parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """(command words, parser, its one-line summary) for every parser below ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield (*path, name), child, summaries.get(name)
                yield from _leaf_parsers(child, (*path, name))


PARSERS = list(_leaf_parsers(build_parser()))
IDS = [" ".join(words) for words, _, _ in PARSERS]


def test_every_command_is_listed() -> None:
    assert {words[0] for words, _, _ in PARSERS} >= {
        "run", "demo", "corpus", "score", "expected", "simulate", "vcek", "measure",
        "init-data", "submit", "status", "collect", "cancel", "list", "publish", "serve",
        "token", "tenant",
    }  # fmt: skip


@pytest.mark.parametrize(("words", "parser", "summary"), PARSERS, ids=IDS)
def test_every_command_explains_itself(
    words: tuple[str, ...], parser: argparse.ArgumentParser, summary: str | None
) -> None:
    assert summary, f"{words}: no one-line summary"
    assert "\n" not in summary
    assert not summary.endswith(".")
    assert parser.description is not None
    assert parser.description.startswith(summary[:1].upper() + summary[1:] + ".")
    help_text = parser.format_help()
    assert not MARKUP.search(help_text), f"{words}: markup in the help"
    family = next(f for f in Family if f"exit codes ({f.value}):" in help_text)
    for code, _meaning in FAMILY_EXIT_CODES[family]:
        assert re.search(rf"^  {code}  ", help_text, re.MULTILINE), (words, code)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help, f"{words} {action.option_strings or action.dest}: no help"
        assert action.type is not Path, f"{words} {action.dest}: a bare Path is never checked"
        if isinstance(action.type, PathArgument):
            names = {*action.option_strings, action.metavar}
            assert action.type.label in names, (words, action.type.label, names)


@pytest.mark.parametrize(("words", "parser", "summary"), PARSERS, ids=IDS)
def test_version_and_log_level_after_the_subcommand(
    words: tuple[str, ...],
    parser: argparse.ArgumentParser,
    summary: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    del parser, summary
    assert main([*words, "--version"]) == 0
    assert capsys.readouterr().out == f"attested-replay {__version__}\n"


def test_log_level_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    corpus = Path(__file__).parents[2] / "runner" / "examples" / "corpus"
    for argv in (
        ["--log-level", "debug", "corpus", "checksum", str(corpus)],
        ["corpus", "--log-level", "debug", "checksum", str(corpus)],
        ["corpus", "checksum", "--log-level", "debug", str(corpus)],
        ["corpus", "checksum", str(corpus), "--log-level", "warning"],
    ):
        assert main(argv) == 0, argv
        assert capsys.readouterr().out.startswith("sha256:")
    assert main(["corpus", "checksum", str(corpus), "--log-level", "loud"]) == 9
    assert "error: --log-level: invalid choice: 'loud'" in capsys.readouterr().err


def test_defaults_are_shown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "attestation agent (coco-aa) (default: 30.0)" in text
    assert "--agent-encoding {auto,sha512,sha256-hex}" in text
    assert "(default: auto)" in text
    assert "(default: None)" not in text
    assert "(default: False)" not in text


def test_family_tables_share_the_numbers() -> None:
    """One mapping, one meaning per number: 9 is usage everywhere, 0 success everywhere (the
    verification family is the verifier's own table)."""
    assert FAMILY_EXIT_CODES[Family.VERIFICATION] == tuple(MEANINGS.items())
    for family, rows in FAMILY_EXIT_CODES.items():
        if family is Family.VERIFICATION:
            continue
        codes = dict(rows)
        assert codes[0].startswith("success")
        assert codes[9].startswith("usage")
        assert list(codes) == sorted(codes)


def test_verifier_help_version_and_exit_table(capsys: pytest.CaptureFixture[str]) -> None:
    # --help and --version exit 0, as users and scripts expect; no verdict line is printed.
    assert verifier_cli.main(["--version"]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"verify-attested-run {__version__}\n"
    assert captured.err == ""
    assert verifier_cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert not MARKUP.search(text)
    assert set(MEANINGS) == {0, *EXIT_CODES.values()}
    for code, meaning in MEANINGS.items():
        assert f"  {code}  {meaning.split()[0]}" in text


def test_docs_show_each_family_table_exactly() -> None:
    """docs/cli.md has one table per family, row for row what --help prints."""
    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    for family, rows in FAMILY_EXIT_CODES.items():
        section = text.split(f"### {family.value}:", 1)[1].split("\n### ", 1)[0]
        documented = re.findall(r"^\| (\d) \| (.+) \|$", section, re.MULTILINE)
        assert [(int(code), meaning) for code, meaning in documented] == list(rows), family


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_closed_standard_stream_exits_9(tmp_path: Path, closed: str) -> None:
    """Nothing can be reported: refuse at once (a closed stream used to turn into exit 1)."""
    fd = 1 if closed == "stdout" else 2
    corpus = Path(__file__).parents[2] / "runner" / "examples" / "corpus"
    for program in (
        ["-m", "runner", "corpus", "checksum", str(corpus)],
        [
            *("-c", "import sys; from attestation.cli import main; sys.exit(main())"),
            *("--report", str(REAL / "azure-milan-v3-report.bin")),
            *("--endorsement", str(REAL / "azure-milan-v3-vcek.der")),
            *("--now", "2025-06-01T00:00:00Z"),  # verifies (exit 0) with both streams open
        ],
    ):
        completed = subprocess.run(
            [sys.executable, *program],
            preexec_fn=lambda: os.close(fd),
            check=False,
            cwd=tmp_path,
        )
        assert completed.returncode == 9, program
