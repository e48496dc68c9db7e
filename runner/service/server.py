"""The publication service as an ASGI app (Starlette), one router per concern.

``docs/publishing.md`` is the API reference. Every route under ``/v1/tenants/{tenant}`` needs a
bearer token of that tenant; a token of another tenant gets the same 404 as a missing object,
so the API is no existence oracle. Routers: :func:`publish_routes` (the PUTs),
:func:`read_routes` (envelopes, runs, the listing), :func:`log_routes` (checkpoint, entries,
their envelopes in bundles, proofs) and :func:`meta_routes` (public key, health). Other
features (corpus exports, the trust panel) mount their own routes through :func:`create_app`
and authorize with :meth:`Service.authorize` and :meth:`Service.identify`.

Every error is JSON ``{"error": <message>, "reason": <code>}``: storage faults are 507 (full)
or 503 (unavailable, with ``Retry-After``), a refused log 503 without ``Retry-After`` (an
operator has to act).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, Protocol

import orjson
import psycopg
import structlog
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.datastructures import Address
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

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
from attestation.envelope.merged import AnyEnvelope, parse_any_envelope
from attestation.errors import MalformedError
from attestation.transparency.entries import LogEntry
from attestation.transparency.tiles import (
    TILE_WIDTH,
    TilePathError,
    encode_bundle,
    parse_tile_path,
)
from runner.service.bundles import read_bundle
from runner.service.guard import QuietLog
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.sequencer import (
    AppendRequest,
    Log,
    LogRefusedError,
    Outcome,
    ProofRangeError,
    Receipt,
)
from runner.service.log.shard_sets import PartShape, part_shape
from runner.service.log.storage import (
    WHOLE_RUN,
    DigestCollisionError,
    Role,
    Storage,
    StorageError,
    StorageFullError,
    StorageUnavailableError,
    classify_database_error,
)
from runner.service.ratelimit import RateLimiter
from runner.service.tokens import TokenCache, hash_token, token_id
from runner.service.witnesses import WitnessSubmitter

MAX_RUN_BODY_BYTES: Final = 4096
MAX_PAGE: Final = 1000
#: The largest integer a query parameter may carry (SQLite's and PostgreSQL's BIGINT).
MAX_QUERY_INTEGER: Final = 2**63 - 1
#: What a client waits before retrying a store that is unavailable for now.
RETRY_AFTER_SECONDS: Final = 5
CONTENT_DIGEST: Final = re.compile(r"^\s*sha-256=:([A-Za-z0-9+/=]+):\s*$")

log = structlog.get_logger("attested-replay.serve")


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        reason: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.headers = dict(headers or {})


def _answer_body(payload: object) -> bytes:
    """The bytes of every JSON answer: compact UTF-8 with sorted keys, the form a client's
    strict parser reads in C (``attestation.encoding.json_document``). What orjson cannot
    encode (a lone surrogate of a percent-decoded path in an error message, an integer beyond
    64 bits) is written by ``json.dumps`` in the same form, with ``\\u`` escapes."""
    try:
        return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def json_response(
    payload: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        _answer_body(payload), status_code=status, media_type="application/json", headers=headers
    )


def not_found() -> ApiError:
    return ApiError(404, "not found", reason="not-found")


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, reason="bad-request")


class RunPointerBody(WireModel):
    """Body of ``PUT runs/{runId}``."""

    envelope: Sha256Digest


class Caller(Protocol):
    """What authorization reads of a request: a Starlette :class:`Request`, or the envelope
    PUT's :class:`PutRequest`."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def client(self) -> Address | None: ...


class BodyRequest(Caller, Protocol):
    """A request whose body :func:`read_body` reads."""

    def stream(self) -> AsyncIterator[bytes]: ...


