"""The publication service's corpus-export routes (docs/publishing.md, "Corpus exports").

``PUT /v1/tenants/{t}/corpora/sha256:{hex}`` (operator token) stores an export under the
SHA-256 of its exact bytes; ``GET .../corpora`` lists a tenant's exports and ``GET
.../corpora/sha256:{hex}`` returns one, to that tenant's tokens only, with the same 401/404/403
answers as the envelope routes (another tenant's token gets the 404 of a missing object).

The service checks the digest, the size cap and the manifest (the first member); it does not
unpack the corpus files. Tenants check everything (``tenant fetch --corpus``, ``tenant
reproduce``).
"""

from __future__ import annotations

import base64
import hashlib
import tempfile
from collections.abc import Iterator
from typing import IO, Any, Final

import anyio.to_thread
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from attestation.contracts import format_sha256, is_sha256_digest
from attestation.tenant.corpus_export import MEDIA_TYPE, ExportError, peek_manifest
from runner.service.corpus_store import CorpusStore, StoredExport
from runner.service.log.storage import utc_now
from runner.service.server import ApiError, Service, json_response, not_found

log = structlog.get_logger("attested-replay.serve")

#: Uploads are spooled to disk past this many bytes.
_SPOOL_IN_MEMORY: Final = 8 * 1024 * 1024


def _export_json(export: StoredExport) -> dict[str, Any]:
    return {
        "digest": export.digest,
        "corpusChecksum": export.corpus_checksum,
        "caseCount": export.case_count,
        "size": export.size,
        "uploadedAt": export.uploaded_at,
    }


def _checked_digest(request: Request) -> str:
    digest = str(request.path_params["digest"])
    if not is_sha256_digest(digest):
        raise ApiError(
            400, "the path must name the export as sha256:<64 lowercase hex>", reason="bad-request"
        )
    return digest


def corpus_routes(service: Service, store: CorpusStore, *, max_bytes: int) -> list[BaseRoute]:
    """The routes, authorizing with the service's tokens and keeping exports in ``store``;
    an upload above ``max_bytes`` is refused (413)."""

    async def authorize(request: Request, *, write: bool) -> str:
        tenant = str(request.path_params["tenant"])
        await service.authorize(request, tenant, write=write)
        return tenant

    def too_large() -> ApiError:
        return ApiError(
            413, f"a corpus export may have at most {max_bytes} bytes", reason="too-large"
        )

    async def copy_body(request: Request, spool: IO[bytes]) -> tuple[str, int]:
        digest = hashlib.sha256()
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise too_large()
            digest.update(chunk)
            spool.write(chunk)
        return format_sha256(digest.digest()), size

    async def spool_body(request: Request) -> tuple[IO[bytes], str, int]:
        """The body in a temporary file (memory up to 8 MiB), its digest and size."""
        if request.headers.get("content-encoding"):
            raise ApiError(
                415, "Content-Encoding is not accepted; send the exact bytes", reason="encoding"
            )
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise too_large()
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115 - returned
        try:
            digest, size = await copy_body(request, spool)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return spool, digest, size

    async def put_export(request: Request) -> Response:
        tenant = await authorize(request, write=True)
        digest = _checked_digest(request)
        body, actual, size = await spool_body(request)
        with body:
            if actual != digest:
                raise ApiError(
                    422, f"body digest {actual} does not match the path", reason="digest-mismatch"
                )
            try:
                manifest = await anyio.to_thread.run_sync(lambda: peek_manifest(body))
            except ExportError as exc:
                raise ApiError(422, f"not a corpus export: {exc}", reason="invalid-export") from exc
            body.seek(0)
            export = StoredExport(
                digest=digest,
                corpus_checksum=manifest.corpus_checksum,
                case_count=manifest.case_count,
                size=size,
                uploaded_at=utc_now(),
            )
            manifest_bytes = manifest.canonical_bytes()
            created = await anyio.to_thread.run_sync(
                lambda: store.put(tenant, export, manifest_bytes, body)
            )
        stored = await anyio.to_thread.run_sync(lambda: store.get(tenant, digest))
        assert stored is not None  # just stored, and exports are never deleted
        log.info("corpus_export_put", tenant=tenant, digest=digest, created=created, size=size)
        if created:
            status = 201
        elif request.headers.get("if-none-match", "").strip() == "*":
            status = 412
        else:
            status = 200
        payload = {**_export_json(stored), "status": "created" if created else "already-present"}
        return json_response(payload, status, {"ETag": f'"{digest}"'})

    async def list_exports(request: Request) -> Response:
        tenant = await authorize(request, write=False)
        exports = await anyio.to_thread.run_sync(lambda: store.list(tenant))
        return JSONResponse(
            {"corpora": [_export_json(export) for export in exports]},
            headers={"Cache-Control": "no-store"},
        )

    async def get_export(request: Request) -> Response:
        tenant = await authorize(request, write=False)
        digest = _checked_digest(request)
        export = await anyio.to_thread.run_sync(lambda: store.get(tenant, digest))
        if export is None:
            raise not_found()
        raw = bytes.fromhex(digest.removeprefix("sha256:"))

        def chunks() -> Iterator[bytes]:
            yield from store.chunks(tenant, digest)

        return StreamingResponse(
            chunks(),
            media_type=MEDIA_TYPE,
            headers={
                "Content-Length": str(export.size),
                "ETag": f'"{digest}"',
                "Content-Digest": f"sha-256=:{base64.b64encode(raw).decode()}:",
                "Cache-Control": "private, max-age=31536000, immutable",
            },
        )

    return [
        Route("/v1/tenants/{tenant}/corpora", list_exports, methods=["GET"]),
        Route("/v1/tenants/{tenant}/corpora/{digest}", put_export, methods=["PUT"]),
        Route("/v1/tenants/{tenant}/corpora/{digest}", get_export, methods=["GET"]),
    ]
