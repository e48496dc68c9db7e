"""``serve`` (the publication service) and ``server backup`` (a consistent copy of its data)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.contracts import (
    DEFAULT_MAX_CORPUS_EXPORT_BYTES,
)
from attestation.tenant.errors import TenantUsageError
from attestation.tenant.paths import check_input_dir
from runner.commands.corpus import parse_size
from runner.commands.parsing import (
    PathArgument,
    add_actions,
    add_command,
    input_dir,
    input_file,
    output_file,
    seconds,
    tcp_port,
)
from runner.errors import PublishError, UsageError
from runner.exit_codes import Family
from runner.extras import extra_required
from runner.log import DEFAULT_LOG_LEVEL

if TYPE_CHECKING:
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    _register_serve(subparsers)
    _register_server(subparsers)


def _check_state_dir(path: Path, label: str) -> Path:
    """The service's state directory: an existing one (written only when something in it
    changes, so it may be on a read-only filesystem) or a new one in an existing directory
    (created after the port is bound)."""
    if path.exists():
        return check_input_dir(path, label)
    if not path.parent.is_dir():
        raise TenantUsageError(f"{label} {path}: directory {path.parent} does not exist")
    return path


_seconds = seconds()


def _witness(text: str) -> object:
    from runner.service.witnesses import WitnessEndpoint

    try:
        return WitnessEndpoint.parse(text)
    except (UsageError, TenantUsageError) as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--witness ")) from exc


def _connections(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count from 1 to 1000000")
    return int(text)


def _rate(text: str) -> str:
    from runner.service.ratelimit import Rate

    try:
        Rate.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def _register_serve(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "serve",
        summary="run the publication service",
        description="""\
Serves the per-tenant transparency logs: operators publish envelopes with their token,
tenants read their own log and envelopes with theirs. The database and the log signing key
live in the state directory unless --db and --log-signing-key say otherwise.""",
        family=Family.PUBLICATION,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port", type=tcp_port, default=8443, help="TCP port to listen on, 1 to 65535"
    )
    parser.add_argument(
        "--state-dir",
        type=PathArgument("--state-dir", _check_state_dir),
        metavar="DIR",
        help="the log key, the head journal and the SQLite database live here (default: "
        "$ATTESTED_REPLAY_STATE_DIR/server, else $XDG_DATA_HOME/attested-replay/server, else "
        "~/.local/share/attested-replay/server)",
    )
    parser.add_argument(
        "--db",
        metavar="LOCATION",
        help="SQLite file or postgresql:// DSN (default: publish.sqlite3 in the state directory)",
    )
    parser.add_argument(
        "--log-signing-key",
        type=input_file("--log-signing-key"),
        metavar="FILE",
        help="Ed25519 PKCS#8 PEM key file (default: made in the state directory on first start)",
    )
    parser.add_argument(
        "--log-name",
        metavar="NAME",
        help="log and key name, the checkpoint origin prefix (default: $ATTESTED_REPLAY_LOG_NAME,"
        " else attested-replay.local)",
    )
    parser.add_argument(
        "--sqlite-synchronous",
        choices=["full", "normal"],
        default="full",
        help="full: every acknowledged envelope survives power loss; normal: survives process "
        "crashes only, for disposable stores",
    )
    parser.add_argument(
        "--tls-cert",
        type=input_file("--tls-cert"),
        metavar="FILE",
        help="TLS certificate chain (PEM), with --tls-key",
    )
    parser.add_argument(
        "--tls-key",
        type=input_file("--tls-key"),
        metavar="FILE",
        help="TLS private key (PEM), with --tls-cert",
    )
    parser.add_argument(
        "--max-corpus-export-bytes",
        type=parse_size,
        default=DEFAULT_MAX_CORPUS_EXPORT_BYTES,
        metavar="SIZE",
        help="largest corpus export accepted, e.g. 256M or 2G (default: 256M)",
    )
    parser.add_argument(
        "--witness",
        dest="witnesses",
        action="append",
        default=[],
        type=_witness,
        metavar="'URL KEY'",
        help="a witness to submit every new checkpoint to: its add-checkpoint URL prefix and "
        "its verifier key, separated by a space (docs/witness.md); repeat for several",
    )
    parser.add_argument(
        "--header-timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="a client has this long to send a request line and headers",
    )
    parser.add_argument(
        "--body-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="a client has this long to send a request body once its headers are in "
        "(60 s is 16 MiB at 280 KB/s)",
    )
    parser.add_argument(
        "--keep-alive",
        type=_seconds,
        default=5.0,
        metavar="SECONDS",
        help="an idle keep-alive connection is closed after this long",
    )
    parser.add_argument(
        "--max-connections",
        type=_connections,
        default=1024,
        metavar="N",
        help="connections open at once (always below the process's descriptor limit); over "
        "it the longest idle one is closed",
    )
    parser.add_argument(
        "--rate-limit",
        type=_rate,
        default="5000/s",
        metavar="RATE",
        help="requests per token, as N/s, N/min or N/h, in bursts of twice that; 0 for none",
    )
    parser.add_argument(
        "--adopt-database-heads",
        action="store_true",
        help="accept the signed heads the database records although this state directory's "
        "head journal does not know them (a new state directory for an existing database); "
        "check first that the database is the right one",
    )
    parser.set_defaults(handler=_serve)


def _register_server(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "server",
        summary="maintain the publication service's data",
        description="What an operator runs beside `serve`.",
        family=Family.PUBLICATION,
    )
    actions = add_actions(parser)
    backup = add_command(
        actions,
        "backup",
        summary="write a consistent copy of the SQLite database while the service runs",
        description="""\
