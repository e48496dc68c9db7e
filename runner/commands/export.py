"""``attested-replay export in-toto ENVELOPE``: an envelope the tenant has verified, as a
DSSE-signed in-toto Statement v1 (see :data:`DESCRIPTION`)."""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from attestation import __version__
from attestation.envelope.verification import verify_envelope
from attestation.errors import MalformedError
from attestation.files import open_regular, read_regular
from attestation.tenant.corpus_export import MEDIA_TYPE as EXPORT_MEDIA_TYPE
from attestation.tenant.dsse import load_signing_key
from attestation.tenant.fsutil import atomic_write
from attestation.tenant.intoto import (
    InconsistentMergedEnvelopeError,
    ShardEnvelopeError,
    Subject,
    SubjectMismatchError,
    Verified,
    bound_corpus_checksum,
    exportable,
    result_subject,
    signed_statement,
    statement_for,
)
from runner.commands.parsing import add_actions, add_command, input_file, output_file
from runner.errors import InputError, UsageError
from runner.exit_codes import Family
from runner.pipeline.corpus_source import unpack_archive
from runner.pipeline.envelope import read_envelope_file
from runner.pipeline.replay import compute_checksum
from runner.pipeline.verification import load_expected_file, raise_unless_verified

if TYPE_CHECKING:
    from attestation.envelope.merged import MergedEnvelope
    from attestation.envelope.model import Envelope
    from runner.commands import Subparsers

#: A result file is a few hundred kilobytes at most (the envelope, which embeds it, is capped).
MAX_RESULT_FILE_BYTES = 16 * 1024 * 1024
PLAIN_ARCHIVE_MEDIA_TYPE = "application/gzip"
_CHUNK = 1024 * 1024

DESCRIPTION = """\
First verifies ENVELOPE against the tenant's --expected values exactly as verify-attested-run
does: an envelope that does not verify writes nothing and exits 4 naming its failure class
and the verifier's exit code. Then checks that --result is the result file the envelope binds
and that --corpus (a corpus export, or a .tar.gz of the corpus files) unpacks to the corpus it
binds. Writes a DSSE envelope (payload type application/vnd.in-toto+json) signed with
--signing-key (a PEM Ed25519 or ECDSA P-256/P-384 key the tenant holds) whose payload is an
in-toto Statement v1: the subjects are the two files by the SHA-256 of their exact bytes, the
predicate (type https://attested-replay.dev/attestations/replay/v1, or .../replay-merged/v1
for a sharded run's merged envelope, docs/in-toto.md) names the envelope by digest, carries its
binding, platform and measurement, and records the tenant's verification. A shard envelope is
refused: export the run's merged envelope. Output: RFC 8785 JSON and a newline (one line of an
.intoto.jsonl bundle)."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "export",
        summary="export an envelope in another attestation format (in-toto)",
        description="FORMAT is the format to write; in-toto is the only one.",
        family=Family.DOCUMENTS,
    )
    formats = add_actions(parser, metavar="FORMAT")
    intoto = add_command(
        formats,
        "in-toto",
        summary="write a signed in-toto Statement v1 for an envelope the tenant verified",
        description=DESCRIPTION,
        family=Family.DOCUMENTS,
    )
    intoto.add_argument(
        "envelope", type=input_file("ENVELOPE"), metavar="ENVELOPE", help="envelope JSON file"
    )
    intoto.add_argument(
        "--expected",
        type=input_file("--expected"),
        required=True,
        metavar="FILE",
        help="the tenant's expected-values file the envelope must verify against",
    )
    intoto.add_argument(
        "--result",
        type=input_file("--result"),
        required=True,
        metavar="FILE",
        help="the result file the envelope binds (run --result-out): the first subject",
    )
    intoto.add_argument(
        "--corpus",
        type=input_file("--corpus"),
        required=True,
        metavar="ARCHIVE",
        help="the corpus as a file: a corpus export or a .tar.gz of the corpus files (the "
        "second subject)",
    )
    intoto.add_argument(
        "--signing-key",
        type=input_file("--signing-key"),
        required=True,
        metavar="PEM",
        help="the tenant's private key (Ed25519 or ECDSA P-256/P-384, unencrypted PEM)",
    )
    intoto.add_argument(
        "--out",
        type=output_file("--out"),
        metavar="FILE",
        help="write the signed statement here instead of standard output",
    )
    intoto.set_defaults(handler=handle_intoto)


def handle_intoto(args: argparse.Namespace) -> int:
    path: Path = args.envelope
    key = load_signing_key(args.signing_key, what="--signing-key")
    data = read_envelope_file(path, what="ENVELOPE")
    try:
        envelope = exportable(data)
    except MalformedError as exc:
        raise InputError(f"ENVELOPE {path}: not a valid envelope: {exc}") from exc
    except ShardEnvelopeError as exc:
        raise InputError(f"ENVELOPE {path}: no statement for a shard envelope: {exc}") from exc
    except InconsistentMergedEnvelopeError as exc:
        raise InputError(f"ENVELOPE {path}: not one sharded run: {exc}") from exc
    expected_path: Path = args.expected
    now = datetime.now(UTC)
    result = verify_envelope(data, load_expected_file(expected_path), now=now)
    raise_unless_verified(
        result,
        f"ENVELOPE {path} does not verify against --expected {expected_path}; nothing written",
    )
    subjects = (_result_subject(args.result, envelope), _corpus_subject(args.corpus, envelope))
    verified = Verified(
        verifier=f"attested-replay {__version__}",
        expected_sha256=_file_sha256(expected_path),
        verified_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    statement = statement_for(data, envelope, subjects=subjects, verified=verified)
    signed = signed_statement(statement, key)
    if args.out is None:
        print(signed.decode("utf-8"), end="")
    else:
        atomic_write(args.out, signed)
        print(f"wrote {args.out} (signed by key {key.keyid})")
    return 0


def _result_subject(path: Path, envelope: Envelope | MergedEnvelope) -> Subject:
    try:
        data = read_regular(path, MAX_RESULT_FILE_BYTES)
    except OSError as exc:
        raise UsageError(f"--result {path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        return result_subject(path.name, data, envelope)
    except SubjectMismatchError as exc:
        raise InputError(f"--result {path}: {exc}") from exc


def _corpus_subject(path: Path, envelope: Envelope | MergedEnvelope) -> Subject:
    """The corpus archive as a subject, once it unpacks to the corpus the envelope binds."""
    with tempfile.TemporaryDirectory(prefix="attested-replay-intoto-") as workdir:
        target = Path(workdir) / "corpus"
        target.mkdir()
        manifest = unpack_archive(path, target)
        checksum = compute_checksum(target)
    bound = bound_corpus_checksum(envelope)
    if checksum != bound:
        raise InputError(
            f"--corpus {path}: holds the corpus {checksum}, the envelope binds {bound}"
        )
    media_type = PLAIN_ARCHIVE_MEDIA_TYPE if manifest is None else EXPORT_MEDIA_TYPE
    return Subject(path.name, _file_sha256(path), media_type)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open_regular(path) as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    return digest.hexdigest()
