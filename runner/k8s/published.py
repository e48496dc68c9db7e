"""Was this run ID published already? ``submit`` asks the publication service before a TEE boots.

The publication service keeps a write-once run pointer per (tenant, run ID, part): part ``""``
for a whole or merged envelope, the shard index for a shard envelope; another envelope for a
part that has one is refused (409) and never logged (``runner/service/log/sequencer.py``). A run
that publishes to a service already holding an envelope of its run ID would boot a TEE, replay,
and then fail to publish (exit 6, which the Job retries: one more VM per attempt). The run
record (:mod:`runner.k8s.run_id_records`) cannot tell, since it lives in one cluster and may
have been deleted; the service can. So before claiming the run, ``submit`` reads:

1. ``GET /v1/tenants/{t}/envelopes?limit=1``: 200 only for a token of the run's tenant. The
   service answers 404 for another tenant's paths (it is no existence oracle), so with another
   tenant's token every run would look unpublished;
2. ``GET /v1/tenants/{t}/runs/{r}``: 200 is a whole or merged envelope, 404 none;
3. ``GET /v1/tenants/{t}/runs/{r}/shards``: ``{"shards": [...]}``, the shard parts it has.

Anything else (401, 5xx after the retries, a malformed answer, no answer) refuses the
submission: the check fails closed. ``--rerun`` does not override it: the service would refuse
the rerun's envelope anyway.
"""

from __future__ import annotations

from typing import Final

from attestation.tenant.http import Answer, HttpClient, HttpError, Limits
from runner.k8s.collect import PUBLICATION_ANSWER
from runner.k8s.errors import PublicationCheckError, RunPublishedError
from runner.k8s.gone import publication_run_url

#: ``…/shards`` is a small JSON object (at most 256 shard indices).
SMALL_ANSWER: Final = Limits(max_bytes=16 * 1024, deadline=30.0)
#: One entry of the tenant's envelope listing (``limit=1``).
LISTING_ANSWER: Final = Limits(max_bytes=64 * 1024, deadline=30.0)
#: ``…/runs/{r}`` answers with the envelope itself when there is one: only the status is used,
#: but the body is read (up to the one envelope limit) so that the connection can be reused.
RUN_ANSWER: Final = PUBLICATION_ANSWER


def check_unpublished(http: HttpClient, base_url: str, tenant: str, run_id: str) -> None:
    """Refuse a run ID the publication service at ``base_url`` has an envelope of.

    Raises:
        RunPublishedError: the service has a whole, merged or shard envelope of the run.
        PublicationCheckError: the service could not say (token of another tenant or none
            accepted, an error status, a malformed answer, unreachable).
    """
    base = base_url.rstrip("/")
    listing_url = f"{base}/v1/tenants/{tenant}/envelopes"
    tenant_listing = _get(http, f"{listing_url}?limit=1", LISTING_ANSWER)
    if tenant_listing.status == 401:
        raise PublicationCheckError(
            f"{listing_url} answered HTTP 401: the --publish-token-file token is not accepted "
            f"by the publication service, so submit cannot check whether run {run_id!r} was "
            "published there"
        )
    if tenant_listing.status == 404:
        raise PublicationCheckError(
            f"{listing_url} answered HTTP 404: the --publish-token-file token is not one of "
            f"tenant {tenant!r}, and the publication service answers 'not found' for every run "
            f"of another tenant, so submit cannot check whether run {run_id!r} was published; "
            f"give a token of tenant {tenant!r}"
        )
    _json_object(tenant_listing, listing_url)
    run_url = publication_run_url(base, tenant, run_id)
    run = _get(http, run_url, RUN_ANSWER)
    if run.status == 200:
        raise RunPublishedError(_published(run_id, tenant, run_url))
    if run.status != 404:
        raise PublicationCheckError(_unexpected(run_url, run.status, run_id))
    shards_url = f"{run_url}/shards"
    listing = _get(http, shards_url, SMALL_ANSWER)
    if listing.status != 200:
        raise PublicationCheckError(_unexpected(shards_url, listing.status, run_id))
    shards = _json_object(listing, shards_url).get("shards")
    if not isinstance(shards, list) or not all(
        isinstance(index, int) and not isinstance(index, bool) for index in shards
    ):
        raise PublicationCheckError(
            f"{shards_url} answered without a list of shard indices: submit cannot check "
            f"whether run {run_id!r} was published"
        )
    if shards:
        listed = ", ".join(str(index) for index in shards[:8]) + (", ..." * (len(shards) > 8))
        raise RunPublishedError(
            _published(run_id, tenant, shards_url, what=f"shard envelopes ({listed})")
        )


def _published(run_id: str, tenant: str, url: str, *, what: str = "an envelope") -> str:
    return (
        f"run {run_id!r} of tenant {tenant!r} was published before: the publication service "
        f"has {what} of it ({url}) and keeps one per run ID, so it would refuse this run's "
        "envelope after the TEE ran (--rerun does not change that). Use a new run ID, or "
        "collect the published envelope"
    )


def _unexpected(url: str, status: int, run_id: str) -> str:
    return (
        f"{url} answered HTTP {status}: submit cannot check whether run {run_id!r} was "
        "published, and refuses to boot a TEE for a run ID that may have been"
    )


def _get(http: HttpClient, url: str, limit: Limits) -> Answer:
    try:
        return http.get(url, headers={"Accept": "application/json"}, limit=limit)
    except HttpError as exc:
        raise PublicationCheckError(
            f"checking the publication service before submitting failed: {url}: {exc}"
        ) from exc


def _json_object(answer: Answer, url: str) -> dict[str, object]:
    try:
        document = answer.json(url)
    except HttpError as exc:
        raise PublicationCheckError(f"{url}: {exc}") from exc
    if answer.status != 200 or not isinstance(document, dict):
        raise PublicationCheckError(
            f"{url} answered HTTP {answer.status} without a JSON object: submit cannot check "
            "what the publication service holds"
        )
    return document
