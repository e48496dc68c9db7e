"""Where a corpus comes from: a directory, a ``.tar.gz`` file, or an HTTPS URL of one.

:func:`corpus_directory` is the one resolver every command taking ``--corpus`` uses (``run``,
``expected``, ``tenant reproduce``): the archive is a corpus export (``corpus export``'s format,
read by :func:`attestation.tenant.corpus_export.read_export`) when its first member is the export's
manifest, otherwise a plain archive of the corpus files.

The transport is not trusted: the pod recomputes the corpus checksum inside the TEE and
refuses a corpus whose checksum differs from the one the operator expected. Nor is the
archive: it is downloaded within a deadline and a size cap (:mod:`attestation.tenant.http`), then
unpacked in one streaming pass that refuses it at the first entry over a bound, before
anything is listed (:mod:`attestation.tenant.archive`).
"""

from __future__ import annotations

import gzip
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Final

import structlog

from attestation.contracts import (
    CORPUS_RATIO_FLOOR,
    MAX_ARCHIVE_HEADER_BYTES,
    MAX_CORPUS_ARCHIVE_BYTES,
    MAX_CORPUS_ARCHIVE_ENTRIES,
    MAX_CORPUS_ARCHIVE_RATIO,
    MAX_CORPUS_UNPACKED_BYTES,
)
from attestation.files import open_regular
from attestation.tenant.archive import ArchiveBounds, iter_entries
from attestation.tenant.corpus_export import MANIFEST_NAME, ExportError, ExportManifest, read_export
from attestation.tenant.errors import ArchiveError, TenantUsageError
from attestation.tenant.http import (
    AnswerTooLargeError,
    HttpClient,
    HttpRefusedError,
    HttpUnavailableError,
    Limits,
    RetryPolicy,
    check_url,
)
from runner.corpus.checksum import CASES_FILE
from runner.corpus.evaluation_files import MARKS_FILE, PLAN_FILE, RUNS_FILE
from runner.corpus.jsonio import MAX_SMALL_FILE_BYTES
from runner.corpus.runs_index import MAX_RUNS_INDEX_BYTES, RUNS_INDEX_FILE
from runner.errors import InputError, SourceUnavailableError, UsageError

#: A downloaded archive larger than this is refused (bytes).
MAX_ARCHIVE_BYTES: Final = MAX_CORPUS_ARCHIVE_BYTES
CORPUS_FILES: Final = frozenset({CASES_FILE, RUNS_FILE, MARKS_FILE, PLAN_FILE})
#: Taken from the archive when present: the runs index lets a shard hash only its blocks.
OPTIONAL_FILES: Final = frozenset({RUNS_INDEX_FILE})
_SMALL_FILES: Final = frozenset({PLAN_FILE, MARKS_FILE})
_CHUNK: Final = 1024 * 1024
#: The whole download, retries and waits included, must finish within this (seconds).
DOWNLOAD_DEADLINE: Final = 1800.0
#: Redirects a corpus URL may take (each hop is checked by the URL policy again).
MAX_REDIRECTS: Final = 5

log = structlog.get_logger(__name__)


def is_url(source: str) -> bool:
    return source.startswith(("https://", "http://"))


def fetch_corpus(
    url: str,
    destination: Path,
    *,
    timeout: float = 30.0,
    retries: int = 5,
    backoff: float = 1.0,
    deadline: float = DOWNLOAD_DEADLINE,
    ca_bundle: Path | None = None,
) -> Path:
    """Download and unpack a corpus archive into ``destination``; return the corpus dir.

    Connection errors, 429 and 5xx are retried ``retries`` times with exponential backoff
    (honouring Retry-After); the transport is untrusted anyway, the checksum decides.
    """
    try:
        check_url(url, what="corpus URL")
    except TenantUsageError as exc:
        raise UsageError(str(exc)) from exc
    archive = destination / "corpus.tar.gz"
    policy = RetryPolicy(
        attempts=retries + 1,
        backoff_factor=backoff,
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    try:
        with (
            HttpClient(retry=policy, what="corpus URL", ca_bundle=ca_bundle) as client,
            archive.open("wb") as sink,
        ):
            answer = client.download(
                url,
                sink,
                limit=Limits(max_bytes=MAX_ARCHIVE_BYTES, deadline=deadline),
                redirects=MAX_REDIRECTS,
            )
    except AnswerTooLargeError as exc:
        raise InputError(
            f"corpus archive {url} exceeds {MAX_ARCHIVE_BYTES} bytes; refusing it"
        ) from exc
    except HttpRefusedError as exc:
        raise InputError(f"corpus download {url} refused: {exc}") from exc
    except HttpUnavailableError as exc:
        raise SourceUnavailableError(
            f"corpus download {url} failed after {retries} retries: {exc}"
        ) from exc
    if answer.status in policy.retry_statuses:
        raise SourceUnavailableError(
            f"corpus download {url} still answered HTTP {answer.status} after {retries} retries"
        )
    if answer.status != 200:
        raise InputError(f"corpus download {url} answered HTTP {answer.status}")
    received = archive.stat().st_size
    log.info("corpus_downloaded", url=url, bytes=received)
    corpus_dir = destination / "corpus"
    corpus_dir.mkdir()
    unpack_archive(archive, corpus_dir)
    archive.unlink()
    return corpus_dir


def describe_source(source: str, flag: str) -> None:
    """Refuse, before any work, a ``flag`` that names neither a directory, a file nor a URL."""
    if not is_url(source) and not Path(source).is_dir() and not Path(source).is_file():
        raise UsageError(
            f"{flag} {source}: not a corpus directory, a .tar.gz file or an https:// URL"
        )


@contextmanager
def corpus_directory(
    source: str,
    *,
    flag: str = "--corpus",
    deadline: float = DOWNLOAD_DEADLINE,
    ca_bundle: Path | None = None,
) -> Iterator[Path]:
    """The corpus directory ``source`` names: a directory as it is; a ``.tar.gz`` file or an
    ``https://`` URL of one unpacked into a temporary directory that lives as long as the
    context (:func:`unpack_archive`)."""
    describe_source(source, flag)
    path = Path(source)
    if not is_url(source) and path.is_dir():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="attested-replay-corpus-") as workdir:
        if is_url(source):
            yield fetch_corpus(source, Path(workdir), deadline=deadline, ca_bundle=ca_bundle)
            return
        target = Path(workdir) / "corpus"
        target.mkdir()
        unpack_archive(path, target)
        yield target


