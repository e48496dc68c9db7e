"""``attested-replay witness``: a witness of publication logs (C2SP tlog-witness), run by
another party than the operator (see :data:`SERVE_DESCRIPTION`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog

from attestation.transparency.checkpoint import CheckpointError, VerifierKey
from runner.commands.parsing import (
    PathArgument,
    add_actions,
    add_command,
    input_dir,
    output_dir,
)
from runner.errors import UsageError
from runner.exit_codes import Family

if TYPE_CHECKING:
    from runner.commands import Subparsers
    from runner.witness.cosigner import Cosigner

KEY_FILE: Final = "witness-key.pem"
DEFAULT_PORT: Final = 8470

SERVE_DESCRIPTION = """\
Cosigns checkpoints of the publication logs it follows (POST /add-checkpoint) when a
consistency proof shows that each extends the last one it cosigned for that log, and serves
the latest cosigned checkpoint of each (GET /<sha256 of the origin>/checkpoint). Its key and
its state (SQLite, witness.sqlite3) live in --state-dir. Give each followed service's log key
with --log: the witness then follows every tenant's log of that service (origins
<log name>/t/<tenant>). See docs/witness.md."""


def register(subparsers: Subparsers) -> None:
    group = add_command(
        subparsers,
        "witness",
        summary="run a witness of publication logs, or make its key",
        family=Family.PUBLICATION,
    )
    actions = add_actions(group)
    key = add_command(
        actions,
        "key",
        summary="make the witness's Ed25519 key (if absent) and print its verifier key",
        description="The printed key is what tenants pin with tenant fetch --witness-key and "
        "what serve is configured with.",
        family=Family.PUBLICATION,
    )
    _add_identity(key, state_dir=output_dir("--state-dir", create=True))
    key.set_defaults(handler=_key)
    serve = add_command(
        actions,
        "serve",
        summary="cosign consistent checkpoints of the logs followed",
        description=SERVE_DESCRIPTION,
        family=Family.PUBLICATION,
    )
    _add_identity(serve, state_dir=input_dir("--state-dir"))
    serve.add_argument(
        "--log",
        dest="logs",
        action="append",
        required=True,
        type=_log_key,
        metavar="VERIFIER_KEY",
        help="a publication service's log key (<name>+<key id>+<base64>, as `serve` prints "
        "it); repeat for several services",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=_port, default=DEFAULT_PORT, help="port to listen on")
    serve.set_defaults(handler=_serve)


def _add_identity(parser: argparse.ArgumentParser, *, state_dir: PathArgument) -> None:
    parser.add_argument(
        "--name",
        required=True,
        help="the witness's key name, a schema-less URL that identifies it "
        "(e.g. witness.example.org/w1)",
    )
    parser.add_argument(
        "--state-dir",
        required=True,
        type=state_dir,
        metavar="DIR",
        help=f"holds the key ({KEY_FILE}) and the state (witness.sqlite3)",
    )


def _log_key(text: str) -> VerifierKey:
    try:
        return VerifierKey.parse(text)
    except CheckpointError as exc:
        raise argparse.ArgumentTypeError(f"{text[:60]!r}: {exc}") from exc


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port from 1 to 65535")
    return int(text)


def _cosigner(args: argparse.Namespace, *, create: bool) -> Cosigner:
    from runner.witness.cosigner import Cosigner

    try:
        return Cosigner.load_or_create(args.name, Path(args.state_dir) / KEY_FILE, create=create)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from exc


def _key(args: argparse.Namespace) -> int:
    cosigner = _cosigner(args, create=True)
    print(cosigner.verifier_key.encode())
    return 0


def _serve(args: argparse.Namespace) -> int:
    from runner.witness.server import Witness, WitnessServer
    from runner.witness.store import DATABASE_FILE, WitnessStore

    cosigner = _cosigner(args, create=False)
    logs: dict[str, VerifierKey] = {}
    for key in args.logs:
        if key.name in logs and logs[key.name] != key:
            raise UsageError(f"--log: two keys named {key.name!r}")
        logs[key.name] = key
    # The port first: a busy port fails before the state is opened.
    try:
        server = WitnessServer((args.host, args.port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
    store = WitnessStore(Path(args.state_dir) / DATABASE_FILE)
    server.witness = Witness(cosigner, store, logs)
    host, port = server.server_address[:2]
    print(f"witness {cosigner.verifier_key.encode()}", flush=True)
    print(f"listening on http://{host!s}:{port}", flush=True)
    structlog.get_logger("runner.witness").info(
        "witness_started", name=args.name, logs=sorted(logs), port=port
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        store.close()
    return 0
