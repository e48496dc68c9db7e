"""``attested-replay export in-toto ENVELOPE``: the envelope as an in-toto Statement v1
(see :data:`DESCRIPTION`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.errors import MalformedError
from runner.commands.parsing import add_actions, add_command, input_file, output_file
from runner.errors import InputError
from runner.exit_codes import Family
from runner.pipeline.envelope import read_envelope_file
from tenant.fsutil import atomic_write
from tenant.intoto import InconsistentMergedEnvelopeError, ShardEnvelopeError, statement_bytes

if TYPE_CHECKING:
    from runner.commands import Subparsers


DESCRIPTION = """\
The in-toto Statement v1 (https://in-toto.io/Statement/v1) has the result and the corpus as
subjects, by their SHA-256 digests (the envelope's binding); its predicate (type
https://attested-replay.dev/attestations/replay/v1, docs/in-toto.md) names the envelope by
digest and carries its binding, platform and measurement. The statement is unsigned: it lets
tools that consume attestations index the run beside SLSA provenance; trust comes from
verifying the envelope it names with verify-attested-run. A merged envelope (a sharded run)
has the merged result and the corpus as subjects (predicate type
https://attested-replay.dev/attestations/replay-merged/v1); a shard envelope is refused: export
the run's merged envelope. Output: RFC 8785 JSON and a newline (one JSON Lines record)."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "export",
        summary="export an envelope in another attestation format (in-toto)",
        description="FORMAT is the format to write; in-toto is the only one.",
        family=Family.DOCUMENTS,
    )
    formats = add_actions(parser, metavar="FORMAT")
    intoto = add_command(
        formats,
        "in-toto",
        summary="write an in-toto Statement v1 for an envelope",
        description=DESCRIPTION,
        family=Family.DOCUMENTS,
    )
    intoto.add_argument(
        "envelope", type=input_file("ENVELOPE"), metavar="ENVELOPE", help="envelope JSON file"
    )
    intoto.add_argument(
        "--out",
        type=output_file("--out"),
        metavar="FILE",
        help="write the statement here instead of standard output",
    )
    intoto.set_defaults(handler=handle_intoto)


def handle_intoto(args: argparse.Namespace) -> int:
    path: Path = args.envelope
    data = read_envelope_file(path, what="ENVELOPE")
    try:
        statement = statement_bytes(data)
    except MalformedError as exc:
        raise InputError(f"ENVELOPE {path}: not a valid envelope: {exc}") from exc
    except ShardEnvelopeError as exc:
        raise InputError(f"ENVELOPE {path}: no statement for a shard envelope: {exc}") from exc
    except InconsistentMergedEnvelopeError as exc:
        raise InputError(f"ENVELOPE {path}: not one sharded run: {exc}") from exc
    if args.out is None:
        print(statement.decode("utf-8"), end="")
    else:
        atomic_write(args.out, statement)
        print(f"wrote {args.out}")
    return 0
