"""The one HTTP module: session factory, retry policy and URL policy for every client.

Every HTTP client of attested-replay (tenant fetch, the publisher, corpus downloads, AMD KDS,
``collect`` reading the publication service) builds its session here, so a proxy, CA bundle,
user agent, timeout or retry rule is set once:

* :class:`RetryPolicy`: how hard one request tries. Connection errors, 429 and 5xx are
  retried with capped exponential backoff and jitter, honouring ``Retry-After``;
* :func:`new_session`: a ``requests`` session mounted with that policy (and a bearer token);
* :func:`check_url`: ``https://``, or ``http://`` only on a loopback host (tests and
  port-forwarded development): a plain-text hop elsewhere would let the network rewrite answers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tenant.errors import TenantUsageError

USER_AGENT: Final = "attested-replay/1"
#: Statuses that mean "try again later": rate limits and server-side failures.
TRANSIENT_STATUSES: Final = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard one request tries before its caller gives up."""

    total: int = 6
    connect: int = 4
    read: int = 3
    status: int = 4
    backoff_factor: float = 0.5
    backoff_max: float = 30.0
    connect_timeout: float = 3.05
    read_timeout: float = 30.0

    @property
    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` seconds for ``requests``."""
        return (self.connect_timeout, self.read_timeout)

    def retry(self) -> Retry:
        """The urllib3 retry rule of this policy (idempotent methods only)."""
        return Retry(
            total=self.total,
            connect=self.connect,
            read=self.read,
            status=self.status,
            other=0,
            backoff_factor=self.backoff_factor,
            backoff_max=self.backoff_max,
            backoff_jitter=self.backoff_factor / 2,
            status_forcelist=TRANSIENT_STATUSES,
            allowed_methods=frozenset({"GET", "HEAD", "PUT"}),
            respect_retry_after_header=True,
            raise_on_status=False,
        )


def new_session(token: str | None = None, policy: RetryPolicy | None = None) -> requests.Session:
    """A session that retries per ``policy`` and sends ``token`` as a bearer token."""
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=(policy or RetryPolicy()).retry())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    if token is not None:
        session.headers["Authorization"] = f"Bearer {token}"
    session.headers["User-Agent"] = USER_AGENT
    return session


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, *, what: str) -> None:
    """Refuse anything but ``https://HOST...`` and loopback ``http://``.

    Raises:
        TenantUsageError: naming ``what`` and the rule the URL breaks.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and host:
        if is_loopback(host):
            return
        raise TenantUsageError(
            f"{what} {url!r}: plain http:// is allowed only for loopback hosts, not {host}"
        )
    raise TenantUsageError(f"{what} {url!r} must be https:// (http:// only on loopback)")


def read_token(path: Path) -> str:
    """The one bearer token kept in ``path`` (a file or a mounted Secret key).

    Raises:
        TenantUsageError: the file is unreadable, empty or holds more than one token.
    """
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise TenantUsageError(f"cannot read token file {path}: {exc}") from exc
    if not token or any(c.isspace() for c in token):
        raise TenantUsageError(f"token file {path} must hold exactly one token")
    return token
