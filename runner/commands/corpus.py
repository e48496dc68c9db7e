"""``attested-replay corpus``: checksum, frozen-set manifest, normalization and export of a
corpus."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
from typing import TYPE_CHECKING

from attestation.encoding.canonical import canonicalize
from attestation.tenant.fsutil import atomic_write, staged_directory
from runner.commands import corpus_export
from runner.commands.parsing import (
    add_actions,
    add_command,
    input_dir,
    output_dir,
    output_file,
)
from runner.corpus.check import DEFAULT_MAX_PROBLEMS, check_corpus, require_valid_corpus
from runner.corpus.manifest import build_manifest
from runner.corpus.normalize import DEFAULT_MEMORY_BUDGET, normalize_corpus
from runner.corpus.runs_index import RUNS_INDEX_FILE
from runner.corpus.starter import write_starter_corpus
from runner.errors import InputError, UsageError
from runner.exit_codes import EXIT_CODES, Family
from runner.pipeline.replay import index_corpus

if TYPE_CHECKING:
    from runner.commands import Subparsers

#: ``corpus check``'s status for an invalid corpus: the code of invalid input.
EXIT_INVALID = EXIT_CODES[InputError]

_SIZE = re.compile(r"^([0-9]+)([KMG]?)$")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``1048576``, ``512K``, ``256M``, ``2G`` -> bytes."""
    match = _SIZE.match(text.strip().upper())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 256M)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "corpus",
        summary="check, checksum, index, describe, normalize, export or upload a corpus",
        description="A corpus directory holds cases.jsonl, runs.jsonl, marks.json and plan.json\n"
        "(docs/replay.md documents every field).",
        family=Family.REPLAY,
    )
    actions = add_actions(parser)

    new = add_command(
        actions,
        "new",
        summary="write a small, valid corpus to start from",
        description="""\
Eight cases, a baseline and a candidate arm with two runs each, and three pass marks (met,
missed, unknown), with set_ref and marks_ref filled in: `attested-replay run --evidence
simulated` replays it as is. plan.json and marks.json are indented for editing;
docs/replay.md explains every field. After editing, `corpus check` reports what to fix and
the new set_ref and marks_ref.""",
        family=Family.REPLAY,
    )
    new.add_argument(
        "corpus",
        type=output_dir("DIR", create=True, empty=True),
        metavar="DIR",
        help="the new corpus directory (absent or empty; its parent must exist)",
    )
    new.set_defaults(handler=handle_new)

    check = add_command(
        actions,
        "check",
        summary="report every problem of a corpus, then its set_ref and marks_ref",
        description="""\
Applies the replay's rules to all four files and their cross-references and reports every
problem (file, line, field, and the allowed values), not only the first. Then prints the
corpus checksum (what every run record's set_ref, and the plan's, must be) and the digest of
marks.json (what every run record's marks_ref must be), each when its file is valid.
--json prints {"ok", "errors": [{"file", "line", "field", "message"}], "omitted", "set_ref",
"marks_ref"}. Exit 0 when the corpus is valid, 1 when it is not.""",
        family=Family.REPLAY,
    )
    check.add_argument("corpus", type=input_dir("DIR"), metavar="DIR", help="corpus directory")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--max-errors",
        type=_positive,
        default=DEFAULT_MAX_PROBLEMS,
        metavar="N",
        help="list at most N problems (the rest are counted)",
    )
    check.set_defaults(handler=handle_check)

    checksum = add_command(
        actions,
        "checksum",
        summary="check the corpus and print its checksum",
        description="Checks every corpus file as `corpus check` does (exit 1 naming the first\n"
        "problem), then prints the checksum: sha256: over the RFC 8785 form of every case of\n"
        "cases.jsonl, in case_id order.",
        family=Family.REPLAY,
    )
    checksum.add_argument("corpus", type=input_dir("DIR"), metavar="DIR", help="corpus directory")
    checksum.set_defaults(handler=handle_checksum)

    index = add_command(
        actions,
        "index",
        summary="write runs.index.json, so that each shard hashes only its own blocks",
        description="""\
Checks the corpus as a replay does and writes DIR/runs.index.json: the leaves of the
evaluation digest (every run's case results in blocks of 256, docs/replay.md section 5).
A shard (`run --shard-index I --shard-count N`) with the file beside the corpus decodes and
hashes only its own blocks of runs.jsonl and takes the other leaves from the file, after
checking that it lists the same leaves for its own blocks; without the file each shard
hashes every run record. The file is not trusted (docs/scale.md says why it need not be);
rebuild it whenever runs.jsonl or cases.jsonl changes. Prints the evaluation digest.""",
        family=Family.REPLAY,
    )
    index.add_argument("corpus", type=input_dir("DIR"), metavar="DIR", help="corpus directory")
    index.set_defaults(handler=handle_index)

    manifest = add_command(
        actions,
        "manifest",
        summary="write the frozen-set manifest",
        description="Per case: the digests of its input and label, its split and group; and\n"
        "the corpus checksum.",
        family=Family.REPLAY,
    )
    manifest.add_argument("corpus", type=input_dir("DIR"), metavar="DIR", help="corpus directory")
    manifest.add_argument(
        "--out",
        type=output_file("--out"),
        metavar="FILE",
        help="write the manifest here instead of standard output",
    )
    manifest.add_argument(
        "--set-id", help="set identifier (default: set-<first 16 hex digits of the checksum>)"
    )
    manifest.add_argument(
        "--frozen-at", metavar="YYYY-MM-DD", help="freezing date (default: today, UTC)"
    )
    manifest.add_argument(
        "--generator-ref",
        default="not recorded",
        metavar="TEXT",
        help="the generator or source of the cases",
    )
    manifest.set_defaults(handler=handle_manifest)

    normalize = add_command(
        actions,
        "normalize",
        summary="rewrite a corpus canonically and sorted",
        description="Every file in RFC 8785 form, cases sorted by case_id and runs by\n"
        "(arm_id, run_index); cases beyond --memory-budget are sorted by an external merge.\n"
        "The new corpus appears only when complete.",
        family=Family.REPLAY,
    )
    normalize.add_argument(
        "corpus", type=input_dir("DIR"), metavar="DIR", help="corpus directory to read"
    )
    normalize.add_argument(
        "--out",
        type=output_dir("--out", create=True, empty=True),
        required=True,
        metavar="DIR2",
        help="new corpus directory (absent or empty; its parent must exist)",
    )
    normalize.add_argument(
        "--memory-budget",
        type=parse_size,
        default=DEFAULT_MEMORY_BUDGET,
        metavar="SIZE",
        help="bytes of cases sorted in memory before spilling to disk, e.g. 512K or 2G "
        "(default: 256M)",
    )
    normalize.set_defaults(handler=handle_normalize)

    corpus_export.register_actions(actions)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def handle_new(args: argparse.Namespace) -> int:
    with staged_directory(args.corpus) as work:
        checksum = write_starter_corpus(work)
    print(f"wrote {args.corpus}: 8 cases, 2 arms x 2 runs, 3 pass marks")
    print(f"  set_ref    {checksum}")
    print(f"  check it:  attested-replay corpus check {args.corpus}")
    print(
        f"  replay it: attested-replay run --corpus {args.corpus} --run-id first-run "
        "--tenant my-team --evidence simulated --out envelope.json"
    )
    return 0


