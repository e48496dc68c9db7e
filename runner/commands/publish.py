"""``publish``, ``serve``, ``token create`` and ``tenant fetch``: envelope publication."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attestation.contracts import DEFAULT_MAX_CORPUS_EXPORT_BYTES, is_tenant_id
from runner.commands import reproduce
from runner.commands.corpus import parse_size
from runner.errors import InputError, PublishError, UsageError
from runner.extras import extra_required
from tenant.http import read_token

if TYPE_CHECKING:
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    _register_publish(subparsers)
    _register_serve(subparsers)
    _register_token(subparsers)
    _register_tenant(subparsers)


def _register_publish(subparsers: Any) -> None:  # noqa: ANN401  # as above
    parser = subparsers.add_parser(
        "publish",
        help="publish an envelope to a dir:// or https:// target, or flush the spool",
    )
    parser.add_argument("envelope", nargs="?", type=Path, help="envelope JSON file")
    parser.add_argument("--target", help="dir://PATH or https://HOST (with --flush: override)")
    parser.add_argument("--tenant", help="tenant id the envelope is published for")
    parser.add_argument("--run-id", help="run id (default: the envelope's runId)")
    parser.add_argument("--token-file", type=Path, help="file holding the operator token")
    parser.add_argument("--spool-dir", type=Path, help="spool directory (default: see docs)")
    parser.add_argument("--flush", action="store_true", help="deliver every spooled envelope")
    parser.set_defaults(handler=_publish)


def _register_serve(subparsers: Any) -> None:  # noqa: ANN401  # as above
    parser = subparsers.add_parser("serve", help="run the publication service")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--state-dir", type=Path, help="keys and SQLite database live here")
    parser.add_argument("--db", help="SQLite file or postgresql:// DSN (default: in state dir)")
    parser.add_argument("--log-signing-key", type=Path, help="Ed25519 PKCS#8 PEM key file")
    parser.add_argument("--log-name", help="log and key name (checkpoint origin prefix)")
    parser.add_argument(
        "--sqlite-synchronous",
        choices=["full", "normal"],
        default="full",
        help="full (default): every acknowledged envelope survives power loss; normal: "
        "survives process crashes only, for disposable stores",
    )
    parser.add_argument(
        "--max-corpus-export-bytes",
        type=parse_size,
        default=DEFAULT_MAX_CORPUS_EXPORT_BYTES,
        metavar="SIZE",
        help="largest corpus export accepted, e.g. 256M or 2G (default 256M)",
    )
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    parser.set_defaults(handler=_serve)


def _register_token(subparsers: Any) -> None:  # noqa: ANN401  # as above
    parser = subparsers.add_parser("token", help="manage publication-service tokens")
    actions = parser.add_subparsers(dest="token_action", metavar="ACTION")
    actions.required = True
    create = actions.add_parser("create", help="create a token and print it once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--role", required=True, choices=["operator", "tenant"])
    create.add_argument("--db", required=True, help="SQLite file or postgresql:// DSN")
    create.set_defaults(handler=_token_create)


def _register_tenant(subparsers: Any) -> None:  # noqa: ANN401  # as above
    parser = subparsers.add_parser("tenant", help="tenant-side commands")
    actions = parser.add_subparsers(dest="tenant_action", metavar="ACTION")
    actions.required = True
    fetch = actions.add_parser("fetch", help="fetch new envelopes and verify the log")
    fetch.add_argument("--server", required=True, help="https://HOST of the service")
    fetch.add_argument("--token-file", required=True, type=Path)
    fetch.add_argument("--tenant", required=True)
    fetch.add_argument("--out", required=True, type=Path, help="local store directory")
    fetch.add_argument("--log-key", help="pinned verifier key (text or file)")
    fetch.add_argument("--checkpoint", help="a checkpoint file to check consistency against")
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
        help="largest corpus export downloaded, e.g. 256M or 2G (default 256M)",
    )
    fetch.set_defaults(handler=_tenant_fetch)

    reproduce.register_action(actions)


def _publish(args: argparse.Namespace) -> int:
    from runner.publish.client import flush_spool, publish_envelope, receipt_json

    token = read_token(args.token_file) if args.token_file else None
    if args.flush:
        if args.envelope is not None:
            raise UsageError("publish --flush takes no envelope file")
        report = flush_spool(spool_dir=args.spool_dir, target=args.target, token=token)
        for outcome in report.delivered:
            print(f"delivered {outcome.digest} ({outcome.status}) to {outcome.target}")
        for digest, reason in report.failed:
            print(f"still spooled {digest}: {reason}")
        if report.failed:
            raise PublishError(f"{len(report.failed)} spooled envelope(s) could not be delivered")
        return 0
    if args.envelope is None or args.target is None or args.tenant is None:
        raise UsageError("publish needs ENVELOPE, --target and --tenant (or --flush)")
    try:
        data = args.envelope.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read envelope {args.envelope}: {exc}") from exc
    run_id = args.run_id or _run_id_of(data, args.envelope)
    outcome = publish_envelope(
        args.target,
        data,
        tenant=args.tenant,
        run_id=run_id,
        token=token,
        spool_dir=args.spool_dir,
    )
    print(receipt_json(outcome))
    return 0


def _run_id_of(data: bytes, path: Path) -> str:
    from attestation.envelope.model import parse_envelope
    from attestation.errors import MalformedError

    try:
        return parse_envelope(data).run_id
    except MalformedError as exc:
        raise InputError(f"{path} is not a valid attestation envelope: {exc}") from exc


def _serve(args: argparse.Namespace) -> int:
    with extra_required("serve", "server"):
        import uvicorn

        from runner.publish.corpus_routes import corpus_routes
        from runner.publish.corpus_store import open_corpus_store
        from runner.publish.panel import panel_routes
        from runner.publish.server import create_app
        from runner.publish.service import (
            DEFAULT_LOG_NAME,
            ServiceConfig,
            default_state_dir,
            open_service,
        )

    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    config = ServiceConfig(
        state_dir=args.state_dir or default_state_dir(),
        database=args.db,
        signing_key=args.log_signing_key,
        log_name=args.log_name or os.environ.get("ATTESTED_REPLAY_LOG_NAME") or DEFAULT_LOG_NAME,
        sqlite_synchronous=args.sqlite_synchronous.upper(),
    )
    storage, signer = open_service(config)
    print(f"log verifier key (tenants pin this): {signer.verifier_key.encode()}", flush=True)
    store = open_corpus_store(config.storage_location())
    extra_routes = [
        *corpus_routes(storage, store, max_bytes=args.max_corpus_export_bytes),
        *panel_routes(storage, store),
    ]
    app = create_app(storage, signer, log_name=config.log_name, extra_routes=extra_routes)
    try:
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            log_level="warning",
            ssl_certfile=args.tls_cert,
            ssl_keyfile=args.tls_key,
        )
    finally:
        storage.close()
    return 0


def _token_create(args: argparse.Namespace) -> int:
    with extra_required("token create", "server"):
        from runner.publish.storage import Role, open_storage
        from runner.publish.tokens import create_token

    if not is_tenant_id(args.tenant):
        raise UsageError(f"tenant {args.tenant!r} is not a tenant id (a DNS label)")
    storage = open_storage(args.db)
    try:
        print(create_token(storage, args.tenant, Role(args.role)))
    finally:
        storage.close()
    return 0


def _tenant_fetch(args: argparse.Namespace) -> int:
    from tenant.fetch import fetch_tenant, load_verifier_key

    report = fetch_tenant(
        server=args.server,
        token=read_token(args.token_file),
        tenant=args.tenant,
        out_dir=args.out,
        log_key=load_verifier_key(args.log_key) if args.log_key else None,
        last_checkpoint=args.checkpoint,
    )
    print(
        f"verified log of {report.size} entries (was {report.previous_size}); "
        f"{len(report.new_envelopes)} new envelope(s) in {report.out_dir / 'envelopes'}"
    )
    if args.corpus:
        from runner.corpus.checksum import compute_checksum
        from tenant.corpus_fetch import fetch_corpus_exports

        exports = fetch_corpus_exports(
            server=args.server,
            token=read_token(args.token_file),
            tenant=args.tenant,
            out_dir=args.out,
            max_bytes=args.max_corpus_bytes,
            corpus_checksum=compute_checksum,
        )
        for export in exports:
            print(
                f"corpus export {export.digest}: {export.manifest.case_count} cases, corpus "
                f"checksum {export.manifest.corpus_checksum} (checked) -> {export.path}"
            )
        print(f"{len(exports)} new corpus export(s) in {args.out / 'corpora'}")
    return 0
