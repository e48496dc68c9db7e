"""The publication service: an ASGI app (FastAPI) over a :class:`~runner.publish.storage.Storage`.

``docs/publishing.md`` is the API reference. Every route under ``/v1/tenants/{tenant}`` needs a
bearer token of that tenant; a token of another tenant gets the same 404 as a missing object,
so the API is no existence oracle.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio.to_thread
import structlog
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError
from starlette.routing import BaseRoute

from attestation.contracts import (
    MAX_ENVELOPE_BYTES,
    RUN_ID_GRAMMAR,
    Sha256Digest,
    WireModel,
    format_sha256,
    is_run_id,
    is_sha256_digest,
    is_tenant_id,
)
from attestation.envelope.model import parse_envelope
from attestation.errors import MalformedError
from attestation.transparency.checkpoint import Checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash
from runner.publish.checkpoint import CheckpointSigner
from runner.publish.merkle import MerkleTree
from runner.publish.storage import DigestCollisionError, Role, RunPointer, Storage
from runner.publish.tokens import authenticate, hash_token

MAX_RUN_BODY_BYTES = 4096
MAX_PAGE = 1000
#: Log entries read from storage per query while a cached tree catches up.
_CATCH_UP_BATCH = 10_000
CONTENT_DIGEST = re.compile(r"^\s*sha-256=:([A-Za-z0-9+/=]+):\s*$")

log = structlog.get_logger("attested-replay.serve")


class RunPointerBody(WireModel):
    """Body of ``PUT runs/{runId}``."""

    envelope: Sha256Digest


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def _not_found() -> ApiError:
    return ApiError(404, "not found")


@dataclass
class _TenantTree:
    tree: MerkleTree = field(default_factory=MerkleTree)
    lock: threading.Lock = field(default_factory=threading.Lock)


class LogView:
    """In-memory Merkle trees, one per tenant, caught up from storage on each use.

    The log is append-only, so catching up only reads entries past the cached size.
    """

    def __init__(self, storage: Storage, signer: CheckpointSigner, log_name: str) -> None:
        self._storage = storage
        self._signer = signer
        self._log_name = log_name
        self._trees: dict[str, _TenantTree] = {}
        self._trees_lock = threading.Lock()

    def origin(self, tenant: str) -> str:
        return f"{self._log_name}/t/{tenant}"

    def _tenant(self, tenant: str) -> _TenantTree:
        with self._trees_lock:
            return self._trees.setdefault(tenant, _TenantTree())

    def _caught_up(self, tenant: str, state: _TenantTree) -> MerkleTree:
        tree = state.tree
        while True:
            batch = self._storage.log_entries(tenant, tree.size, tree.size + _CATCH_UP_BATCH)
            for entry in batch:
                tree.append_leaf_hash(leaf_hash(entry))
            if len(batch) < _CATCH_UP_BATCH:
                return tree

    def snapshot(self, tenant: str, proof_for: int | None = None) -> dict[str, Any]:
        """The current signed checkpoint and, when asked, an inclusion proof under it."""
        state = self._tenant(tenant)
        with state.lock:
            tree = self._caught_up(tenant, state)
            size = tree.size
            note = self._signer.sign(Checkpoint(self.origin(tenant), size, tree.root(size)))
            result: dict[str, Any] = {"treeSize": size, "checkpoint": note}
            if proof_for is not None:
                result["logIndex"] = proof_for
                result["inclusionProof"] = _b64_list(tree.inclusion_proof(proof_for, size))
            return result

    def with_tree(self, tenant: str) -> tuple[MerkleTree, threading.Lock]:
        state = self._tenant(tenant)
        with state.lock:
            self._caught_up(tenant, state)
        return state.tree, state.lock


def _b64_list(hashes: list[bytes]) -> list[str]:
    return [base64.b64encode(h).decode() for h in hashes]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def identify_request(storage: Storage, request: Request) -> tuple[str, Role]:
    """The (tenant, role) of the request's bearer token; 401 without a known token."""
    token = _bearer(request)
    identity = None if token is None else authenticate(storage, token)
    if identity is None:
        raise ApiError(401, "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
    return identity


def authorize_request(storage: Storage, request: Request, tenant: str, *, write: bool) -> Role:
    """The role of the request's token on ``tenant``'s paths: 401 without a known token, 404
    for another tenant (the answer for a missing object: no existence oracle), 403 for a
    write with a read-only token."""
    token_tenant, role = identify_request(storage, request)
    if token_tenant != tenant or not is_tenant_id(tenant):
        raise _not_found()
    if write and role is not Role.OPERATOR:
        raise ApiError(403, "this token may read, not publish")
    return role


def create_app(
    storage: Storage,
    signer: CheckpointSigner,
    *,
    log_name: str,
    extra_routes: Sequence[BaseRoute] = (),
) -> FastAPI:
    """The publication service for ``storage``, signing checkpoints with ``signer``;
    ``extra_routes``: other features' routers (corpus exports, the trust panel)."""
    app = FastAPI(title="attested-replay publication service", docs_url=None, redoc_url=None)
    logs = LogView(storage, signer, log_name)

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)

    def authorize(request: Request, tenant: str, *, write: bool) -> None:
        authorize_request(storage, request, tenant, write=write)

    async def authorize_async(request: Request, tenant: str, *, write: bool) -> str:
        """Authorize in a worker thread; return the token hash prefix for the audit log."""
        await anyio.to_thread.run_sync(lambda: authorize(request, tenant, write=write))
        return hash_token(_bearer(request) or "")[:12]

    def checked_digest(digest: str) -> str:
        if not is_sha256_digest(digest):
            raise ApiError(400, "the path must name the envelope as sha256:<64 lowercase hex>")
        return digest

    async def read_body(request: Request, limit: int) -> bytes:
        if request.headers.get("content-encoding"):
            raise ApiError(415, "Content-Encoding is not accepted; send the exact bytes")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"body exceeds {limit} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise ApiError(413, f"body exceeds {limit} bytes")
        return bytes(body)

    @app.get("/v1/log/public-key", response_class=PlainTextResponse)
    def public_key() -> str:
        """The log's verifier key. Tenants pin a copy received out of band, not this answer."""
        return signer.verifier_key.encode() + "\n"

    @app.put("/v1/tenants/{tenant}/envelopes/{digest}")
    async def put_envelope(request: Request, tenant: str, digest: str) -> Response:
        token_id = await authorize_async(request, tenant, write=True)
        checked_digest(digest)
        body = await read_body(request, MAX_ENVELOPE_BYTES)
        actual = hashlib.sha256(body).digest()
        match = CONTENT_DIGEST.fullmatch(request.headers.get("content-digest", ""))
        if match is None:
            raise ApiError(400, "Content-Digest: sha-256=:<base64>: is required")
        if match.group(1) != base64.b64encode(actual).decode():
            raise ApiError(422, "Content-Digest does not match the body")
        if digest != format_sha256(actual):
            raise ApiError(422, f"body digest {format_sha256(actual)} does not match the path")
        try:
            envelope = parse_envelope(body)
        except MalformedError as exc:
            raise ApiError(422, f"not a valid envelope: {exc}") from exc
        if envelope.tenant != tenant:
            raise ApiError(422, f"envelope tenant {envelope.tenant!r} is not {tenant!r}")
        entry = LogEntry(tenant=tenant, run_id=envelope.run_id, envelope=digest).to_bytes()

        def store() -> tuple[bool, dict[str, Any]]:
            try:
                result = storage.publish_envelope(tenant, digest, body, entry)
            except DigestCollisionError as exc:
                raise ApiError(500, "stored bytes under this digest differ") from exc
            return result.created, logs.snapshot(tenant, proof_for=result.log_index)

        created, proof = await anyio.to_thread.run_sync(store)
        log.info(
            "envelope_put",
            token=token_id,
            tenant=tenant,
            digest=digest,
            created=created,
            logIndex=proof["logIndex"],
        )
        payload = {"digest": digest, "status": "created" if created else "already-present", **proof}
        if created:
            status = 201
        elif request.headers.get("if-none-match", "").strip() == "*":
            status = 412
        else:
            status = 200
        return JSONResponse(payload, status_code=status, headers={"ETag": f'"{digest}"'})

    @app.put("/v1/tenants/{tenant}/runs/{run_id}")
    async def put_run(request: Request, tenant: str, run_id: str) -> Response:
        await authorize_async(request, tenant, write=True)
        if not is_run_id(run_id):
            raise ApiError(400, f"run id must match {RUN_ID_GRAMMAR}")
        body = await read_body(request, MAX_RUN_BODY_BYTES)
        try:
            pointer = RunPointerBody.model_validate_json(body)
        except ValidationError as exc:
            raise ApiError(
                422, f'body must be {{"envelope": "sha256:<hex>"}}: {exc.errors(include_url=False)}'
            ) from exc

        def store() -> tuple[RunPointer, dict[str, Any]]:
            stored = storage.envelope(tenant, pointer.envelope)
            if stored is None:
                raise ApiError(422, f"envelope {pointer.envelope} is not published for this tenant")
            data, index = stored
            if parse_envelope(data).run_id != run_id:
                raise ApiError(422, f"envelope {pointer.envelope} is not for run {run_id!r}")
            return storage.set_run(tenant, run_id, pointer.envelope), logs.snapshot(
                tenant, proof_for=index
            )

        outcome, proof = await anyio.to_thread.run_sync(store)
        if outcome is RunPointer.CONFLICT:
            raise ApiError(409, f"run {run_id!r} already points to a different envelope")
        payload = {"runId": run_id, "digest": pointer.envelope, "status": outcome.value, **proof}
        return JSONResponse(payload, status_code=201 if outcome is RunPointer.CREATED else 200)

    def envelope_response(data: bytes, digest: str, index: int) -> Response:
        content_digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        return Response(
            data,
            media_type="application/json",
            headers={
                "ETag": f'"{digest}"',
                "Content-Digest": f"sha-256=:{content_digest}:",
                "X-Log-Index": str(index),
                "Cache-Control": "private, max-age=31536000, immutable",
            },
        )

    @app.get("/v1/tenants/{tenant}/envelopes/{digest}")
    def get_envelope(request: Request, tenant: str, digest: str) -> Response:
        authorize(request, tenant, write=False)
        stored = storage.envelope(tenant, checked_digest(digest))
        if stored is None:
            raise _not_found()
        return envelope_response(stored[0], digest, stored[1])

    @app.get("/v1/tenants/{tenant}/runs/{run_id}")
    def get_run(request: Request, tenant: str, run_id: str) -> Response:
        authorize(request, tenant, write=False)
        digest = storage.run_digest(tenant, run_id) if is_run_id(run_id) else None
        stored = None if digest is None else storage.envelope(tenant, digest)
        if digest is None or stored is None:
            raise _not_found()
        return envelope_response(stored[0], digest, stored[1])

    @app.get("/v1/tenants/{tenant}/envelopes")
    def list_envelopes(
        request: Request,
        tenant: str,
        start: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
    ) -> dict[str, Any]:
        authorize(request, tenant, write=False)
        entries = storage.log_entries(tenant, start, start + limit)
        items = []
        for offset, raw in enumerate(entries):
            entry = LogEntry.from_bytes(raw)
            items.append(
                {"logIndex": start + offset, "digest": entry.envelope, "runId": entry.run_id}
            )
        return {"envelopes": items, "next": start + len(items) if len(items) == limit else None}

    @app.get("/v1/tenants/{tenant}/log/checkpoint", response_class=PlainTextResponse)
    def get_checkpoint(request: Request, tenant: str) -> Response:
        authorize(request, tenant, write=False)
        note = logs.snapshot(tenant)["checkpoint"]
        return PlainTextResponse(note, headers={"Cache-Control": "no-store"})

    @app.get("/v1/tenants/{tenant}/log/entries")
    def get_entries(
        request: Request,
        tenant: str,
        start: Annotated[int, Query(ge=0)],
        end: Annotated[int, Query(ge=1)],
    ) -> dict[str, Any]:
        authorize(request, tenant, write=False)
        if end <= start or end - start > MAX_PAGE:
            raise ApiError(400, f"need start < end and at most {MAX_PAGE} entries per page")
        entries = storage.log_entries(tenant, start, end)
        return {
            "start": start,
            "entries": [base64.b64encode(entry).decode() for entry in entries],
        }

    @app.get("/v1/tenants/{tenant}/log/proof/inclusion")
    def get_inclusion(
        request: Request,
        tenant: str,
        index: Annotated[int, Query(ge=0)],
        size: Annotated[int, Query(ge=1)],
    ) -> dict[str, Any]:
        authorize(request, tenant, write=False)
        tree, lock = logs.with_tree(tenant)
        with lock:
            if size > tree.size or index >= size:
                raise ApiError(400, f"need index < size <= {tree.size}")
            proof = tree.inclusion_proof(index, size)
        return {"logIndex": index, "treeSize": size, "hashes": _b64_list(proof)}

    @app.get("/v1/tenants/{tenant}/log/proof/consistency")
    def get_consistency(
        request: Request,
        tenant: str,
        old_size: Annotated[int, Query(alias="from", ge=0)],
        new_size: Annotated[int, Query(alias="to", ge=0)],
    ) -> dict[str, Any]:
        authorize(request, tenant, write=False)
        tree, lock = logs.with_tree(tenant)
        with lock:
            if not old_size <= new_size <= tree.size:
                raise ApiError(400, f"need from <= to <= {tree.size}")
            proof = tree.consistency_proof(old_size, new_size)
        return {"from": old_size, "to": new_size, "hashes": _b64_list(proof)}

    app.router.routes.extend(extra_routes)
    return app
