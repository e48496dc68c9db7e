"""``tenant fetch --corpus``: download the tenant's corpus exports and check each one.

Exports are kept in ``OUT/corpora/sha256-<hex>.tar.gz`` (exact bytes) with
``OUT/corpora/index.json`` (digest -> corpus checksum, case count, size). An export already
held is not downloaded again (its name is its digest). Each new one is downloaded to a
temporary file under the size cap, and kept only if its SHA-256 is its name, it is a valid
export (:func:`attestation.tenant.corpus_export.read_export`: layout, manifest, every file's size
and SHA-256), its manifest's corpus checksum is the one the service listed and, when the caller
passes ``corpus_checksum`` (``attested-replay`` passes the replay's checksum function), the
unpacked cases really have that checksum. Anything else is tampering: the service holds
exports by digest and never rewrites them.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import structlog

from attestation.contracts import DEFAULT_MAX_CORPUS_EXPORT_BYTES, format_sha256, is_sha256_digest
from attestation.tenant.corpus_export import ExportError, ExportManifest, peek_manifest, read_export
from attestation.tenant.errors import ServiceUnavailableError, TamperingError, TenantInputError
from attestation.tenant.fetch import load_index
from attestation.tenant.fsutil import atomic_write_text
from attestation.tenant.http import (
    AnswerTooLargeError,
    HttpClient,
    HttpError,
    HttpRefusedError,
    Limits,
    RetryPolicy,
    check_url,
)

log = structlog.get_logger("attested-replay.tenant")

LIST_ANSWER: Final = Limits(max_bytes=4 * 1024 * 1024, deadline=60.0)
#: Seconds for one export download, retries included.
DOWNLOAD_DEADLINE: Final = 3600.0
CORPORA_DIR: Final = "corpora"


@dataclass(frozen=True, slots=True)
class FetchedExport:
    digest: str
    manifest: ExportManifest
    path: Path


def export_path(out_dir: Path, digest: str) -> Path:
    return out_dir / CORPORA_DIR / f"sha256-{digest.removeprefix('sha256:')}.tar.gz"


class _Hashing:
    """A sink that hashes what it writes to ``target``."""

    def __init__(self, target: IO[bytes]) -> None:
        self._target = target
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self._target.write(data)


def _listing(client: HttpClient, base: str, max_bytes: int) -> list[dict[str, Any]]:
    try:
        answer = client.get(f"{base}/corpora", limit=LIST_ANSWER)
    except AnswerTooLargeError as exc:
        raise TamperingError(f"GET corpora: {exc}") from exc
    except HttpError as exc:
        raise ServiceUnavailableError(f"publication service unreachable: {exc}") from exc
    if answer.status != 200:
        raise ServiceUnavailableError(f"GET corpora answered HTTP {answer.status}: {answer.text()}")
    try:
        body = answer.json("GET corpora")
    except HttpRefusedError as exc:
        raise TamperingError(str(exc)) from exc
    items = body.get("corpora") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise TamperingError('GET corpora did not return {"corpora": [...]}')
    for item in items:
        if not (
            isinstance(item, dict)
            and is_sha256_digest(str(item.get("digest")))
            and is_sha256_digest(str(item.get("corpusChecksum")))
            and isinstance(item.get("size"), int)
        ):
            raise TamperingError(f"GET corpora listed a malformed export: {str(item)[:200]}")
        if item["size"] > max_bytes:
            raise TenantInputError(
                f"corpus export {item['digest']} has {item['size']} bytes, more than "
                f"--max-corpus-bytes {max_bytes}"
            )
    return items


def fetch_corpus_exports(
    *,
    server: str,
    token: str,
    tenant: str,
    out_dir: Path,
    max_bytes: int = DEFAULT_MAX_CORPUS_EXPORT_BYTES,
    corpus_checksum: Callable[[Path], str] | None = None,
    retry: RetryPolicy | None = None,
    ca_bundle: Path | None = None,
) -> tuple[FetchedExport, ...]:
    """Download and check every export of ``tenant`` not yet in ``out_dir``; return the new ones."""
    check_url(server, what="server")
    base = server.rstrip("/") + f"/v1/tenants/{tenant}"
    fetched = []
    index = load_index(out_dir / CORPORA_DIR / "index.json")
    with HttpClient(token=token, retry=retry, what="server", ca_bundle=ca_bundle) as client:
        for item in _listing(client, base, max_bytes):
            digest = str(item["digest"])
            if export_path(out_dir, digest).is_file():
                continue
            target = export_path(out_dir, digest)
            manifest = _download(
                client,
                f"{base}/corpora/{digest}",
                target,
                item=item,
                max_bytes=max_bytes,
                corpus_checksum=corpus_checksum,
            )
            index[digest] = {
                "corpusChecksum": manifest.corpus_checksum,
                "caseCount": manifest.case_count,
                "size": item["size"],
            }
            fetched.append(FetchedExport(digest, manifest, target))
            atomic_write_text(
                out_dir / CORPORA_DIR / "index.json",
                json.dumps(index, indent=1, sort_keys=True) + "\n",
            )
    log.info("corpus_exports_fetched", tenant=tenant, new=len(fetched))
    return tuple(fetched)


def _download(
    client: HttpClient,
    url: str,
    target: Path,
    *,
    item: dict[str, Any],
    max_bytes: int,
    corpus_checksum: Callable[[Path], str] | None,
) -> ExportManifest:
    """Download the export ``item`` names to ``target``, keeping it only once checked."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        dir=target.parent, prefix=".download-", suffix=".tmp", delete=False
    ) as placeholder:
        partial = Path(placeholder.name)
    try:
        manifest = _receive(client, url, partial, item=item, max_bytes=max_bytes)
        digest = str(item["digest"])
        _check_unpacked(partial, digest, manifest, corpus_checksum)
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return manifest


