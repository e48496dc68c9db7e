"""Where a replay's corpus comes from: a directory, or an HTTPS URL of a ``.tar.gz``.

The transport is not trusted: the pod recomputes the corpus checksum inside the TEE and
refuses a corpus whose checksum differs from the one the operator expected.
"""

from __future__ import annotations

import contextlib
import ipaddress
import tarfile
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import requests
import structlog
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from runner.corpus.checksum import CASES_FILE
from runner.corpus.evaluation import MARKS_FILE, PLAN_FILE, RUNS_FILE
from runner.errors import InputError, SourceUnavailableError, UsageError

#: A downloaded archive larger than this is refused (bytes).
MAX_ARCHIVE_BYTES: Final = 4 * 1024**3
CORPUS_FILES: Final = frozenset({CASES_FILE, RUNS_FILE, MARKS_FILE, PLAN_FILE})
_CHUNK: Final = 1024 * 1024
_TRANSIENT_STATUSES: Final = frozenset({429, 500, 502, 503, 504})

log = structlog.get_logger(__name__)


def is_url(source: str) -> bool:
    return source.startswith(("https://", "http://"))


def fetch_corpus(
    url: str, destination: Path, *, timeout: float = 30.0, retries: int = 5, backoff: float = 1.0
) -> Path:
    """Download and unpack a corpus archive into ``destination``; return the corpus dir."""
    _check_url(url)
    archive = destination / "corpus.tar.gz"
    received = 0
    try:
        with (
            _retrying_session(retries, backoff) as session,
            session.get(url, stream=True, timeout=timeout) as response,
        ):
            if response.status_code in _TRANSIENT_STATUSES:
                raise SourceUnavailableError(
                    f"corpus download {url} still answered HTTP {response.status_code} after "
                    f"{retries} retries"
                )
            if response.status_code != 200:
                raise InputError(f"corpus download {url} answered HTTP {response.status_code}")
            with archive.open("wb") as handle:
                for chunk in response.iter_content(_CHUNK):
                    received += len(chunk)
                    if received > MAX_ARCHIVE_BYTES:
                        raise InputError(
                            f"corpus archive {url} exceeds {MAX_ARCHIVE_BYTES} bytes; refusing it"
                        )
                    handle.write(chunk)
    except requests.RequestException as exc:
        raise SourceUnavailableError(
            f"corpus download {url} failed after {retries} retries: {exc}"
        ) from exc
    log.info("corpus_downloaded", url=url, bytes=received)
    corpus_dir = destination / "corpus"
    corpus_dir.mkdir()
    _unpack(archive, corpus_dir)
    archive.unlink()
    return corpus_dir


def _retrying_session(retries: int, backoff: float = 1.0) -> requests.Session:
    """Connection errors, 429 and 5xx are retried with exponential backoff (honouring
    Retry-After); the transport is untrusted anyway, the checksum decides."""
    retry = Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        backoff_factor=backoff,
        status_forcelist=_TRANSIENT_STATUSES,
        allowed_methods=frozenset({"GET"}),
        respect_retry_after_header=True,
        raise_on_status=False,
    )
    session = requests.Session()
    session.mount("https://", HTTPAdapter(max_retries=retry))
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme == "https":
        return
    host = parts.hostname or ""
    loopback = host == "localhost"
    with contextlib.suppress(ValueError):
        loopback = loopback or ipaddress.ip_address(host).is_loopback
    if parts.scheme == "http" and loopback:
        return  # loopback tests and port-forwarded development only
    raise UsageError(f"corpus URL {url!r} must be https:// (http:// only on loopback)")


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
