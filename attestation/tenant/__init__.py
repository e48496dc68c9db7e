"""The tenant's tools that need the network, and the one HTTP client module.

Depends on the verifier (the rest of ``attestation``), ``urllib3`` and ``structlog``; never on
``runner``, ``attestation.simulated_amd``, ``kubernetes``, Starlette, uvicorn or psycopg, so a
tenant can install and use it alone (a test enforces it). ``runner`` uses
:mod:`attestation.tenant.http` and :mod:`attestation.tenant.fsutil` too (``runner`` may import
``attestation.tenant``, never the reverse).

* :mod:`attestation.tenant.fetch` ``tenant fetch``: download new envelopes, prove the log only grew;
* :mod:`attestation.tenant.http` the HTTP client (per-call size and time limits), the one retry
  policy, the URL policy, bearer-token files;
* :mod:`attestation.tenant.fsutil` atomic file writes;
* :mod:`attestation.tenant.errors` the package's exception hierarchy.

Fetch and verify a tenant's publication log::

    from pathlib import Path

    from attestation import tenant

    report = tenant.fetch_tenant(
        server="https://publish.example",
        token=tenant.read_token(Path("tenant.token")),
        tenant="acme",
        out_dir=Path("acme-envelopes"),
        log_key=tenant.load_verifier_key("attested-replay.local+1a2b3c4d+AQ..."),
    )
    print(report.size, report.new_envelopes)
"""

from attestation.tenant.errors import (
    ServiceUnavailableError,
    TamperingError,
    TenantError,
    TenantInputError,
    TenantUsageError,
)
from attestation.tenant.fetch import FetchReport, fetch_tenant, load_verifier_key
from attestation.tenant.http import (
    Answer,
    AnswerTooLargeError,
    HttpClient,
    HttpError,
    HttpRefusedError,
    HttpUnavailableError,
    Limits,
    RetryAfterTooLongError,
    RetryPolicy,
    check_url,
    read_token,
)

__all__ = [
    "Answer",
    "AnswerTooLargeError",
    "FetchReport",
    "HttpClient",
    "HttpError",
    "HttpRefusedError",
    "HttpUnavailableError",
    "Limits",
    "RetryAfterTooLongError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "TamperingError",
    "TenantError",
    "TenantInputError",
    "TenantUsageError",
    "check_url",
    "fetch_tenant",
    "load_verifier_key",
    "read_token",
]
