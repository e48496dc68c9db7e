"""Where a replay's corpus comes from: a directory, or an HTTPS URL of a ``.tar.gz``.

The transport is not trusted: the pod recomputes the corpus checksum inside the TEE and
refuses a corpus whose checksum differs from the one the operator expected.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Final

import structlog

from runner.corpus.checksum import CASES_FILE
from runner.corpus.evaluation import MARKS_FILE, PLAN_FILE, RUNS_FILE
from runner.errors import InputError, SourceUnavailableError, UsageError
from tenant.errors import TenantUsageError
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
MAX_ARCHIVE_BYTES: Final = 4 * 1024**3
CORPUS_FILES: Final = frozenset({CASES_FILE, RUNS_FILE, MARKS_FILE, PLAN_FILE})
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
        with HttpClient(retry=policy, what="corpus URL") as client, archive.open("wb") as sink:
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
    """Extract exactly the corpus files, from the archive root or one top-level directory."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = [m for m in tar.getmembers() if not m.isdir()]
            names = {Path(m.name).name: m for m in members}
            for member in members:
                path = Path(member.name)
                if not member.isfile():
                    raise InputError(f"corpus archive entry {member.name!r} is not a regular file")
                if path.name not in CORPUS_FILES or len(path.parts) > 2:
                    raise InputError(
                        f"corpus archive entry {member.name!r} is not one of {sorted(CORPUS_FILES)}"
                    )
            if len({Path(m.name).parent for m in members}) != 1 or len(names) != len(members):
                raise InputError("corpus archive must hold the four corpus files in one directory")
            missing = CORPUS_FILES - names.keys()
            if missing:
                raise InputError(f"corpus archive lacks {sorted(missing)}")
            for name, member in names.items():
                source = tar.extractfile(member)
                if source is None:
                    raise InputError(f"corpus archive entry {member.name!r} cannot be read")
                with source, (target / name).open("wb") as out:
                    while chunk := source.read(_CHUNK):
                        out.write(chunk)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"corpus archive {archive.name} is not a valid .tar.gz: {exc}") from exc
