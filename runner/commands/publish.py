"""``publish``, ``serve``, ``server backup``, ``token`` and ``tenant fetch``: envelope
publication."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.contracts import (
    DEFAULT_MAX_CORPUS_EXPORT_BYTES,
    MAX_ENVELOPE_BYTES,
    is_tenant_id,
)
from attestation.tenant.errors import TenantInputError, TenantUsageError
from attestation.tenant.fetch import DEFAULT_JOBS as DEFAULT_FETCH_JOBS
from attestation.tenant.fetch import MAX_JOBS as MAX_FETCH_JOBS
from attestation.tenant.http import HttpClient, read_token
from attestation.tenant.paths import check_input_dir
from runner.commands import reproduce
from runner.commands.corpus import parse_size
from runner.commands.parsing import (
    PathArgument,
    add_actions,
    add_ca_bundle,
    add_command,
    input_dir,
    input_file,
    output_dir,
    output_file,
    seconds,
    tcp_port,
)
from runner.errors import InputError, PublishError, UsageError, VerificationFailedError
from runner.exit_codes import Family
from runner.extras import extra_required
from runner.log import DEFAULT_LOG_LEVEL

if TYPE_CHECKING:
    from attestation.tenant.fetch import FetchReport
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    _register_publish(subparsers)
    _register_serve(subparsers)
    _register_server(subparsers)
    _register_token(subparsers)
    _register_tenant(subparsers)


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
    from runner.publish.witnesses import WitnessEndpoint

    try:
        return WitnessEndpoint.parse(text)
    except (UsageError, TenantUsageError) as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--witness ")) from exc


def _connections(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count from 1 to 1000000")
    return int(text)


def _rate(text: str) -> str:
    from runner.publish.ratelimit import Rate

    try:
        Rate.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


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


def _register_token(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "token",
        summary="manage publication-service tokens",
        description="Tokens are stored as SHA-256 hashes; each names a tenant and a role.",
        family=Family.PUBLICATION,
    )
    actions = add_actions(parser)
    create = add_command(
        actions,
        "create",
        summary="create a token and print it once",
        description="An operator token publishes envelopes for its tenant; a tenant token "
        "reads that tenant's\nlog and envelopes.",
        family=Family.PUBLICATION,
    )
    create.add_argument("--tenant", required=True, help="tenant identifier (a DNS label)")
    create.add_argument(
        "--role", required=True, choices=["operator", "tenant"], help="what the token may do"
    )
    database_help = (
        "the service's SQLite file or postgresql:// DSN (default: publish.sqlite3 in the "
        "state directory)"
    )
    state_help = "the service's state directory, as serve's --state-dir (default: serve's)"
    create.add_argument(
        "--state-dir", type=input_dir("--state-dir"), metavar="DIR", help=state_help
    )
    create.add_argument("--db", metavar="LOCATION", help=database_help)
    create.set_defaults(handler=_token_create)
    revoke = add_command(
        actions,
        "revoke",
        summary="revoke a token",
        description="Every service process refuses it (401) within 2 seconds; the row stays, "
        "for the audit trail.",
        family=Family.PUBLICATION,
    )
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--token-file",
        type=input_file("--token-file"),
        metavar="FILE",
        help="file holding the token to revoke",
    )
    which.add_argument(
        "--id", dest="token_id", metavar="ID", help="the token's id, as `token list` shows it"
    )
    revoke.add_argument(
        "--state-dir", type=input_dir("--state-dir"), metavar="DIR", help=state_help
    )
    revoke.add_argument("--db", metavar="LOCATION", help=database_help)
    revoke.set_defaults(handler=_token_revoke)
    listing = add_command(
        actions,
        "list",
        summary="list tokens: id, tenant, role, created, revoked",
        description="The id is the first 12 hex digits of the token's SHA-256, as the audit "
        "log names it.",
        family=Family.PUBLICATION,
    )
    listing.add_argument(
        "--state-dir", type=input_dir("--state-dir"), metavar="DIR", help=state_help
    )
    listing.add_argument("--db", metavar="LOCATION", help=database_help)
    listing.set_defaults(handler=_token_list)


def _register_tenant(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "tenant",
        summary="tenant-side commands",
        description="What a tenant runs against the publication service.",
        family=Family.PUBLICATION,
    )
    actions = add_actions(parser)
    fetch = add_command(
        actions,
        "fetch",
        summary="fetch new envelopes and verify the log",
        description="""\
