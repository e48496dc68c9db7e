"""``attested-replay contract``: what a tenant can verify, with what, trusting whom
(see :data:`DESCRIPTION`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from attestation.tenant.contract import CONTRACT, render_text
from runner.commands.parsing import add_command
from runner.exit_codes import Family

if TYPE_CHECKING:
    from runner.commands import Subparsers


DESCRIPTION = """\
The definitions of tamper-proof, tamper-evident and recomputed; each claim, the artifact that
proves it, the command that checks it, who can run it and what it assumes; the operator threat
model; the tenant's checklist from the hardware to the result; what is not verifiable and when
to revisit it; self-host vs hosted; what the trust panel cannot check. --json prints the same
contract as JSON, the form the trust panel reads (GET /v1/contract).
docs/verification-contract.md is generated from the same source."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "contract",
        summary="print the verification contract (what a tenant can verify, and how)",
        description=DESCRIPTION,
        family=Family.DOCUMENTS,
    )
    parser.add_argument(
        "--json", action="store_true", help="print the contract as JSON (the panel's form)"
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(CONTRACT.to_json_dict(), indent=2, ensure_ascii=False))
    else:
        print(render_text(CONTRACT), end="")
    return 0
