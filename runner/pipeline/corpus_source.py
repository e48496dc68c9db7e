"""Where a replay's corpus comes from: a directory, or an HTTPS URL of a ``.tar.gz``.

The transport is not trusted: the pod recomputes the corpus checksum inside the TEE and
refuses a corpus whose checksum differs from the one the operator expected. Nor is the
archive: it is downloaded within a deadline and a size cap (:mod:`tenant.http`), then
unpacked in one streaming pass that refuses it at the first entry over a bound, before
anything is listed (:mod:`tenant.archive`).
"""

from __future__ import annotations

import tarfile
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
from runner.corpus.checksum import CASES_FILE
from runner.corpus.evaluation import MARKS_FILE, PLAN_FILE, RUNS_FILE
from runner.corpus.jsonio import MAX_SMALL_FILE_BYTES
from runner.corpus.runs_index import MAX_RUNS_INDEX_BYTES, RUNS_INDEX_FILE
from runner.errors import InputError, SourceUnavailableError, UsageError
from tenant.archive import ArchiveBounds, iter_entries
from tenant.errors import ArchiveError, TenantUsageError
from tenant.http import (
    AnswerTooLargeError,
    HttpClient,
    HttpRefusedError,
    HttpUnavailableError,
    Limits,
    RetryPolicy,
    check_url,
)

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
    _unpack(archive, corpus_dir)
    archive.unlink()
    return corpus_dir


def _unpack(archive: Path, target: Path) -> None:
    """Extract the four corpus files (and ``runs.index.json``, if there is one), from the
    archive root or one top-level directory, in one streaming pass whose bounds are checked
    entry by entry (:mod:`tenant.archive`; the limits are in :mod:`attestation.contracts`).
    Other regular files are ignored, as they are in a corpus directory; links, devices and
    paths leaving the archive are refused."""
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
                if not _is_corpus_file(member, path):
                    # Another file (a README, a licence): ignored, as in a directory; it is
                    # still read through, and counted by the bounds.
                    while reader.read(_CHUNK):
                        pass
                    continue
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


def _is_corpus_file(member: tarfile.TarInfo, path: PurePosixPath) -> bool:
    """Whether the entry is one of the corpus files (at the root or one directory down);
    an entry whose path leaves the archive is refused, whatever its name."""
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveError(f"entry {member.name!r} points outside the archive")
    return path.name in CORPUS_FILES | OPTIONAL_FILES and len(path.parts) <= 2


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
