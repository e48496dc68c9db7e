"""``attested-replay export in-toto ENVELOPE``: the envelope as an in-toto Statement v1.

Writes an in-toto Statement v1 (https://in-toto.io/Statement/v1) whose subjects are the
result and the corpus, by their SHA-256 digests (the envelope's binding), and whose predicate
(type https://attested-replay.dev/attestations/replay/v1, docs/in-toto.md) names the envelope
by digest and carries its binding, platform and measurement. The statement is unsigned: it
lets tools that consume attestations index the run beside SLSA provenance; trust comes from
verifying the envelope it names with verify-attested-run. Output: RFC 8785 JSON and a
newline (one JSON Lines record), on standard output or --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.contracts import MAX_ENVELOPE_BYTES
from attestation.errors import MalformedError
from runner.errors import InputError, UsageError
from tenant.fsutil import atomic_write
from tenant.intoto import statement_bytes

if TYPE_CHECKING:
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export an envelope in another attestation format (in-toto)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    formats = parser.add_subparsers(dest="export_format", metavar="FORMAT")
    formats.required = True
    intoto = formats.add_parser(
        "in-toto",
        help="write an in-toto Statement v1 for an envelope",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    intoto.add_argument("envelope", type=Path, metavar="ENVELOPE", help="envelope JSON file")
    intoto.add_argument("--out", type=Path, help="write here instead of standard output")
    intoto.set_defaults(handler=handle_intoto)


def handle_intoto(args: argparse.Namespace) -> int:
    path: Path = args.envelope
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_ENVELOPE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"ENVELOPE {path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        statement = statement_bytes(data)
    except MalformedError as exc:
        raise InputError(f"ENVELOPE {path}: not a valid envelope: {exc}") from exc
    if args.out is None:
        print(statement.decode("utf-8"), end="")
    else:
        atomic_write(args.out, statement)
        print(f"wrote {args.out}")
    return 0
