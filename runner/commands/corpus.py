"""``attested-replay corpus``: checksum, frozen-set manifest and normalization of a corpus.

checksum   print sha256: over the RFC 8785 form of every case, in case_id order
manifest   write the frozen-set manifest (per-case input and label digests, checksum)
normalize  rewrite a corpus canonically and sorted (external merge sort past the budget)
export     write the corpus as a deterministic .tar.gz with a checksummed manifest
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.encoding.canonical import canonicalize
from runner.commands import corpus_export
from runner.corpus.checksum import compute_checksum
from runner.corpus.manifest import build_manifest
from runner.corpus.normalize import DEFAULT_MEMORY_BUDGET, normalize_corpus
from runner.errors import UsageError
from tenant.fsutil import atomic_write

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
    parser = subparsers.add_parser(
        "corpus",
        help="checksum, manifest, normalize, export or upload a corpus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="corpus_command", metavar="ACTION")
    actions.required = True

    checksum = actions.add_parser("checksum", help="print the corpus checksum")
    checksum.add_argument("corpus", type=Path, metavar="DIR")
    checksum.set_defaults(handler=handle_checksum)

    manifest = actions.add_parser("manifest", help="write the frozen-set manifest")
    manifest.add_argument("corpus", type=Path, metavar="DIR")
    manifest.add_argument("--out", type=Path, help="write here instead of standard output")
    manifest.add_argument("--set-id", help="default: set-<first 16 hex digits of the checksum>")
    manifest.add_argument("--frozen-at", help="YYYY-MM-DD (default: today, UTC)")
    manifest.add_argument("--generator-ref", default="not recorded", help="generator or source")
    manifest.set_defaults(handler=handle_manifest)

    normalize = actions.add_parser("normalize", help="rewrite the corpus canonically and sorted")
    normalize.add_argument("corpus", type=Path, metavar="DIR")
    normalize.add_argument("--out", type=Path, required=True, metavar="DIR2")
    normalize.add_argument(
        "--memory-budget",
        type=parse_size,
        default=DEFAULT_MEMORY_BUDGET,
        help="bytes of cases sorted in memory before spilling to disk (default 256M)",
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
    result = normalize_corpus(args.corpus, args.out, memory_budget=args.memory_budget)
    how = (
        f"by external merge of {result.spill_files} spilled runs"
        if result.spill_files
        else "in memory"
    )
    print(f"wrote {args.out}: {result.case_count} cases sorted {how}")
    print(result.checksum)
    return 0
