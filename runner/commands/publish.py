"""``publish``: deliver an envelope to a ``dir://`` or ``https://`` target, or flush the spool."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.contracts import (
    MAX_ENVELOPE_BYTES,
)
from attestation.tenant.http import HttpClient, read_token
from runner.commands.parsing import (
    add_ca_bundle,
    add_command,
    input_file,
    output_dir,
)
from runner.errors import InputError, PublishError, UsageError
from runner.exit_codes import Family

if TYPE_CHECKING:
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    _register_publish(subparsers)


def _register_publish(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "publish",
        summary="publish an envelope to a dir:// or https:// target, or flush the spool",
        description="""\
An envelope that cannot be delivered is kept in the spool; --flush delivers the spool later
(to each envelope's recorded target, or to --target) and removes an envelope only once its
target confirmed it. https:// targets need an operator token (--token-file).""",
        family=Family.PUBLICATION,
    )
    parser.add_argument(
        "envelope",
        nargs="?",
        type=input_file("ENVELOPE"),
        metavar="ENVELOPE",
        help="envelope JSON file (omit with --flush)",
    )
    parser.add_argument(
        "--target",
        metavar="URL",
        help="dir://PATH or https://HOST[/PREFIX] (with --flush: overrides recorded targets)",
    )
    parser.add_argument("--tenant", help="tenant the envelope is published for")
    parser.add_argument("--run-id", help="run ID (default: the envelope's runId)")
    parser.add_argument(
        "--token-file",
        type=input_file("--token-file"),
        metavar="FILE",
        help="file holding the operator token (needed for https:// targets)",
    )
    parser.add_argument(
        "--spool-dir",
        type=output_dir("--spool-dir", create=True),
        metavar="DIR",
        help="spool directory (default: spool/ in the runner's state directory; with --flush "
        "it must exist)",
    )
    parser.add_argument("--flush", action="store_true", help="deliver every spooled envelope")
    add_ca_bundle(parser)
    parser.set_defaults(handler=_publish)


def _publish(args: argparse.Namespace) -> int:
    from runner.pipeline.envelope import read_envelope_file
    from runner.publish.client import (
        TokenRequiredError,
        flush_spool,
        publish_envelope,
        receipt_json,
    )

    token = read_token(args.token_file) if args.token_file else None
    if args.flush:
        if args.envelope is not None:
            raise UsageError(f"ENVELOPE {args.envelope}: --flush takes no envelope file")
        if args.spool_dir is not None and not args.spool_dir.is_dir():
            raise UsageError(f"--spool-dir {args.spool_dir}: no such directory (nothing to flush)")
        try:
            report = flush_spool(
                spool_dir=args.spool_dir, target=args.target, token=token, ca_bundle=args.ca_bundle
            )
        except TokenRequiredError as exc:
            raise UsageError(f"--flush: {exc}: pass --token-file FILE") from exc
        for outcome in report.delivered:
            print(f"delivered {outcome.digest} ({outcome.status}) to {outcome.target}")
        for digest, reason in report.failed:
            print(f"still spooled {digest}: {reason}")
        if report.failed:
            raise PublishError(f"{len(report.failed)} spooled envelope(s) could not be delivered")
        return 0
    if args.envelope is None or args.target is None or args.tenant is None:
        raise UsageError("publish needs ENVELOPE, --target and --tenant (or --flush)")
    data = read_envelope_file(args.envelope, what="ENVELOPE")
    if len(data) > MAX_ENVELOPE_BYTES:
        # Checked before any delivery or spooling: no service or verifier accepts it.
        raise InputError(
            f"ENVELOPE {args.envelope}: over the {MAX_ENVELOPE_BYTES}-byte envelope limit "
            "(nothing published or spooled)"
        )
    run_id = args.run_id or _run_id_of(data, args.envelope)
    if token is None and not args.target.startswith("dir://"):
        raise UsageError(
            f"--target {args.target}: publishing there needs a token: pass --token-file FILE"
        )
    with HttpClient(token=token, what="target", ca_bundle=args.ca_bundle) as client:
        outcome = publish_envelope(
            args.target,
            data,
            tenant=args.tenant,
            run_id=run_id,
            token=token,
            spool_dir=args.spool_dir,
            client=client,
        )
    print(receipt_json(outcome))
    return 0


def _run_id_of(data: bytes, path: Path) -> str:
    """The run ID an envelope of any kind names (a merged envelope's from its header)."""
    from attestation.envelope.merged import parse_any_envelope
    from attestation.errors import MalformedError

    try:
        return parse_any_envelope(data).run_id
    except MalformedError as exc:
        raise InputError(f"ENVELOPE {path} is not a valid attestation envelope: {exc}") from exc
