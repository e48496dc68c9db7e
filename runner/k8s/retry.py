"""Retry Kubernetes API calls on 5xx, 429 and dropped connections, with capped backoff
(:class:`attestation.tenant.http.RetryPolicy`, the project's one retry policy).

Creation is safe to retry because Job names are deterministic: a create that reached the
server before the connection dropped comes back as 409 and is attached by spec digest.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import structlog
import urllib3
from kubernetes.client.exceptions import ApiException

from attestation.tenant.http import RetryPolicy
from runner.k8s.errors import ApiRefusedError, ApiUnavailableError

T = TypeVar("T")
log = structlog.get_logger("attested-replay.k8s")


#: The Kubernetes API's retries: the one retry policy of ``attestation.tenant.http``, with shorter
#: waits (the API server is close by, and a watch loop must not stall for long).
KUBERNETES_RETRY: Final = RetryPolicy(attempts=6, backoff_factor=0.25, backoff_max=8.0)


def is_transient(error: BaseException) -> bool:
    """5xx/429 answers and transport errors; everything else is a real answer."""
    if isinstance(error, ApiException):
        return error.status is not None and (error.status >= 500 or error.status == 429)
    return isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def call(
    policy: RetryPolicy, what: str, fn: Callable[..., T], *args: object, **kwargs: object
) -> T:
    """``fn(*args, **kwargs)``, retried while the failure is transient."""
    for attempt in range(policy.attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not is_transient(exc):
                raise
            if attempt == policy.attempts - 1:
                tries = "1 attempt" if policy.attempts == 1 else f"{policy.attempts} attempts"
                raise ApiUnavailableError(
                    f"Kubernetes API call {what} failed after {tries}; last error: {describe(exc)}"
                ) from exc
            log.warning("k8s_api_retry", call=what, attempt=attempt + 1, error=describe(exc))
            time.sleep(policy.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def read_json(response: object) -> dict[str, Any]:
    """The JSON body of a ``_preload_content=False`` response, released back to the pool."""
    if not isinstance(response, urllib3.BaseHTTPResponse):
        raise TypeError(f"expected a raw HTTP response, got {type(response).__name__}")
    try:
        data = json.loads(response.data)
    finally:
        response.release_conn()
    if not isinstance(data, dict):
        raise ApiUnavailableError("Kubernetes API answered with a non-object JSON body")
    return data


def discard(response: object) -> None:
    """Read and drop a raw response's body so its keep-alive connection can be reused.

    Releasing an unread response would leave its body on the pooled connection, where the
    next request would read it as the start of its own answer.
    """
    if not isinstance(response, urllib3.BaseHTTPResponse):
        raise TypeError(f"expected a raw HTTP response, got {type(response).__name__}")
    response.drain_conn()
    response.release_conn()


#: RFC 9111 Warning header as the API server writes it: ``299 - "<text>"``
#: (apimachinery ``net.NewWarningHeader``: code, agent ``-``, quoted text).
_WARNING = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"')


def warnings_of(response: object) -> list[str]:
    """The texts of a raw response's ``Warning`` headers (unknown fields, deprecations)."""
    if not isinstance(response, urllib3.BaseHTTPResponse):
        return []
    texts = []
    for header in response.headers.getlist("Warning"):
        match = _WARNING.match(header)
        texts.append(re.sub(r"\\(.)", r"\1", match.group(1)) if match else header)
    return texts


def log_warnings(response: object, what: str) -> None:
    """Log every ``Warning`` the API server attached to a response."""
    for text in warnings_of(response):
        log.warning("k8s_api_warning", call=what, warning=text)


def describe(error: BaseException) -> str:
    if isinstance(error, ApiException):
        detail = error.reason or ""
        try:
            body = json.loads(error.body) if error.body else {}
            detail = body.get("message", detail) if isinstance(body, dict) else detail
        except (ValueError, TypeError):
            pass
        return f"HTTP {error.status}: {detail}"
    return f"{type(error).__name__}: {error}"


def refusal(error: ApiException) -> ApiRefusedError:
    """An API answer that no command handled itself, in the operator's words: 403 names what
    the server says the user may not do and where the permissions come from."""
    if error.status == 403:
        return ApiRefusedError(
            f"the Kubernetes API refused the request ({describe(error)}): the operator needs "
            "the Role and ClusterRole of k8s/base, bound to the group attested-replay:operators "
            "or the ServiceAccount attested-replay-operator, in the Jobs' namespace"
        )
    if error.status == 401:
        return ApiRefusedError(
            f"the Kubernetes API did not accept the credentials ({describe(error)}): check the "
            "kubeconfig's user"
        )
    return ApiRefusedError(f"the Kubernetes API answered {describe(error)}")