def _first_member_name(archive: Path) -> bytes | None:
    """The name field of the archive's first tar header (at most 512 bytes unpacked), or
    None when the file is not gzip: the readers then say what is wrong with it."""
    try:
        with open_regular(archive) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as unpacked:
            header = unpacked.read(tarfile.BLOCKSIZE)
    except (OSError, EOFError, zlib.error):
        return None
    return header[:100].rstrip(b"\0")


def unpack_archive(archive: Path, target: Path) -> ExportManifest | None:
    """Unpack the corpus archive ``archive`` into the empty directory ``target``: a corpus
    export (returns its manifest) or a plain archive of the corpus files (returns None).
    Raises :class:`InputError` naming the archive and what is wrong."""
    if _first_member_name(archive) != MANIFEST_NAME.encode():
        _unpack(archive, target)
        return None
    try:
        with open_regular(archive) as raw:
            return read_export(raw, target)
    except ExportError as exc:
        raise InputError(f"corpus archive {archive.name}: {exc}") from exc
    except OSError as exc:
        raise InputError(f"corpus archive {archive.name} cannot be read: {exc.strerror}") from exc


def _unpack(archive: Path, target: Path) -> None:
    """Extract the four corpus files (and ``runs.index.json``, if there is one), from the
    archive root or one top-level directory, in one streaming pass whose bounds are checked
    entry by entry (:mod:`attestation.tenant.archive`; the limits are in
    :mod:`attestation.contracts`). Any other file, links, devices and paths leaving the archive are
    refused (docs/limits.md): an archive holds the corpus and nothing else."""
    bounds = ArchiveBounds(
        max_entries=MAX_CORPUS_ARCHIVE_ENTRIES,
        max_unpacked=MAX_CORPUS_UNPACKED_BYTES,
        max_ratio=MAX_CORPUS_ARCHIVE_RATIO,
        ratio_floor=CORPUS_RATIO_FLOOR,
        header_budget=MAX_ARCHIVE_HEADER_BYTES,
        archive_size=archive.stat().st_size,
    )
    found: dict[str, str] = {}
    directories: set[PurePosixPath] = set()
    try:
        with archive.open("rb") as raw:
            for member, reader in iter_entries(raw, bounds):
                if reader is None:
                    continue  # a directory entry: only the files' own directory matters
                path = PurePosixPath(member.name)
                _require_corpus_file(member, path)
                _check_entry(member, path, found)
                found[path.name] = member.name
                directories.add(path.parent)
                with (target / path.name).open("xb") as out:
                    while chunk := reader.read(_CHUNK):
                        out.write(chunk)
    except ArchiveError as exc:
        raise InputError(f"corpus archive {archive.name}: {exc}") from exc
    except OSError as exc:
        raise InputError(f"corpus archive {archive.name} cannot be unpacked: {exc}") from exc
    if len(directories) > 1:
        raise InputError("corpus archive must hold the four corpus files in one directory")
    missing = CORPUS_FILES - found.keys()
    if missing:
        raise InputError(f"corpus archive lacks {sorted(missing)}")


def _require_corpus_file(member: tarfile.TarInfo, path: PurePosixPath) -> None:
    """The entry must be one of the corpus files, at the root or one directory down; an
    entry whose path leaves the archive is refused as such, whatever its name."""
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveError(f"entry {member.name!r} points outside the archive")
    if path.name not in CORPUS_FILES | OPTIONAL_FILES or len(path.parts) > 2:
        raise ArchiveError(
            f"entry {member.name!r} is not a corpus file (an archive holds only "
            f"{', '.join(sorted(CORPUS_FILES | OPTIONAL_FILES))}, at its root or in one "
            "top-level directory)"
        )


def _check_entry(member: tarfile.TarInfo, path: PurePosixPath, found: dict[str, str]) -> None:
    if path.name in found:
        raise ArchiveError(f"it holds {path.name} twice ({found[path.name]!r} and {member.name!r})")
    if path.name in _SMALL_FILES and member.size > MAX_SMALL_FILE_BYTES:
        raise ArchiveError(
            f"entry {member.name!r} declares {member.size} bytes; "
            f"{path.name} is at most {MAX_SMALL_FILE_BYTES}"
        )
    if path.name == RUNS_INDEX_FILE and member.size > MAX_RUNS_INDEX_BYTES:
        raise ArchiveError(
            f"entry {member.name!r} declares {member.size} bytes; "
            f"{path.name} is at most {MAX_RUNS_INDEX_BYTES}"
        )