SQLite's online backup API copies one committed state; the copy is checked and made durable
before it gets its name (an existing file is never overwritten). PostgreSQL: use pg_dump
(docs/publishing.md, Backups). Back up the log signing key too; never restore the head
journal.""",
        family=Family.PUBLICATION,
    )
    backup.add_argument(
        "--out", required=True, type=output_file("--out"), metavar="FILE", help="the backup file"
    )
    backup.add_argument(
        "--state-dir",
        type=input_dir("--state-dir"),
        metavar="DIR",
        help="the service's state directory (default: serve's)",
    )
    backup.add_argument(
        "--db",
        metavar="FILE",
        help="the SQLite database (default: publish.sqlite3 in the state directory)",
    )
    backup.set_defaults(handler=_server_backup)


def _serve(args: argparse.Namespace) -> int:
    with extra_required("serve", "server"):
        from runner.service.guard import ConnectionLimits
        from runner.service.ratelimit import Rate
        from runner.service.serve import (
            DEFAULT_LOG_NAME,
            ServiceConfig,
            default_state_dir,
            serve,
        )

    config = ServiceConfig(
        state_dir=args.state_dir or default_state_dir(),
        database=args.db,
        signing_key=args.log_signing_key,
        log_name=args.log_name or os.environ.get("ATTESTED_REPLAY_LOG_NAME") or DEFAULT_LOG_NAME,
        sqlite_synchronous=args.sqlite_synchronous.upper(),
        adopt_database_heads=args.adopt_database_heads,
        rate_limit=Rate.parse(args.rate_limit),
        limits=ConnectionLimits(
            header_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
            keep_alive=args.keep_alive,
            max_connections=args.max_connections,
        ),
        max_corpus_export_bytes=args.max_corpus_export_bytes,
        log_level=getattr(args, "log_level", DEFAULT_LOG_LEVEL),
        witnesses=tuple(args.witnesses),
    )
    serve(
        config,
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        say=lambda line: print(line, flush=True),
    )
    return 0


def _server_backup(args: argparse.Namespace) -> int:
    with extra_required("server backup", "server"):
        from runner.service.backup import backup_sqlite
        from runner.service.log.storage import StorageError, is_postgres_location
        from runner.service.serve import DATABASE_FILE, default_state_dir

    location = args.db or str((args.state_dir or default_state_dir()) / DATABASE_FILE)
    if is_postgres_location(location):
        raise UsageError(
            "--db: server backup copies SQLite files; back up PostgreSQL with pg_dump "
            "(docs/publishing.md, 'Backups')"
        )
    try:
        sizes = backup_sqlite(Path(location), args.out)
    except StorageError as exc:
        raise PublishError(f"backup of {location} failed: {exc}") from exc
    logs = ", ".join(f"{tenant} {size}" for tenant, size in sorted(sizes.items())) or "none"
    print(f"backup of {location} written to {args.out} (log entries per tenant: {logs})")
    return 0
