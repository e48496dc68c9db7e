"""``attested-replay corpus export``: a corpus as one deterministic, checksummed archive.

Registered under ``attested-replay corpus`` (see :mod:`runner.commands.corpus`). The format is
:mod:`tenant.corpus_export` (docs/reproduce.md).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

from runner.corpus.checksum import scan_cases
from runner.errors import InputError, UsageError
from tenant.corpus_export import ExportError, ExportManifest, describe_files, write_export
from tenant.fsutil import atomic_output

_CHUNK = 1024 * 1024


def register_actions(actions: Any) -> None:  # noqa: ANN401  # argparse's private subparsers type
    export = actions.add_parser(
        "export",
        help="write the corpus as a deterministic .tar.gz with a checksummed manifest",
        description="Write DIR's four corpus files, byte for byte, into a deterministic "
        ".tar.gz whose first member, corpus-export.json, carries the corpus checksum and each "
        "file's size and SHA-256. The same files always give the same archive. Tenants check "
        "it with `attested-replay tenant reproduce --corpus ARCHIVE` (docs/reproduce.md).",
    )
    export.add_argument("corpus", type=Path, metavar="DIR", help="corpus directory")
    export.add_argument(
        "--out", type=Path, required=True, metavar="ARCHIVE", help="archive to write (.tar.gz)"
    )
    export.set_defaults(handler=handle_export)


def build_manifest(corpus: Path) -> ExportManifest:
    """The export manifest of ``corpus``: validates every case (the checksum) first."""
    scan = scan_cases(corpus)
    try:
        files = describe_files(corpus)
    except OSError as exc:
        raise UsageError(f"DIR {corpus}: cannot read {exc.filename}: {exc.strerror}") from exc
    return ExportManifest(corpus_checksum=scan.checksum, case_count=scan.case_count, files=files)


def handle_export(args: argparse.Namespace) -> int:
    corpus: Path = args.corpus
    out: Path = args.out
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory; give the archive's file name")
    manifest = build_manifest(corpus)
    try:
        with atomic_output(out) as handle:
            write_export(corpus, manifest, handle)
    except ExportError as exc:
        raise InputError(f"DIR {corpus}: {exc}") from exc
    digest = hashlib.sha256()
    with out.open("rb") as written:
        while chunk := written.read(_CHUNK):
            digest.update(chunk)
    print(f"wrote {out}: {manifest.case_count} cases, corpus checksum {manifest.corpus_checksum}")
    print(f"archive sha256:{digest.hexdigest()}")
    return 0