@dataclass(frozen=True, slots=True)
class PutRequest:
    """The envelope PUT as :class:`PublicationApp` hands it to :func:`publish`: the
    ASGI scope's headers in a dict (names lower-case, as ASGI gives them; the first of a
    repeated header wins, as with Starlette's ``Headers.get``) and the body from ``receive``.

    Why not a Starlette ``Request``: its header mapping, body stream and response object cost
    the server as much CPU per publish as uvicorn's own handling of the request."""

    path_params: dict[str, str]
    headers: dict[str, str]
    client: Address | None
    receive: Receive

    @classmethod
    def of(cls, scope: Scope, receive: Receive, tenant: str, digest: str) -> PutRequest:
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        client = scope.get("client")
        return cls(
            {"tenant": tenant, "digest": digest},
            headers,
            None if client is None else Address(*client),
            receive,
        )

    async def stream(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive (ASGI ``http.request`` messages).

        Raises:
            ClientDisconnect: the client left before the body was complete.
        """
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect
            chunk: bytes = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """A successful JSON answer, rendered by whichever app sent the request (Starlette's
    ``Response`` for routed requests, raw ASGI messages for :class:`PublicationApp`)."""

    payload: dict[str, Any]
    status: int
    headers: dict[str, str]

    def response(self) -> Response:
        return json_response(self.payload, self.status, self.headers)

    async def send(self, send: Send) -> None:
        body = _answer_body(self.payload)
        raw = [
            (name.lower().encode("latin-1"), v.encode("latin-1"))
            for name, v in self.headers.items()
        ]
        raw += [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]
        await send({"type": "http.response.start", "status": self.status, "headers": raw})
        await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True, slots=True)
class Identity:
    tenant: str
    role: Role
    token_id: str  # the token's id (first hex digits of its hash), for the audit log


class Service:
    """What every router needs: storage, the log, authorization and rate limits.

    ``owns_storage``: :meth:`stop` closes the storage (``serve``); tests keep theirs open.
    """

    def __init__(
        self,
        storage: Storage,
        signer: CheckpointSigner,
        publication_log: Log,
        *,
        rate_limiter: RateLimiter | None = None,
        failure_limiter: RateLimiter | None = None,
        owns_storage: bool = False,
    ) -> None:
        self.storage = storage
        self.signer = signer
        self.log = publication_log
        self._tokens = TokenCache(storage)
        self._rate = rate_limiter
        self._failures = failure_limiter
        self._owns_storage = owns_storage
        self._started = False
        self.receipts: _Receipts | None = None  # of the loop that serves (made on first use)
        #: Submits new checkpoints to witnesses and keeps the cosigned ones (serve --witness).
        self.witnesses: WitnessSubmitter | None = None

    def start(self) -> None:
        """Check the logs and start sequencing (once; later calls do nothing)."""
        if not self._started:
            self.log.start()
            self._started = True

    def stop(self) -> None:
        """Integrate what is queued, stop sequencing and, when owned, close the storage."""
        if self._started:
            self.log.stop()
            self._started = False
        if self._owns_storage:
            self.storage.close()

    async def identify(self, request: Caller) -> Identity:
        """The caller's token: 401 without a valid one, 429 over the rate limit."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        record = None
        if scheme.lower() == "bearer" and token:
            token_hash = hash_token(token)
            record = self._tokens.cached(token_hash)
            if record is None:
                record = await asyncio.to_thread(self._tokens.lookup, token_hash)
        if record is None:
            address = request.client.host if request.client else "unknown"
            self._limit(self._failures, f"address:{address}", "failed authentications")
            raise ApiError(
                401,
                "a valid bearer token is required",
                reason="unauthenticated",
                headers={"WWW-Authenticate": "Bearer"},
            )
        self._limit(self._rate, record.token_hash, "requests with this token")
        return Identity(record.tenant, record.role, token_id(record.token_hash))

    async def authorize(self, request: Caller, tenant: str, *, write: bool) -> Identity:
        """The caller's identity on ``tenant``'s paths: 401 without a valid token, 404 for
        another tenant (the answer for a missing object: no existence oracle), 403 for a
        write with a read-only token, 429 over the rate limit."""
        identity = await self.identify(request)
        if identity.tenant != tenant or not is_tenant_id(tenant):
            raise not_found()
        if write and identity.role is not Role.OPERATOR:
            raise ApiError(403, "this token may read, not publish", reason="forbidden")
        return identity

    @staticmethod
    def _limit(limiter: RateLimiter | None, key: str, what: str) -> None:
        if limiter is None:
            return
        wait = limiter.acquire(key)
        if wait > 0:
            raise ApiError(
                429,
                f"too many {what}: at most {limiter.rate.per_second:g} per second",
                reason="rate-limited",
                headers={"Retry-After": str(max(1, round(wait)))},
            )


Handler = Callable[[Request], Awaitable[Response]]


def _bound(handler: Callable[[Service, Request], Awaitable[Response]], service: Service) -> Handler:
    async def endpoint(request: Request) -> Response:
        return await handler(service, request)

    return endpoint


def query_int(
    request: Request,
    name: str,
    *,
    default: int | None = None,
    minimum: int = 0,
    maximum: int = MAX_QUERY_INTEGER,
) -> int:
    """An integer query parameter within [minimum, maximum]; 400 naming it otherwise."""
    text = request.query_params.get(name)
    if text is None:
        if default is None:
            raise bad_request(f"query parameter {name!r} is required")
        return default
    if not (text.isascii() and text.isdigit()) or not minimum <= int(text) <= maximum:
        raise bad_request(
            f"query parameter {name!r} must be an integer from {minimum} to {maximum}"
        )
    return int(text)


async def read_body(request: BodyRequest, limit: int) -> bytes:
    """The request body, refused (413) as soon as it exceeds ``limit`` bytes."""
    if request.headers.get("content-encoding"):
        raise ApiError(
            415, "Content-Encoding is not accepted; send the exact bytes", reason="encoding"
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"body exceeds {limit} bytes", reason="too-large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"body exceeds {limit} bytes", reason="too-large")
    return bytes(body)


def _b64(hashes: Sequence[bytes]) -> list[str]:
    return [base64.b64encode(h).decode() for h in hashes]


def _checked_digest(digest: str, what: str = "envelope") -> str:
    if not is_sha256_digest(digest):
        raise bad_request(f"the path must name the {what} as sha256:<64 lowercase hex>")
    return digest


def _checked_run_id(run_id: str) -> str:
    if not is_run_id(run_id):
        raise bad_request(f"run id {run_id[:140]!r} must match {RUN_ID_GRAMMAR}")
    return run_id


# -- publishing -----------------------------------------------------------------------------


def envelope_part(data: bytes, tenant: str) -> tuple[str, PartShape]:
    """The run ID and run part an envelope's bytes stand for (422 when they are no envelope
    of ``tenant``): a shard envelope is its shard's part, an unsharded or merged envelope
    the whole run's."""
    envelope = _tenant_envelope(data, tenant)
    return envelope.run_id, part_shape(envelope)


def _tenant_envelope(data: bytes, tenant: str) -> AnyEnvelope:
    """The envelope of ``tenant`` in ``data`` (422 when it is none)."""
    try:
        envelope = parse_any_envelope(data)
    except MalformedError as exc:
        raise ApiError(422, f"not a valid envelope: {exc}", reason="invalid-envelope") from exc
    if envelope.tenant != tenant:
        raise ApiError(
            422,
            f"envelope tenant {envelope.tenant!r} is not {tenant!r}",
            reason="invalid-envelope",
        )
    return envelope


def _receipt_json(receipt: Receipt, digest: str, run_id: str, part: str) -> dict[str, Any]:
    assert receipt.head is not None
    assert receipt.log_index is not None
    payload: dict[str, Any] = {
        "digest": digest,
        "runId": run_id,
        "status": receipt.outcome.value,
        "logIndex": receipt.log_index,
        "treeSize": receipt.head.size,
        "checkpoint": receipt.head.note,
        "inclusionProof": _b64(receipt.inclusion_proof),
    }
    if part != WHOLE_RUN:
        payload["shard"] = int(part)
    return payload


async def _add_cosigned(service: Service, tenant: str, payload: dict[str, Any]) -> None:
    """Add to a receipt the latest checkpoint witnesses cosigned, when its tree holds the
    entry: ``"cosigned": {"treeSize", "checkpoint", "inclusionProof"}``. Cosignatures come
    after publication (``serve --witness``), so a new entry's receipt rarely has one."""
    witnessed = None if service.witnesses is None else service.witnesses.cosigned_head(tenant)
    if witnessed is None or witnessed[0] <= payload["logIndex"]:
        return
    size, note = witnessed
    try:
        proof = await asyncio.to_thread(
            service.log.inclusion_proof, tenant, payload["logIndex"], size
        )
    except ProofRangeError:  # never a failed publication: the receipt goes without it
        return
    payload["cosigned"] = {"treeSize": size, "checkpoint": note, "inclusionProof": _b64(proof)}


def _conflict(run_id: str, part: str, pointed: str | None) -> ApiError:
    what = f"run {run_id!r}" if part == WHOLE_RUN else f"shard {part} of run {run_id!r}"
    return ApiError(
        409,
        f"{what} already points to {pointed}; this envelope was not logged",
        reason="run-conflict",
    )


class _Receipts:
    """Hands the sequencer's receipts to the event loop, one wake-up per batch.

    ``asyncio.wrap_future`` schedules each future's result on the loop separately (a write to
    the loop's self-pipe and a callback each); the sequencer resolves a whole batch at once,
    so the receipts that arrive together are handed over together. A request that is no
    longer waited for is skipped: its envelope is integrated all the same.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._ready: list[tuple[asyncio.Future[Receipt], Future[Receipt]]] = []
        self._lock = threading.Lock()

    def watch(self, submitted: Future[Receipt]) -> asyncio.Future[Receipt]:
        waiting: asyncio.Future[Receipt] = self.loop.create_future()
        submitted.add_done_callback(lambda done: self._arrived(waiting, done))
        return waiting

    def _arrived(self, waiting: asyncio.Future[Receipt], done: Future[Receipt]) -> None:
        with self._lock:
            self._ready.append((waiting, done))
            first = len(self._ready) == 1
        if first:
            self.loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for waiting, done in ready:
            if waiting.done():
                continue
            error = done.exception()
            if error is not None:
                waiting.set_exception(error)
            else:
                waiting.set_result(done.result())


async def _integrate(service: Service, request: AppendRequest) -> Receipt:
    loop = asyncio.get_running_loop()
    receipts = service.receipts
    if receipts is None or receipts.loop is not loop:
        receipts = service.receipts = _Receipts(loop)
    try:
        return await receipts.watch(service.log.submit(request))
    except DigestCollisionError as exc:
        raise ApiError(500, str(exc), reason="corrupt") from exc


async def put_envelope(service: Service, request: Request) -> Response:
    """``PUT envelopes/{digest}`` as a routed request (:class:`PublicationApp` calls
    :func:`publish` directly)."""
    tenant, digest = request.path_params["tenant"], request.path_params["digest"]
    answer = await publish(service, request, tenant, digest)
    return answer.response()


async def publish(service: Service, request: BodyRequest, tenant: str, digest: str) -> JsonAnswer:
    """Log the envelope in the request's body: its receipt, 201 when it was created, 200
    (or 412 with ``If-None-Match: *``) when it was there already; :class:`ApiError` else."""
    identity = await service.authorize(request, tenant, write=True)
    _checked_digest(digest)
    body = await read_body(request, MAX_ENVELOPE_BYTES)
    actual = hashlib.sha256(body).digest()
    match = CONTENT_DIGEST.fullmatch(request.headers.get("content-digest", ""))
    if match is None:
        raise bad_request("Content-Digest: sha-256=:<base64>: is required")
    if match.group(1) != base64.b64encode(actual).decode():
        raise ApiError(422, "Content-Digest does not match the body", reason="digest-mismatch")
    if digest != (body_digest := format_sha256(actual)):
        raise ApiError(
            422, f"body digest {body_digest} does not match the path", reason="digest-mismatch"
        )
    run_id, shape = envelope_part(body, tenant)
    part = shape.part
    entry = LogEntry(tenant=tenant, run_id=run_id, envelope=digest).to_bytes()
    receipt = await _integrate(service, AppendRequest(tenant, digest, body, run_id, shape, entry))
    log.info(
        "envelope_put",
        token=identity.token_id,
        tenant=tenant,
        digest=digest,
        runId=run_id,
        outcome=receipt.outcome.value,
        logIndex=receipt.log_index,
    )
    if receipt.outcome is Outcome.RUN_CONFLICT:
        raise _conflict(run_id, part, receipt.run_digest)
    if receipt.outcome is Outcome.SHARD_SET_CONFLICT:
        raise ApiError(409, f"{receipt.conflict}; it was not logged", reason="shard-set-conflict")
    if receipt.outcome is Outcome.CREATED:
        status = 201
    elif request.headers.get("if-none-match", "").strip() == "*":
        status = 412
    else:
        status = 200
    payload = _receipt_json(receipt, digest, run_id, part)
    await _add_cosigned(service, tenant, payload)
    return JsonAnswer(payload, status, {"ETag": f'"{digest}"'})


async def put_run(service: Service, request: Request) -> Response:
    """For publishers that still send the run pointer separately: the envelope PUT already
    set it, so this confirms it (200), refuses another envelope (409) or sets one that an
    older service left unset (201)."""
    tenant, run_id = request.path_params["tenant"], request.path_params["run_id"]
    await service.authorize(request, tenant, write=True)
    _checked_run_id(run_id)
    body = await read_body(request, MAX_RUN_BODY_BYTES)
    try:
        digest = RunPointerBody.model_validate_json(body).envelope
    except ValidationError as exc:
        raise ApiError(
            422, 'body must be {"envelope": "sha256:<64 hex>"}', reason="bad-pointer"
        ) from exc
    stored = await asyncio.to_thread(service.storage.envelope, tenant, digest)
    if stored is None:
        raise ApiError(
            422, f"envelope {digest} is not published for this tenant", reason="not-published"
        )
    envelope_run, shape = envelope_part(stored[0], tenant)
    part = shape.part
    if envelope_run != run_id:
        raise ApiError(422, f"envelope {digest} is not for run {run_id!r}", reason="wrong-run")
    entry = LogEntry(tenant=tenant, run_id=run_id, envelope=digest).to_bytes()
    previous = await asyncio.to_thread(service.storage.run_digest, tenant, run_id, part)
    receipt = await _integrate(
        service, AppendRequest(tenant, digest, stored[0], run_id, shape, entry)
    )
    if receipt.outcome is Outcome.RUN_CONFLICT:
        raise _conflict(run_id, part, receipt.run_digest)
    payload = _receipt_json(receipt, digest, run_id, part)
    await _add_cosigned(service, tenant, payload)
    payload["status"] = "unchanged" if previous == digest else "created"
    return json_response(payload, 200 if previous == digest else 201)


def publish_routes(service: Service) -> list[BaseRoute]:
    return [
        Route(
            "/v1/tenants/{tenant}/envelopes/{digest}",
            _bound(put_envelope, service),
            methods=["PUT"],
        ),
        Route("/v1/tenants/{tenant}/runs/{run_id}", _bound(put_run, service), methods=["PUT"]),
    ]


# -- reading envelopes ----------------------------------------------------------------------


def _envelope_response(data: bytes, digest: str, index: int) -> Response:
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


async def get_envelope(service: Service, request: Request) -> Response:
    tenant, digest = request.path_params["tenant"], request.path_params["digest"]
    await service.authorize(request, tenant, write=False)
    stored = await asyncio.to_thread(service.storage.envelope, tenant, _checked_digest(digest))
    if stored is None:
        raise not_found()
    return _envelope_response(stored[0], digest, stored[1])


async def _run_envelope(service: Service, request: Request, part: str) -> Response:
    tenant, run_id = request.path_params["tenant"], request.path_params["run_id"]
    await service.authorize(request, tenant, write=False)
    if not is_run_id(run_id):
        raise not_found()

    def lookup() -> tuple[str, tuple[bytes, int]] | None:
        digest = service.storage.run_digest(tenant, run_id, part)
        stored = None if digest is None else service.storage.envelope(tenant, digest)
        return None if digest is None or stored is None else (digest, stored)

    found = await asyncio.to_thread(lookup)
    if found is None:
        raise not_found()
    digest, (data, index) = found
    return _envelope_response(data, digest, index)


async def get_run(service: Service, request: Request) -> Response:
    return await _run_envelope(service, request, WHOLE_RUN)


async def get_shard(service: Service, request: Request) -> Response:
    shard = request.path_params["shard"]
    if not (shard.isascii() and shard.isdigit()) or len(shard) > 4:
        raise not_found()
    return await _run_envelope(service, request, str(int(shard)))


async def list_shards(service: Service, request: Request) -> Response:
    """The shard indices of a run that have an envelope: ``{"shards": [0, 2, ...]}``."""
    tenant, run_id = request.path_params["tenant"], request.path_params["run_id"]
    await service.authorize(request, tenant, write=False)
    if not is_run_id(run_id):
        raise not_found()
    shards = await asyncio.to_thread(service.storage.run_shards, tenant, run_id)
    return json_response({"shards": shards}, headers={"Cache-Control": "no-store"})


async def list_envelopes(service: Service, request: Request) -> Response:
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)
    start = query_int(request, "start", default=0)
    limit = query_int(request, "limit", default=MAX_PAGE, minimum=1, maximum=MAX_PAGE)

    def read() -> list[dict[str, Any]]:
        signed = service.log.signed_head(tenant).size
        items = []
        for row in service.storage.listing(tenant, start, min(limit, max(signed - start, 0))):
            entry = LogEntry.from_bytes(row.entry)
            items.append(
                {
                    "logIndex": row.log_index,
                    "digest": entry.envelope,
                    "runId": entry.run_id,
                    "publishedAt": row.published_at,
                }
            )
        return items

    items = await asyncio.to_thread(read)
    return json_response(
        {"envelopes": items, "next": start + len(items) if len(items) == limit else None}
    )


def read_routes(service: Service) -> list[BaseRoute]:
    return [
        Route(
            "/v1/tenants/{tenant}/envelopes/{digest}",
            _bound(get_envelope, service),
            methods=["GET"],
        ),
        Route("/v1/tenants/{tenant}/runs/{run_id}", _bound(get_run, service), methods=["GET"]),
        Route(
            "/v1/tenants/{tenant}/runs/{run_id}/shards",
            _bound(list_shards, service),
            methods=["GET"],
        ),
        Route(
            "/v1/tenants/{tenant}/runs/{run_id}/shards/{shard}",
            _bound(get_shard, service),
            methods=["GET"],
        ),
        Route("/v1/tenants/{tenant}/envelopes", _bound(list_envelopes, service), methods=["GET"]),
    ]


# -- the log --------------------------------------------------------------------------------


async def get_checkpoint(service: Service, request: Request) -> Response:
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)

    def note() -> str:
        return service.log.signed_head(tenant).note

    return Response(
        await asyncio.to_thread(note),
        media_type="text/plain; charset=utf-8",
        headers={"Cache-Control": "no-store"},
    )


async def get_cosigned_checkpoint(service: Service, request: Request) -> Response:
    """The latest checkpoint that witnesses cosigned, with their cosignatures (404 when the
    service has no witness, or none cosigned this log yet)."""
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)
    note = None if service.witnesses is None else service.witnesses.cosigned(tenant)
    if note is None:
        raise ApiError(
            404,
            "no checkpoint of this log has been cosigned by a witness yet",
            reason="not-cosigned",
        )
    return Response(
        note, media_type="text/plain; charset=utf-8", headers={"Cache-Control": "no-store"}
    )


async def get_entries(service: Service, request: Request) -> Response:
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)
    start, end = query_int(request, "start"), query_int(request, "end", minimum=1)
    if end <= start or end - start > MAX_PAGE:
        raise bad_request(f"need start < end and at most {MAX_PAGE} entries per page")

    def read() -> list[bytes]:
        # Entries past the signed head are not served: unprovable.
        signed = service.log.signed_head(tenant).size
        return service.storage.log_entries(tenant, start, min(end, signed))

    entries = await asyncio.to_thread(read)
    return json_response({"start": start, "entries": _b64(entries)})


async def get_entry_envelopes(service: Service, request: Request) -> Response:
    """The envelopes of entries ``start`` to ``end - 1`` in log order, base64 (null for one
    that is not stored), bounded by :func:`runner.service.bundles.read_bundle`."""
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)
    start, end = query_int(request, "start"), query_int(request, "end", minimum=1)
    if end <= start or end - start > MAX_PAGE:
        raise bad_request(f"need start < end and at most {MAX_PAGE} entries per page")

    def read() -> list[bytes | None]:
        # Entries past the signed head are not served: unprovable.
        signed = service.log.signed_head(tenant).size
        return read_bundle(service.storage, tenant, start, min(end, signed))

    bundle = await asyncio.to_thread(read)
    encoded = [None if data is None else base64.b64encode(data).decode() for data in bundle]
    return json_response({"start": start, "envelopes": encoded})


async def get_inclusion(service: Service, request: Request) -> Response:
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)
    index, size = query_int(request, "index"), query_int(request, "size", minimum=1)

    def prove() -> list[bytes]:
        try:
            return service.log.inclusion_proof(tenant, index, size)
        except ProofRangeError as exc:
            raise bad_request(f"need index < size <= {exc.head_size}") from exc

    proof = await asyncio.to_thread(prove)
    return json_response({"logIndex": index, "treeSize": size, "hashes": _b64(proof)})


async def get_consistency(service: Service, request: Request) -> Response:
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)
    old_size, new_size = query_int(request, "from"), query_int(request, "to")

    def prove() -> list[bytes]:
        try:
            return service.log.consistency_proof(tenant, old_size, new_size)
        except ProofRangeError as exc:
            raise bad_request(f"need from <= to <= {exc.head_size}") from exc

    proof = await asyncio.to_thread(prove)
    return json_response({"from": old_size, "to": new_size, "hashes": _b64(proof)})


async def get_tile(service: Service, request: Request) -> Response:
    """A C2SP tlog-tiles hash tile or entry bundle of the tree the signed head signs (404 for
    one that tree does not hold in full at that width); the log's checkpoint is
    ``tlog/checkpoint``."""
    tenant = request.path_params["tenant"]
    await service.authorize(request, tenant, write=False)
    try:
        address = parse_tile_path(request.path_params["path"])
    except TilePathError as exc:
        raise ApiError(404, str(exc), reason="not-found") from exc

    def read() -> bytes:
        if address.level is not None:
            try:
                hashes = service.log.tile(tenant, address.level, address.index, address.width)
            except ProofRangeError as exc:
                raise not_found() from exc
            return b"".join(hashes)
        start = TILE_WIDTH * address.index
        if start + address.width > service.log.signed_head(tenant).size:
            raise not_found()
        return encode_bundle(service.storage.log_entries(tenant, start, start + address.width))

    return Response(
        await asyncio.to_thread(read),
        media_type="application/octet-stream",
        # A full tile never changes; a partial one is replaced by a wider one as the log grows.
        headers={"Cache-Control": "no-store" if address.width < TILE_WIDTH else "max-age=3600"},
    )


def log_routes(service: Service) -> list[BaseRoute]:
    base = "/v1/tenants/{tenant}/log"
    tiles = "/v1/tenants/{tenant}/tlog"
    return [
        Route(f"{tiles}/checkpoint", _bound(get_checkpoint, service), methods=["GET"]),
        Route(tiles + "/tile/{path:path}", _bound(get_tile, service), methods=["GET"]),
        Route(f"{base}/checkpoint", _bound(get_checkpoint, service), methods=["GET"]),
        Route(
            f"{base}/checkpoint/cosigned",
            _bound(get_cosigned_checkpoint, service),
            methods=["GET"],
        ),
        Route(f"{base}/entries", _bound(get_entries, service), methods=["GET"]),
        Route(f"{base}/envelopes", _bound(get_entry_envelopes, service), methods=["GET"]),
        Route(f"{base}/proof/inclusion", _bound(get_inclusion, service), methods=["GET"]),
        Route(f"{base}/proof/consistency", _bound(get_consistency, service), methods=["GET"]),
    ]


# -- meta -----------------------------------------------------------------------------------


async def public_key(service: Service, _request: Request) -> Response:
    """The log's verifier key. Tenants pin a copy received out of band, not this answer."""
    return Response(
        service.signer.verifier_key.encode() + "\n", media_type="text/plain; charset=utf-8"
    )


async def health(service: Service, _request: Request) -> Response:
    """Readiness, without naming tenants: 200 while every log is served, else 503."""
    refused = len(service.log.refusals())
    if refused:
        return json_response(
            {"status": "refusing", "refusedLogs": refused, "reason": "log-refused"}, 503
        )
    return json_response({"status": "ok"}, headers={"Cache-Control": "no-store"})


def meta_routes(service: Service) -> list[BaseRoute]:
    return [
        Route("/v1/log/public-key", _bound(public_key, service), methods=["GET"]),
        Route("/v1/health", _bound(health, service), methods=["GET"]),
    ]


# -- errors and the app ---------------------------------------------------------------------


def error_response(exc: BaseException) -> Response | None:
    """The JSON answer for an exception of the service's own kinds, or None."""
    if isinstance(exc, ApiError):
        return json_response({"error": exc.message, "reason": exc.reason}, exc.status, exc.headers)
    if isinstance(exc, LogRefusedError):
        return json_response({"error": str(exc), "reason": "log-refused"}, 503)
    fault: StorageError | None = exc if isinstance(exc, StorageError) else None
    if fault is None:
        fault = classify_database_error(exc)
    if isinstance(fault, StorageFullError):
        return json_response(
            {"error": f"nothing was stored: {fault}", "reason": "storage-full"}, 507
        )
    if isinstance(fault, StorageUnavailableError):
        return json_response(
            {"error": f"nothing was stored: {fault}", "reason": "storage-unavailable"},
            503,
            {"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    return None


#: Storage faults are logged once per message and interval: a full disk under load must not
#: fill the rest of the disk with log lines. (A refused log is logged once, when refused.)
_FAULTS: Final = QuietLog(interval=30.0)


async def _service_error(_request: Request, exc: Exception) -> Response:
    found = error_response(exc)
    if found is not None:
        if found.status_code in (503, 507) and not isinstance(exc, LogRefusedError | ApiError):
            suppressed = _FAULTS.admit(str(exc))
            if suppressed is not None:
                log.warning(
                    "storage_fault",
                    status=found.status_code,
                    error=str(exc),
                    suppressed_since_last=suppressed,
                )
        return found
    log.error("internal_error", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
    return json_response({"error": "internal error", "reason": "internal"}, 500)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return json_response({"error": "not found", "reason": "not-found"}, 404)
    return json_response({"error": str(exc.detail), "reason": "http"}, exc.status_code, exc.headers)


async def _client_gone(_request: Request, _exc: Exception) -> Response:
    return _client_left()


def _client_left() -> Response:
    return Response(status_code=400)  # nobody reads it: the client left in the middle


#: The hot route, ``PUT /v1/tenants/{tenant}/envelopes/{digest}``, as Starlette's router
#: matches it (each parameter one non-empty path segment).
_PUT_ENVELOPE_PATH: Final = re.compile(r"/v1/tenants/([^/]+)/envelopes/([^/]+)")


class PublicationApp:
    """The ASGI app: ``PUT`` of an envelope goes straight to :func:`publish` (read through
    :class:`PutRequest`, answered through :class:`JsonAnswer`), everything else (and the
    lifespan) through the Starlette app.

    Why: at hundreds of publishes a second, Starlette's middleware stack and the match of
    every route cost the server as much CPU as the rest of the request's framework, and its
    request and response objects as much again. The envelope PUT gets the same handler as the
    routed :func:`put_envelope`, the same exception handling (:func:`_service_error`, 400 for
    a client that left) and the same path rule (``{tenant}`` and ``{digest}`` are single
    non-empty path segments), without them.
    """

    def __init__(self, service: Service, starlette: Starlette) -> None:
        self.service = service
        self.starlette = starlette

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "PUT":
            match = _PUT_ENVELOPE_PATH.fullmatch(scope["path"])
            if match is not None:
                await self._put_envelope(scope, receive, send, match[1], match[2])
                return
        await self.starlette(scope, receive, send)

    async def _put_envelope(
        self, scope: Scope, receive: Receive, send: Send, tenant: str, digest: str
    ) -> None:
        request = PutRequest.of(scope, receive, tenant, digest)
        try:
            answer = await publish(self.service, request, tenant, digest)
        except ClientDisconnect:
            response = _client_left()
        except Exception as exc:  # noqa: BLE001 - every exception is answered, as by Starlette
            scope["path_params"] = request.path_params
            response = await _service_error(Request(scope, receive), exc)
        else:
            await answer.send(send)
            return
        await response(scope, receive, send)


def create_app(service: Service, *, extra_routes: Sequence[BaseRoute] = ()) -> PublicationApp:
    """The publication service; ``extra_routes``: other features' routers. The app's lifespan
    starts the service (the fork guard's check of every log) and stops it."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(service.start)
        try:
            yield
        finally:
            await asyncio.to_thread(service.stop)

    routes = [
        *meta_routes(service),
        *publish_routes(service),
        *read_routes(service),
        *log_routes(service),
        *extra_routes,
    ]
    starlette = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            HTTPException: _http_error,
            ClientDisconnect: _client_gone,
            # The service's own failures and the database drivers' faults; anything else is a
            # bug, answered 500 by the same handler (and logged by the server).
            ApiError: _service_error,
            LogRefusedError: _service_error,
            StorageError: _service_error,
            sqlite3.Error: _service_error,
            psycopg.Error: _service_error,
            Exception: _service_error,
        },
    )
    return PublicationApp(service, starlette)
