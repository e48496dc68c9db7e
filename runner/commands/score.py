"""``attested-replay score FILE|DIR``: exact-match scoring without evidence."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from runner.commands.parsing import add_command, input_file_or_dir
from runner.corpus.jsonio import read_small_json
from runner.exit_codes import Family
from runner.pipeline.replay import replay_corpus
from runner.scoring.worked_example import score_worked_example

if TYPE_CHECKING:
    from runner.commands import Subparsers


DESCRIPTION = """\
FILE is a worked example (docs/replay.md, "score": cases, runs with predictions and
cost_usd, pass_marks, positive_label; an "expected" key is ignored); the output is
{"metrics": {run_id: {...}}, "marks": {id: result}}. DIR is a corpus directory; the output
is its full evaluation report. Output is deterministic JSON (sorted keys); no evidence."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "score",
        summary="score a worked-example file or a corpus directory",
        description=DESCRIPTION,
        family=Family.REPLAY,
    )
    parser.add_argument(
        "source",
        type=input_file_or_dir("FILE|DIR"),
        metavar="FILE|DIR",
        help="worked-example JSON file, or corpus directory",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    source: Path = args.source
    if source.is_dir():
        output: object = replay_corpus(source).result
    else:
        output = score_worked_example(read_small_json(source), source.name)
    print(json.dumps(output, indent=2, sort_keys=True, ensure_ascii=False))
    return 0