Downloads the tenant's signed checkpoint and the new log entries, checks that they extend
the checkpoint kept in --out and are what the new checkpoint signs, downloads the new
envelopes (in bundles of up to 64, --jobs requests at a time; by --jobs worker processes from
3 bundles on) and keeps them under --out/envelopes.

With --expected X, each new envelope is then verified as `verify-attested-run --envelope E
--expected X` would, except that the run ID is the one of the envelope's log entry: one file
pins what every run shares (corpus checksum, workload, image, policy, simulated roots), and
a runId in it is ignored. One verdict line per envelope; exit 4 when any did not verify
(the envelopes are kept either way: the log holds them).""",
        family=Family.PUBLICATION,
    )
    fetch.add_argument("--server", required=True, metavar="URL", help="https://HOST of the service")
    fetch.add_argument(
        "--token-file",
        required=True,
        type=input_file("--token-file"),
        metavar="FILE",
        help="file holding the tenant token",
    )
    fetch.add_argument("--tenant", required=True, help="tenant identifier (a DNS label)")
    fetch.add_argument(
        "--out",
        required=True,
        type=output_dir("--out", create=True),
        metavar="DIR",
        help="local store directory (created if absent; its parent must exist)",
    )
    fetch.add_argument(
        "--log-key", metavar="KEY|FILE", help="pinned log verifier key (the text, or a file)"
    )
    fetch.add_argument(
        "--witness-key",
        dest="witness_keys",
        action="append",
        default=[],
        metavar="KEY|FILE",
        help="a witness's verifier key (docs/witness.md); repeat for several. The new "
        "checkpoint is then the latest the service has cosigned, and needs cosignatures by "
        "--witness-threshold of them (exit 7 otherwise). Pinned in --out once given",
    )
    fetch.add_argument(
        "--witness-threshold",
        type=int,
        metavar="T",
        help="how many of the --witness-key witnesses must have cosigned (default: all)",
    )
    fetch.add_argument(
        "--checkpoint",
        type=input_file("--checkpoint"),
        metavar="FILE",
        help="a checkpoint to check consistency against (default: the one kept in --out)",
    )
    fetch.add_argument(
        "--expected",
        type=input_file("--expected"),
        metavar="FILE",
        help="verify every new envelope against this expected-values file, with the run ID "
        "of its log entry (exit 4 when one does not verify)",
    )
    fetch.add_argument(
        "--corpus",
        action="store_true",
        help="also download the tenant's corpus exports into OUT/corpora and check each one",
    )
    fetch.add_argument(
        "--max-corpus-bytes",
        type=parse_size,
        default=DEFAULT_MAX_CORPUS_EXPORT_BYTES,
        metavar="SIZE",
        help="largest corpus export downloaded, e.g. 256M or 2G (default: 256M)",
    )
    fetch.add_argument(
        "--jobs",
        type=_fetch_jobs,
        default=DEFAULT_FETCH_JOBS,
        metavar="N",
        help=f"requests at once, 1 to {MAX_FETCH_JOBS} (default: {DEFAULT_FETCH_JOBS}), each for a "
        "bundle of up to 64 envelopes; from 3 bundles on, this many worker processes make them",
    )
    fetch.add_argument(
        "--verify-workers",
        type=_verify_workers,
        metavar="N",
        help="processes verifying with --expected, 1 to 64 (default: one per CPU; 1 verifies "
        "in this process); the verdicts and exit code do not depend on it",
    )
    add_ca_bundle(fetch)
    fetch.set_defaults(handler=_tenant_fetch)

    reproduce.register_action(actions)


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


def _serve(args: argparse.Namespace) -> int:
    with extra_required("serve", "server"):
        from runner.publish.guard import ConnectionLimits
        from runner.publish.ratelimit import Rate
        from runner.publish.service import (
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
        from runner.publish.backup import backup_sqlite
        from runner.publish.service import DATABASE_FILE, default_state_dir
        from runner.publish.storage import StorageError, is_postgres_location

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


def _token_database(args: argparse.Namespace) -> str:
    """The token commands' database: --db, else the one ``serve`` uses in --state-dir (or
    its default state directory); the caller imported the server extra."""
    from runner.publish.service import DATABASE_FILE, default_state_dir
    from runner.publish.storage import is_postgres_location

    location = str(args.db or (args.state_dir or default_state_dir()) / DATABASE_FILE)
    if not is_postgres_location(location) and not Path(location).parent.is_dir():
        raise UsageError(f"--db {location}: directory {Path(location).parent} does not exist")
    return location


def _token_create(args: argparse.Namespace) -> int:
    with extra_required("token create", "server"):
        import runner.publish.service  # noqa: F401 - the whole extra, before _token_database
        from runner.publish.storage import Role, StorageError, open_storage
        from runner.publish.tokens import create_token

    if not is_tenant_id(args.tenant):
        raise UsageError(f"tenant {args.tenant!r} is not a tenant id (a DNS label)")
    location = _token_database(args)
    try:
        storage = open_storage(location)
        try:
            print(create_token(storage, args.tenant, Role(args.role)))
        finally:
            storage.close()
    except StorageError as exc:
        raise PublishError(f"cannot store the token in {location}: {exc}") from exc
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    with extra_required("token revoke", "server"):
        import runner.publish.service  # noqa: F401 - the whole extra, before _token_database
        from runner.publish.storage import StorageError, open_storage
        from runner.publish.tokens import ID_HEX, hash_token, token_id

    if args.token_file is not None:
        prefix = hash_token(read_token(args.token_file))
    else:
        prefix = args.token_id.strip().lower()
        if len(prefix) < ID_HEX or any(c not in "0123456789abcdef" for c in prefix):
            raise UsageError(
                f"--id {args.token_id}: give at least {ID_HEX} hex digits of the token's id "
                "(see `attested-replay token list`)"
            )
    location = _token_database(args)
    try:
        storage = open_storage(location)
        try:
            revoked = storage.revoke_tokens(prefix)
        finally:
            storage.close()
    except StorageError as exc:
        raise PublishError(f"cannot revoke in {location}: {exc}") from exc
    if not revoked:
        raise UsageError(f"no unrevoked token matches {prefix[:ID_HEX]} in {location}")
    for record in revoked:
        print(f"revoked {token_id(record.token_hash)} ({record.tenant}, {record.role.value})")
    return 0


def _token_list(args: argparse.Namespace) -> int:
    with extra_required("token list", "server"):
        import runner.publish.service  # noqa: F401 - the whole extra, before _token_database
        from runner.publish.storage import StorageError, open_storage
        from runner.publish.tokens import token_id

    location = _token_database(args)
    try:
        storage = open_storage(location)
        try:
            records = storage.tokens()
        finally:
            storage.close()
    except StorageError as exc:
        raise PublishError(f"cannot read {location}: {exc}") from exc
    print("id            tenant  role      created               revoked")
    for record in records:
        print(
            f"{token_id(record.token_hash)}  {record.tenant}  {record.role.value:8}  "
            f"{record.created_at or '-':20}  {record.revoked_at or '-'}"
        )
    return 0


def _fetch_jobs(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_FETCH_JOBS:
        raise argparse.ArgumentTypeError(f"not a whole number from 1 to {MAX_FETCH_JOBS}: {text!r}")
    return int(text)


def _verify_workers(text: str) -> int:
    from attestation.tenant.verify_fetched import MAX_WORKERS

    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"not a whole number from 1 to {MAX_WORKERS}: {text!r}")
    return int(text)


def _tenant_fetch(args: argparse.Namespace) -> int:
    from attestation.tenant.fetch import WitnessPolicy, fetch_tenant, load_verifier_key
    from attestation.tenant.unjudged import load_unjudged
    from attestation.tenant.verify_fetched import load_expectations
    from attestation.transparency.checkpoint import COSIGNATURE_V1_ALGORITHM

    # Checked before anything is fetched: a bad file is found without the network.
    expectations = None if args.expected is None else load_expectations(args.expected)
    witnesses = None
    if args.witness_keys:
        keys = tuple(
            load_verifier_key(value, algorithm=COSIGNATURE_V1_ALGORITHM, what="witness key")
            for value in args.witness_keys
        )
        threshold = len(keys) if args.witness_threshold is None else args.witness_threshold
        witnesses = WitnessPolicy(keys, threshold)
    elif args.witness_threshold is not None:
        raise TenantUsageError("--witness-threshold needs --witness-key")
    report = fetch_tenant(
        server=args.server,
        token=read_token(args.token_file),
        tenant=args.tenant,
        out_dir=args.out,
        log_key=load_verifier_key(args.log_key) if args.log_key else None,
        last_checkpoint=None if args.checkpoint is None else str(args.checkpoint),
        ca_bundle=args.ca_bundle,
        jobs=args.jobs,
        witnesses=witnesses,
        to_judge=expectations is not None,
    )
    print(
        f"verified log of {report.size} entries (was {report.previous_size}); "
        f"{len(report.new_envelopes)} new envelope(s) in {report.out_dir / 'envelopes'}"
    )
    if expectations is None:
        failed, verified, unjudged = 0, 0, load_unjudged(args.out)
    else:
        failed, verified, unjudged = _verify_new(args, report, expectations)
    if args.corpus:
        from attestation.tenant.corpus_fetch import fetch_corpus_exports
        from runner.corpus.checksum import compute_checksum

        exports = fetch_corpus_exports(
            server=args.server,
            token=read_token(args.token_file),
            tenant=args.tenant,
            out_dir=args.out,
            max_bytes=args.max_corpus_bytes,
            corpus_checksum=compute_checksum,
            ca_bundle=args.ca_bundle,
        )
        for export in exports:
            print(
                f"corpus export {export.digest}: {export.manifest.case_count} cases, corpus "
                f"checksum {export.manifest.corpus_checksum} (checked) -> {export.path}"
            )
        print(f"{len(exports)} new corpus export(s) in {args.out / 'corpora'}")
    if unjudged:
        raise VerificationFailedError(
            f"{len(unjudged)} fetched envelope(s) have no verdict yet (log index "
            f"{', '.join(map(str, unjudged))}): every `tenant fetch --expected` verifies them "
            "again and fails until each has one",
            verifier_exit_code=9,
        )
    if failed:
        raise VerificationFailedError(
            f"{failed} of {verified} new envelope(s) did not verify against "
            f"--expected {args.expected}",
            verifier_exit_code=4,
        )
    return 0


def _verify_new(
    args: argparse.Namespace, report: FetchReport, expectations: Mapping[str, object]
) -> tuple[int, int, list[int]]:
    """Verify the envelopes without a verdict (this fetch's, and any an earlier fetch left
    unjudged: :mod:`attestation.tenant.unjudged`) in log order; print a verdict line for each;
    return how many did not verify, how many were verified, and the positions still without a
    verdict (kept listed)."""
    from attestation.tenant.fetch import load_index
    from attestation.tenant.unjudged import UNJUDGED_FILE, load_unjudged, record_unjudged
    from attestation.tenant.verify_fetched import default_workers, verify_fetched

    index = load_index(report.out_dir / "index.json")
    pending = load_unjudged(report.out_dir)
    unknown = [position for position in pending if str(position) not in index]
    if unknown:
        raise TenantInputError(
            f"{report.out_dir / UNJUDGED_FILE} lists log index "
            f"{', '.join(map(str, unknown))}, which {report.out_dir / 'index.json'} does not hold"
        )
    earlier = [position for position in pending if position < report.previous_size]
    if earlier:
        print(
            f"{len(earlier)} envelope(s) fetched earlier have no verdict yet "
            f"(log index {', '.join(map(str, earlier))}): verifying them again"
        )
    entries = [
        (position, index[str(position)]["digest"], index[str(position)]["runId"])
        for position in pending
    ]
    verdicts = verify_fetched(
        report.out_dir / "envelopes",
        entries,
        expectations,
        now=datetime.now(UTC),
        workers=args.verify_workers or default_workers(),
    )
    unjudged = [verdict.position for verdict in verdicts if not verdict.judged]
    record_unjudged(report.out_dir, unjudged)
    for verdict in verdicts:
        lines = verdict.summary.rstrip("\n").split("\n")
        print(f"{verdict.label()}: {lines[0]}")
        for line in lines[1:]:
            print(f"  {line}")
    failed = sum(not verdict.ok for verdict in verdicts)
    what = "envelope(s)" if earlier else "new envelope(s)"
    print(
        f"{len(verdicts) - failed} of {len(verdicts)} {what} verified against "
        f"--expected {args.expected}"
        + (f" ({len(unjudged)} without a verdict)" if unjudged else "")
    )
    return failed, len(verdicts), unjudged
