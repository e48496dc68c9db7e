"""``attested-replay corpus export``: a corpus as one deterministic, checksummed archive.

Registered under ``attested-replay corpus`` (see :mod:`runner.commands.corpus`). The format is
:mod:`attestation.tenant.corpus_export` (docs/reproduce.md).
"""

from __future__ import annotations

import argparse
import hashlib
import io
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.contracts import format_sha256, is_tenant_id, sha256_digest
from attestation.tenant.corpus_export import (
    ExportError,
    ExportManifest,
    describe_files,
    peek_manifest,
    write_export,
)
from attestation.tenant.fsutil import atomic_output
from attestation.tenant.http import HttpClient, HttpError, Limits, check_url, read_token
from runner.commands.parsing import add_command, input_dir, input_file, output_file
from runner.corpus.check import require_valid_corpus
from runner.errors import InputError, PublishError, UsageError
from runner.exit_codes import Family

#: The service's answer to an upload is a small JSON receipt; the upload itself may take long.
UPLOAD_ANSWER = Limits(max_bytes=64 * 1024, deadline=1800.0)

if TYPE_CHECKING:
    from runner.commands import Subparsers

_CHUNK = 1024 * 1024


DESCRIPTION = """\
DIR's four corpus files, byte for byte, in a deterministic .tar.gz whose first member,
corpus-export.json, carries the corpus checksum and each file's size and SHA-256. The same
files always give the same archive. Tenants check it with
attested-replay tenant reproduce --corpus ARCHIVE (docs/reproduce.md)."""


def register_actions(actions: Subparsers) -> None:
    export = add_command(
        actions,
        "export",
        summary="write the corpus as a deterministic .tar.gz with a checksummed manifest",
        description=DESCRIPTION,
        family=Family.REPLAY,
    )
    export.add_argument("corpus", type=input_dir("DIR"), metavar="DIR", help="corpus directory")
    export.add_argument(
        "--out",
        type=output_file("--out"),
        required=True,
        metavar="ARCHIVE",
        help="archive to write (.tar.gz)",
    )
    export.set_defaults(handler=handle_export)

    upload = add_command(
        actions,
        "upload",
        summary="store a corpus export in the publication service for its tenant",
        description="""\
PUT ARCHIVE (a corpus export) to the publication service under its SHA-256, for TENANT, with
an operator token. The service checks the digest, its size cap and the manifest; the tenant
downloads and checks it with attested-replay tenant fetch --corpus (docs/publishing.md).""",
        family=Family.PUBLICATION,
    )
    upload.add_argument(
        "archive", type=input_file("ARCHIVE"), metavar="ARCHIVE", help="corpus export (.tar.gz)"
    )
    upload.add_argument(
        "--server", required=True, metavar="URL", help="https://HOST of the service"
    )
    upload.add_argument("--tenant", required=True, help="tenant the corpus belongs to")
    upload.add_argument(
        "--token-file",
        required=True,
        type=input_file("--token-file"),
        metavar="FILE",
        help="file holding the operator token",
    )
    upload.set_defaults(handler=handle_upload)


def build_manifest(corpus: Path) -> ExportManifest:
    """The export manifest of ``corpus``: every corpus file is checked first, as `corpus
    check` does (each file by kind before it is opened), so nothing invalid is exported."""
    report = require_valid_corpus(corpus)
    assert report.set_ref is not None  # a valid corpus has its checksum
    assert report.case_count is not None
    try:
        files = describe_files(corpus)
    except OSError as exc:
        raise UsageError(f"DIR {corpus}: cannot read {exc.filename}: {exc.strerror}") from exc
    return ExportManifest(corpus_checksum=report.set_ref, case_count=report.case_count, files=files)


def handle_export(args: argparse.Namespace) -> int:
    corpus: Path = args.corpus
    out: Path = args.out
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory; give the archive's file name")
    manifest = build_manifest(corpus)
    try:
        with atomic_output(out) as handle:
            write_export(corpus, manifest, handle)
    except ExportError as exc:
        raise InputError(f"DIR {corpus}: {exc}") from exc
    digest = hashlib.sha256()
    with out.open("rb") as written:
        while chunk := written.read(_CHUNK):
            digest.update(chunk)
    print(f"wrote {out}: {manifest.case_count} cases, corpus checksum {manifest.corpus_checksum}")
    print(f"archive {format_sha256(digest.digest())}")
    return 0


def handle_upload(args: argparse.Namespace) -> int:
    archive: Path = args.archive
    check_url(args.server, what="--server")
    if not is_tenant_id(args.tenant):
        raise UsageError(f"--tenant {args.tenant!r}: a tenant is a DNS label")
    token = read_token(args.token_file)
    try:
        data = archive.read_bytes()
    except OSError as exc:
        raise UsageError(f"ARCHIVE {archive}: cannot read it: {exc.strerror or exc}") from exc
    try:
        manifest = peek_manifest(io.BytesIO(data))
    except ExportError as exc:
        raise InputError(f"ARCHIVE {archive}: {exc}") from exc
    digest = sha256_digest(data)
    url = f"{args.server.rstrip('/')}/v1/tenants/{args.tenant}/corpora/{digest}"
    try:
        with HttpClient(token=token, what="server") as client:
            answer = client.put(url, body=data, limit=UPLOAD_ANSWER, headers={"If-None-Match": "*"})
    except HttpError as exc:
        raise PublishError(f"upload of {archive} failed: {exc}") from exc
    if answer.status not in (200, 201, 412):
        raise PublishError(f"upload of {archive} answered HTTP {answer.status}: {answer.text()}")
    status = "created" if answer.status == 201 else "already present"
    print(
        f"{digest} {status} for tenant {args.tenant}: {manifest.case_count} cases, corpus "
        f"checksum {manifest.corpus_checksum}"
    )
    return 0
