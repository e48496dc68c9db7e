"""``attested-replay tenant reproduce``: re-derive a run's result from a corpus.

Registered under ``attested-replay tenant`` (see :mod:`runner.commands.tenant`); the logic is
:mod:`runner.pipeline.reproduce`. Exit codes are the verifier's (``verify-attested-run``):
0 reproduced, 1 malformed envelope, corpus or archive, 7 binding, 8 expectation, 9 usage.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from attestation.exit_codes import EXIT_CODES, VERIFIED
from runner.commands.parsing import add_command, input_file, input_file_or_dir
from runner.exit_codes import Family
from runner.pipeline.envelope import read_envelope_file
from runner.pipeline.reproduce import TRUST_STATEMENT, reproduce

if TYPE_CHECKING:
    from runner.commands import Subparsers

DESCRIPTION = """\
Re-derive a run's result from a corpus without trusting any hardware: check the corpus
checksum against the envelope's binding, re-run the scoring with the same code path as `run`,
and compare the evaluation and result digests.

A merged envelope (a sharded run) is compared with the unsharded replay, which its merged
result equals byte for byte; a shard envelope with that shard's replay.

--corpus takes a corpus directory or a corpus export (`attested-replay corpus export`,
`tenant fetch --corpus`); an export is checked against its manifest first.

The exit code is one of the verifier's classes:
  0  reproduced: the corpus, evaluation and result the envelope binds follow from this corpus
  1  malformed: the envelope, the corpus or the archive cannot be read as one
  7  binding: the bound result is not what the envelope's own scoring code computes from
     this corpus, or the envelope's result does not match its binding
  8  expectation: another corpus or evaluation than the envelope's, or other scoring code
     with another result (both code digests are named)
  9  usage: bad arguments, unreadable files"""


def register_action(actions: Subparsers) -> None:
    parser = add_command(
        actions,
        "reproduce",
        summary="re-derive a run's result from a corpus (trusts no hardware)",
        description=DESCRIPTION,
        family=Family.VERIFICATION,
    )
    parser.add_argument(
        "--envelope",
        required=True,
        type=input_file("--envelope"),
        metavar="FILE",
        help="the run's envelope file",
    )
    parser.add_argument(
        "--corpus",
        required=True,
        type=input_file_or_dir("--corpus"),
        metavar="DIR|ARCHIVE",
        help="corpus directory, or .tar.gz file (a corpus export or an archive of the corpus "
        "files)",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    outcome = reproduce(read_envelope_file(args.envelope, what="--envelope"), args.corpus)
    code = VERIFIED if outcome.failure is None else EXIT_CODES[outcome.failure]
    if args.json:
        print(json.dumps({**outcome.to_json(), "exitCode": code}, indent=2))
        return code
    if outcome.failure is None:
        print(f"REPRODUCED: run {outcome.run_id} (tenant {outcome.tenant}): {outcome.reason}")
    else:
        print(f"NOT REPRODUCED: {outcome.failure.value} (exit {code}): {outcome.reason}")
    for compared in outcome.comparisons:
        if compared.same is None:
            state = f"not computed      (bound {compared.bound})"
        elif compared.same:
            state = f"same     {compared.bound}"
        else:
            state = f"DIFFERS  bound {compared.bound}, recomputed {compared.recomputed}"
        print(f"  {compared.name:<18} {state}")
    for difference in outcome.result_differences:
        print(f"  differs: {difference}")
    print(TRUST_STATEMENT)
    return code
