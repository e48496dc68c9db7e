"""Routes of the trust panel: the static page and the JSON it reads (see the package docstring)."""

from __future__ import annotations

from importlib import resources
from typing import Any, Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from attestation.envelope.merged import MergedEnvelope, parse_any_envelope
from attestation.errors import MalformedError
from attestation.tenant.contract import CONTRACT
from attestation.transparency.entries import EntryError, LogEntry
from runner.service.corpus_store import CorpusStore
from runner.service.log.storage import ListedEntry
from runner.service.panel.verifier_data import verifier_data
from runner.service.server import Service, not_found, query_int

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
    "dom.js": ("dom.js", "text/javascript; charset=utf-8"),
    "panel.js": ("panel.js", "text/javascript; charset=utf-8"),
    "panel.css": ("panel.css", "text/css; charset=utf-8"),
    # Built from panel-verifier/ (docs/trust-panel.md); tests/panel/test_bundle.py rebuilds it.
    "verify.js": ("verify.js", "text/javascript; charset=utf-8"),
    "contract.js": ("contract.js", "text/javascript; charset=utf-8"),
    "contract.css": ("contract.css", "text/css; charset=utf-8"),
    "favicon.svg": ("favicon.svg", "image/svg+xml"),
}


def _asset(name: str) -> bytes:
    return (resources.files("runner.service.panel") / "static" / name).read_bytes()


def _run_json(entry: LogEntry, listed: ListedEntry, data: bytes | None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "logIndex": listed.log_index,
        "runId": entry.run_id,
        "digest": entry.envelope,
        # The service's clock when the envelope was integrated; None for envelopes an older
        # service stored (the page says "not recorded").
        "publishedAt": listed.published_at,
    }
    if data is None:
        return {**run, "problem": "the envelope this entry names is not stored"}
    try:
        envelope = parse_any_envelope(data)
    except MalformedError as exc:
        return {**run, "problem": f"the stored envelope does not parse: {exc}"}
    if isinstance(envelope, MergedEnvelope):
        platforms = sorted({shard.platform for shard in envelope.shards})
        return {
            **run,
            "kind": "merged",
            "shardIndex": None,
            "shardCount": envelope.shard_count,
            # One platform per run is what a verifier accepts (merged.shards); a mix is shown
            # as it is, never as one of its parts.
            "platform": platforms[0] if len(platforms) == 1 else "mixed: " + ", ".join(platforms),
            "corpusChecksum": envelope.corpus_checksum,
            "evaluationDigest": envelope.evaluation_digest,
            "resultDigest": envelope.result_digest,
        }
    binding = envelope.binding
    shard = binding.shard
    return {
        **run,
        # A shard envelope binds its shard's partial result, not the run's report.
        "kind": "run" if shard is None else "shard",
        "shardIndex": None if shard is None else shard.index,
        "shardCount": None if shard is None else shard.count,
        "platform": envelope.platform,
        "corpusChecksum": binding.corpus_checksum,
        "evaluationDigest": binding.evaluation_digest,
        "resultDigest": binding.result_digest,
    }


def panel_routes(service: Service, store: CorpusStore) -> list[BaseRoute]:
    """The page, its assets and its JSON, authorizing with the service's tokens."""
    storage = service.storage
    assets = {path: (_asset(name), media) for path, (name, media) in _ASSETS.items()}

    async def page(request: Request) -> Response:
        found = assets.get(str(request.path_params.get("name", "")))
        if found is None:
            raise not_found()
        body, media = found
        return Response(body, media_type=media, headers=SECURITY_HEADERS)

    async def verifier_json(_request: Request) -> Response:
        return JSONResponse(verifier_data(), headers=SECURITY_HEADERS)

    async def to_page(_request: Request) -> Response:
        return RedirectResponse("/panel/", status_code=308)

    async def contract(_request: Request) -> Response:
        return JSONResponse(CONTRACT.to_json_dict())

    async def whoami(request: Request) -> Response:
        identity = await service.identify(request)
        return JSONResponse(
            {"tenant": identity.tenant, "role": identity.role.value}, headers=_NO_STORE
        )

    def runs_page(tenant: str, start: int, limit: int) -> dict[str, Any]:
        exports: dict[str, str] = {}
        for export in store.list(tenant):  # oldest first: the newest export of a corpus wins
            exports[export.corpus_checksum] = export.digest
        runs = []
        for listed in storage.listing(tenant, start, limit):
            try:
                entry = LogEntry.from_bytes(listed.entry)
            except EntryError as exc:
                runs.append({"logIndex": listed.log_index, "problem": f"malformed entry: {exc}"})
                continue
            stored = storage.envelope(tenant, entry.envelope)
            run = _run_json(entry, listed, None if stored is None else stored[0])
            run["corpusExport"] = exports.get(run.get("corpusChecksum", ""))
            runs.append(run)
        return {"runs": runs, "next": start + limit if len(runs) == limit else None}

    async def runs(request: Request) -> Response:
        tenant = str(request.path_params["tenant"])
        await service.authorize(request, tenant, write=False)
        start = query_int(request, "start", default=0)
        limit = query_int(request, "limit", default=MAX_RUNS_PAGE, minimum=1, maximum=MAX_RUNS_PAGE)
        body = await anyio.to_thread.run_sync(lambda: runs_page(tenant, start, limit))
        return JSONResponse(body, headers=_NO_STORE)

    return [
        Route("/panel", to_page, methods=["GET"]),
        Route("/panel/", page, methods=["GET"]),
        Route("/panel/verifier-data.json", verifier_json, methods=["GET"]),
        Route("/panel/{name}", page, methods=["GET"]),
        Route("/v1/contract", contract, methods=["GET"]),
        Route("/v1/whoami", whoami, methods=["GET"]),
        Route("/v1/tenants/{tenant}/panel/runs", runs, methods=["GET"]),
    ]
