"""Routes of the trust panel: the static page and the JSON it reads (see the package docstring)."""

from __future__ import annotations

from importlib import resources
from typing import Any, Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from attestation.envelope.model import parse_envelope
from attestation.errors import MalformedError
from attestation.transparency.entries import EntryError, LogEntry
from runner.publish.corpus_store import CorpusStore
from runner.publish.server import ApiError, authorize_request, identify_request
from runner.publish.storage import Storage
from tenant.contract import CONTRACT

#: Runs per page of ``panel/runs``.
MAX_RUNS_PAGE: Final = 100

#: Everything the page loads comes from this origin; nothing may frame it or follow a form.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
_NO_STORE: Final = {"Cache-Control": "no-store"}

_ASSETS: Final = {
    "": ("index.html", "text/html; charset=utf-8"),
    "panel.js": ("panel.js", "text/javascript; charset=utf-8"),
    "panel.css": ("panel.css", "text/css; charset=utf-8"),
    "favicon.svg": ("favicon.svg", "image/svg+xml"),
}


def _asset(name: str) -> bytes:
    return (resources.files("runner.publish.panel") / "static" / name).read_bytes()


def _query_int(request: Request, name: str, *, default: int, maximum: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit() or int(text) > maximum:
        raise ApiError(400, f"query parameter {name!r} must be an integer from 0 to {maximum}")
    return int(text)


def _run_json(entry: LogEntry, index: int, data: bytes | None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "logIndex": index,
        "runId": entry.run_id,
        "digest": entry.envelope,
        # The storage keeps no publication time yet: the page says "not recorded".
        "publishedAt": None,
    }
    if data is None:
        return {**run, "problem": "the envelope this entry names is not stored"}
    try:
        envelope = parse_envelope(data)
    except MalformedError as exc:
        return {**run, "problem": f"the stored envelope does not parse: {exc}"}
    binding = envelope.binding
    return {
        **run,
        "platform": envelope.platform,
        "corpusChecksum": binding.corpus_checksum,
        "evaluationDigest": binding.evaluation_digest,
        "resultDigest": binding.result_digest,
    }


def panel_routes(storage: Storage, store: CorpusStore) -> list[BaseRoute]:
    """The page, its assets and its JSON, authorizing with ``storage``'s tokens."""
    assets = {path: (_asset(name), media) for path, (name, media) in _ASSETS.items()}

    async def page(request: Request) -> Response:
        found = assets.get(str(request.path_params.get("name", "")))
        if found is None:
            raise ApiError(404, "not found")
        body, media = found
        return Response(body, media_type=media, headers=SECURITY_HEADERS)

    async def to_page(_request: Request) -> Response:
        return RedirectResponse("/panel/", status_code=308)

    async def contract(_request: Request) -> Response:
        return JSONResponse(CONTRACT.to_json_dict())

    async def whoami(request: Request) -> Response:
        tenant, role = await anyio.to_thread.run_sync(lambda: identify_request(storage, request))
        return JSONResponse({"tenant": tenant, "role": role.value}, headers=_NO_STORE)

    def runs_page(tenant: str, start: int, limit: int) -> dict[str, Any]:
        exports: dict[str, str] = {}
        for export in store.list(tenant):  # oldest first: the newest export of a corpus wins
            exports[export.corpus_checksum] = export.digest
        runs = []
        for offset, raw in enumerate(storage.log_entries(tenant, start, start + limit)):
            try:
                entry = LogEntry.from_bytes(raw)
            except EntryError as exc:
                runs.append({"logIndex": start + offset, "problem": f"malformed entry: {exc}"})
                continue
            stored = storage.envelope(tenant, entry.envelope)
            run = _run_json(entry, start + offset, None if stored is None else stored[0])
            run["corpusExport"] = exports.get(run.get("corpusChecksum", ""))
            runs.append(run)
        return {"runs": runs, "next": start + limit if len(runs) == limit else None}

    async def runs(request: Request) -> Response:
        tenant = str(request.path_params["tenant"])
        await anyio.to_thread.run_sync(
            lambda: authorize_request(storage, request, tenant, write=False)
        )
        start = _query_int(request, "start", default=0, maximum=2**62)
        limit = _query_int(request, "limit", default=MAX_RUNS_PAGE, maximum=MAX_RUNS_PAGE)
        if limit == 0:
            raise ApiError(400, "query parameter 'limit' must be at least 1")
        body = await anyio.to_thread.run_sync(lambda: runs_page(tenant, start, limit))
        return JSONResponse(body, headers=_NO_STORE)

    return [
        Route("/panel", to_page, methods=["GET"]),
        Route("/panel/", page, methods=["GET"]),
        Route("/panel/{name}", page, methods=["GET"]),
        Route("/v1/contract", contract, methods=["GET"]),
        Route("/v1/whoami", whoami, methods=["GET"]),
        Route("/v1/tenants/{tenant}/panel/runs", runs, methods=["GET"]),
    ]