def handle_check(args: argparse.Namespace) -> int:
    report = check_corpus(args.corpus, max_problems=args.max_errors)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return 0 if report.ok else EXIT_INVALID
    for problem in report.problems:
        print(problem.text())
    if report.omitted:
        print(f"... and {report.omitted} more (--max-errors {args.max_errors})")
    total = len(report.problems) + report.omitted
    if report.ok:
        print(f"corpus OK: {report.case_count} cases, {report.run_count} run records")
    else:
        print(f"{total} problem{'s' * (total != 1)} in {args.corpus}")
    print(f"set_ref    {report.set_ref or '(not computed: cases.jsonl has problems)'}")
    print(f"marks_ref  {report.marks_ref or '(not computed: marks.json has problems)'}")
    return 0 if report.ok else EXIT_INVALID


def handle_checksum(args: argparse.Namespace) -> int:
    # A checksum is printed only for a corpus that would replay: every file is checked.
    print(require_valid_corpus(args.corpus).set_ref)
    return 0


def handle_index(args: argparse.Namespace) -> int:
    path = args.corpus / RUNS_INDEX_FILE
    # Checked before the corpus pass (minutes on a large corpus), and again by the write.
    if not os.access(args.corpus, os.W_OK) or (path.exists() and not path.is_file()):
        raise UsageError(f"{path}: cannot be written (the index is written beside runs.jsonl)")
    built = index_corpus(args.corpus)
    try:
        atomic_write(path, built.data)
    except OSError as exc:
        raise UsageError(f"{path}: cannot be written: {exc.strerror or exc}") from exc
    print(
        f"wrote {path} ({built.runs} runs x {built.blocks} blocks); evaluation digest "
        f"{built.evaluation_digest}"
    )
    if built.unlocated:
        print(
            f"note: {built.unlocated} run(s) listed without offsets (read by the exact reader): "
            "every shard reads those whole"
        )
    return 0


def handle_manifest(args: argparse.Namespace) -> int:
    frozen_at = args.frozen_at or dt.datetime.now(dt.UTC).date().isoformat()
    if not re.match(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}", frozen_at) or len(frozen_at) > 40:
        raise UsageError(f"--frozen-at {frozen_at!r} is not YYYY-MM-DD")
    # The template's own limits, so that the manifest written is one the template accepts.
    if args.set_id is not None and not 1 <= len(args.set_id) <= 80:
        raise UsageError("--set-id must be 1 to 80 characters")
    if not 1 <= len(args.generator_ref) <= 300:
        raise UsageError("--generator-ref must be 1 to 300 characters")
    manifest = build_manifest(
        args.corpus, set_id=args.set_id, frozen_at=frozen_at, generator_ref=args.generator_ref
    )
    data = canonicalize(manifest) + b"\n"
    if args.out is None:
        print(data.decode("utf-8"), end="")
    else:
        atomic_write(args.out, data)
        print(f"wrote {args.out} ({manifest['case_count']} cases, {manifest['set_checksum']})")
    return 0


def handle_normalize(args: argparse.Namespace) -> int:
    if args.out.resolve() == args.corpus.resolve():
        raise UsageError(f"--out {args.out}: must differ from the source corpus DIR")
    with staged_directory(args.out) as work:
        result = normalize_corpus(args.corpus, work, memory_budget=args.memory_budget)
        # The checks of `corpus check`, on the sorted copy (so that order is not a problem
        # and cross-references can be followed): a corpus that would not replay is not
        # written. Lines of the sorted copy would mislead, so problems name file and field.
        report = check_corpus(work, max_problems=1)
        if not report.ok:
            first = report.problems[0]
            what = (
                first.message if first.field is None else f"field '{first.field}': {first.message}"
            )
            total = len(report.problems) + report.omitted
            raise InputError(
                f"DIR {args.corpus}: {total} problem(s), nothing "
                f"written; first: {first.file}: {what} (`attested-replay corpus check` lists "
                "them all)"
            )
    how = (
        f"by external merge of {result.spill_files} spilled runs"
        if result.spill_files
        else "in memory"
    )
    print(f"wrote {args.out}: {result.case_count} cases sorted {how}")
    print(result.checksum)
    return 0
