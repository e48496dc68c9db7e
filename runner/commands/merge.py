"""``attested-replay merge``: join a sharded replay's shard envelopes into one merged envelope
(see :data:`DESCRIPTION`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from runner.commands.parsing import add_command, add_state_dir_argument, input_file, output_file
from runner.evidence.simulated import load_or_create_simulated_amd
from runner.exit_codes import Family
from runner.pipeline.merge import merge_shards
from runner.pipeline.verification import load_expected_file

if TYPE_CHECKING:
    from runner.commands import Subparsers


DESCRIPTION = """\
Each shard of a replay split N ways (run --shard-count N, or submit --shards N) writes an
envelope whose binding says which shard it is and whose result is that shard's exact
partials. merge checks the N envelopes are shards 0..N-1 of one replay, rebuilds the
evaluation report from them (byte for byte what an unsharded run reports) and writes a merged
envelope holding every shard's evidence and the merged report, after verifying it as a tenant
would (verify-attested-run --envelope MERGED)."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "merge",
        summary="merge the shard envelopes of a sharded replay into one envelope",
        description=DESCRIPTION,
        family=Family.REPLAY,
    )
    parser.add_argument(
        "shards",
        nargs="+",
        type=input_file("SHARD_ENVELOPE"),
        metavar="SHARD_ENVELOPE",
        help="one file per shard",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=output_file("--out"),
        metavar="FILE",
        help="merged envelope output file",
    )
    parser.add_argument(
        "--result-out",
        type=output_file("--result-out"),
        metavar="FILE",
        help="merged report file (default: <out>.result.json)",
    )
    parser.add_argument(
        "--omit-result",
        action="store_true",
        help="leave the merged report out of the envelope (its digest is kept and checked)",
    )
    parser.add_argument(
        "--expected",
        type=input_file("--expected"),
        metavar="FILE",
        help="verify the merged envelope against this expected-values file (default: the "
        "crypto-only policy and the envelope's own values)",
    )
    parser.add_argument(
        "--trust-simulated-root",
        action="store_true",
        help="accept this machine's simulated root in the check (shards run here with "
        "--evidence simulated)",
    )
    add_state_dir_argument(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    expected = load_expected_file(args.expected) if args.expected else None
    simulated_root = None
    if args.trust_simulated_root:
        simulated_root = load_or_create_simulated_amd(args.state_dir).root_fingerprint
    result = merge_shards(
        args.shards,
        out=args.out,
        result_out=args.result_out,
        omit_result=args.omit_result,
        expected=expected,
        simulated_root=simulated_root,
    )
    merged = result.envelope
    marks = result.report.get("marks")
    verdicts = [
        f"{mark.get('id')}={mark.get('result')}"
        for mark in (marks if isinstance(marks, list) else [])
        if isinstance(mark, dict)
    ]
    headline = (
        f"run {merged.run_id} for tenant {merged.tenant}: {merged.shard_count} shard(s) merged "
        "and verified"
    )
    print(
        "\n".join(
            [
                headline,
                f"  corpus checksum   {merged.corpus_checksum}",
                f"  evaluation digest {merged.evaluation_digest}",
                f"  result digest     {merged.result_digest}",
                f"  envelope          {result.envelope_path} ({result.envelope_digest})",
                f"  result            {result.result_path}",
                f"  pass marks        {', '.join(verdicts)}",
            ]
        )
    )
    return 0
