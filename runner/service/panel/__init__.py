"""The trust panel: a page ``attested-replay serve`` serves at ``/panel/`` (docs/trust-panel.md).

A tenant signs in with its tenant token and sees the verification contract, its runs (envelope
digest, log index, publication time, bound digests, and the verdict of each envelope checked in
the browser against AMD's pinned roots, or a simulated root the tenant loads), the latest
checkpoint with every signature on it, the witness cosignatures checked under witness keys the
tenant pastes, and for each run the exact commands that check it on the tenant's own machine.
The page is static HTML, CSS and JavaScript in ``static/`` (nothing from another origin);
``static/verify.js`` is built from ``panel-verifier/`` and committed (docs/trust-panel.md). The
data comes from the routes below, with the token as a bearer header:

* ``GET /v1/contract`` (public): the contract, ``attestation.tenant.contract.CONTRACT``, which
  ``static/contract.js`` renders whole;
* ``GET /panel/verifier-data.json`` (public): what ``verify.js`` checks against, from the Python
  verifier's own modules (``verifier_data``);
* ``GET /v1/whoami``: the tenant and role of the caller's token;
* ``GET /v1/tenants/{t}/panel/runs?start=&limit=``: one page of the tenant's log with each
  envelope's bound digests and the corpus export held for its corpus, if any.

The token never leaves the page's memory except in that header; the server answers every
tenant route of another tenant's token with 404, so no other tenant's data can reach a page.
"""

from runner.service.panel.routes import panel_routes

__all__ = ["panel_routes"]
