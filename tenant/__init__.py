"""The tenant's tools that need the network, and the one HTTP client module.

Depends on ``attestation`` (the pure verifier), ``requests`` and ``structlog``; never on
``runner``, ``kubernetes``, Starlette, uvicorn or psycopg, so a tenant can install and use it alone
(a test enforces it). ``runner`` uses :mod:`tenant.http` and :mod:`tenant.fsutil` too
(``runner`` may import ``tenant``, never the reverse).

* :mod:`tenant.fetch` ``tenant fetch``: download new envelopes, prove the log only grew;
* :mod:`tenant.http` the HTTP client (per-call size and time limits), the one retry policy,
  the URL policy, bearer-token files;
* :mod:`tenant.fsutil` atomic file writes;
* :mod:`tenant.errors` the package's exception hierarchy.

Fetch and verify a tenant's publication log::

    from pathlib import Path

    import tenant

    report = tenant.fetch_tenant(
        server="https://publish.example",
        token=tenant.read_token(Path("tenant.token")),
        tenant="acme",
        out_dir=Path("acme-envelopes"),
        log_key=tenant.load_verifier_key("attested-replay.local+1a2b3c4d+AQ..."),
    )
    print(report.size, report.new_envelopes)
"""

from tenant.errors import (
    ServiceUnavailableError,
    TamperingError,
    TenantError,
    TenantInputError,
    TenantUsageError,
)
from tenant.fetch import FetchReport, fetch_tenant, load_verifier_key
from tenant.http import (
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
