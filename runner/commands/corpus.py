"""``attested-replay corpus``: checksum, frozen-set manifest, normalization and export of a
corpus."""

from __future__ import annotations

import argparse
import datetime as dt
import re
from typing import TYPE_CHECKING

from attestation.encoding.canonical import canonicalize
from runner.commands import corpus_export
from runner.commands.parsing import (
    add_actions,
    add_command,
    input_dir,
    output_dir,
    output_file,
)
from runner.corpus.checksum import compute_checksum
from runner.corpus.manifest import build_manifest
from runner.corpus.normalize import DEFAULT_MEMORY_BUDGET, normalize_corpus
from runner.errors import UsageError
from runner.exit_codes import Family
from tenant.fsutil import atomic_write, staged_directory

if TYPE_CHECKING:
    from runner.commands import Subparsers

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
        summary="check, checksum, describe, normalize, export or upload a corpus",
        description="A corpus directory holds cases.jsonl, runs.jsonl, marks.json and plan.json\n"
        "(docs/replay.md documents every field).",
        family=Family.REPLAY,
    )
    actions = add_actions(parser)

    checksum = add_command(
        actions,
        "checksum",
        summary="print the corpus checksum",
        description="sha256: over the RFC 8785 form of every case of cases.jsonl, in case_id\n"
        "order (validating every case).",
        family=Family.REPLAY,
    )
    checksum.add_argument("corpus", type=input_dir("DIR"), metavar="DIR", help="corpus directory")
    checksum.set_defaults(handler=handle_checksum)

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


def handle_checksum(args: argparse.Namespace) -> int:
    print(compute_checksum(args.corpus))
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
    how = (
        f"by external merge of {result.spill_files} spilled runs"
        if result.spill_files
        else "in memory"
    )
    print(f"wrote {args.out}: {result.case_count} cases sorted {how}")
    print(result.checksum)
    return 0
