"""``token create``, ``token revoke``, ``token list``: the publication service's bearer tokens."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.contracts import (
    is_tenant_id,
)
from attestation.tenant.http import read_token
from runner.commands.parsing import (
    add_actions,
    add_command,
    input_dir,
    input_file,
)
from runner.errors import PublishError, UsageError
from runner.exit_codes import Family
from runner.extras import extra_required

if TYPE_CHECKING:
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    _register_token(subparsers)


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


def _token_database(args: argparse.Namespace) -> str:
    """The token commands' database: --db, else the one ``serve`` uses in --state-dir (or
    its default state directory); the caller imported the server extra."""
    from runner.service.log.storage import is_postgres_location
    from runner.service.serve import DATABASE_FILE, default_state_dir

    location = str(args.db or (args.state_dir or default_state_dir()) / DATABASE_FILE)
    if not is_postgres_location(location) and not Path(location).parent.is_dir():
        raise UsageError(f"--db {location}: directory {Path(location).parent} does not exist")
    return location


def _token_create(args: argparse.Namespace) -> int:
    with extra_required("token create", "server"):
        import runner.service.serve  # noqa: F401 - the whole extra, before _token_database
        from runner.service.log.storage import Role, StorageError, open_storage
        from runner.service.tokens import create_token

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
        import runner.service.serve  # noqa: F401 - the whole extra, before _token_database
        from runner.service.log.storage import StorageError, open_storage
        from runner.service.tokens import ID_HEX, hash_token, token_id

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
        import runner.service.serve  # noqa: F401 - the whole extra, before _token_database
        from runner.service.log.storage import StorageError, open_storage
        from runner.service.tokens import token_id

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