def _receive(
    client: HttpClient, url: str, partial: Path, *, item: dict[str, Any], max_bytes: int
) -> ExportManifest:
    digest = str(item["digest"])
    with partial.open("wb") as handle:
        sink = _Hashing(handle)
        try:
            answer = client.download(
                url,
                sink,  # type: ignore[arg-type]  # download only calls write()
                limit=Limits(max_bytes=max_bytes, deadline=DOWNLOAD_DEADLINE),
            )
        except AnswerTooLargeError as exc:
            raise TamperingError(f"corpus export {digest}: {exc}") from exc
        except HttpError as exc:
            raise ServiceUnavailableError(f"publication service unreachable: {exc}") from exc
        handle.flush()
        os.fsync(handle.fileno())
    if answer.status == 404:
        raise TamperingError(f"corpus export {digest} is listed, but the service has none")
    if answer.status != 200:
        raise ServiceUnavailableError(f"GET {url} answered HTTP {answer.status}: {answer.text()}")
    actual = format_sha256(sink.digest.digest())
    if actual != digest:
        raise TamperingError(f"corpus export {digest} arrived with other bytes ({actual})")
    try:
        with partial.open("rb") as archive:
            manifest = peek_manifest(archive)
    except ExportError as exc:
        raise TamperingError(f"corpus export {digest}: {exc}") from exc
    if manifest.corpus_checksum != item["corpusChecksum"]:
        raise TamperingError(
            f"corpus export {digest} holds corpus {manifest.corpus_checksum}, the service "
            f"listed it as {item['corpusChecksum']}"
        )
    return manifest


def _check_unpacked(
    path: Path,
    digest: str,
    manifest: ExportManifest,
    corpus_checksum: Callable[[Path], str] | None,
) -> None:
    """Every file against the manifest; with ``corpus_checksum``, the unpacked cases too."""
    with tempfile.TemporaryDirectory(prefix="attested-replay-export-") as workdir:
        destination = Path(workdir) if corpus_checksum is not None else None
        try:
            with path.open("rb") as archive:
                read_export(archive, destination)
        except ExportError as exc:
            raise TamperingError(f"corpus export {digest}: {exc}") from exc
        if destination is not None and corpus_checksum is not None:
            actual = corpus_checksum(destination)
            if actual != manifest.corpus_checksum:
                raise TamperingError(
                    f"corpus export {digest}: its manifest says corpus checksum "
                    f"{manifest.corpus_checksum}, its cases have {actual}"
                )
