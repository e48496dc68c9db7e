"""The one HTTP module: every HTTP client of attested-replay goes through :class:`HttpClient`.

Tenant fetch, the publisher, corpus downloads, AMD KDS and ``collect`` reading the publication
service all use it, so a timeout, retry, size or redirect rule is written once:

* every call names its :class:`Limits`: the most bytes it accepts (checked on
  ``Content-Length`` and while reading, so an endless answer is cut off) and a deadline for the
  whole call, retries and waits included;
* :class:`RetryPolicy`: idempotent requests are retried on connection failures, timeouts and
  the statuses in ``retry_statuses`` (429 and 5xx by default), with capped exponential backoff;
  a ``Retry-After`` is honoured up to ``retry_after_max`` and only if it fits in the deadline,
  else the call fails at once naming both numbers. The Kubernetes client's retries
  (``runner.k8s.retry``) use the same policy;
* redirects are followed only when the call allows them (``redirects=N``, GET only), and every
  hop is checked again by the URL policy :func:`check_url` ("https, or http only on
  loopback"); credentials are never sent to another origin;
* failures are :class:`HttpRefusedError` (final: the URL policy, a redirect outside it, an answer
  over the size limit, TLS) or :class:`HttpUnavailableError` (transient: no connection, a timeout,
  the deadline, a ``Retry-After`` too long). After the last attempt a retryable status is
  returned as the :class:`Answer`, and the caller words the error in its own terms.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import ipaddress
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final, Literal, Self
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from urllib3.exceptions import NewConnectionError

from attestation.encoding.json_document import parse_strict_json
from attestation.errors import MalformedError
from tenant.errors import ServiceUnavailableError, TenantError, TenantUsageError

USER_AGENT: Final = "attested-replay/1"
#: Statuses that mean "try again later": rate limits and server-side failures.
TRANSIENT_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
#: How much of an error answer is read (and at most 200 characters of it shown).
MAX_ERROR_BODY_BYTES: Final = 16 * 1024
_CHUNK: Final = 64 * 1024
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
Method = Literal["GET", "PUT", "POST"]


class HttpError(TenantError):
    """An HTTP exchange failed; the subclass says whether trying again can help."""


class HttpRefusedError(HttpError):
    """A final refusal: the URL policy, a redirect outside it, TLS, a malformed answer."""


class AnswerTooLargeError(HttpRefusedError):
    """The answer is larger than the call's ``Limits.max_bytes``."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class HttpUnavailableError(HttpError, ServiceUnavailableError):
    """A transient failure: no connection, a timeout, the deadline, a too-long Retry-After.

    ``refused`` is True when no connection could be made at all (nothing listens there).
    """

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class RetryAfterTooLongError(HttpUnavailableError):
    """The server asked for a longer wait than the policy's ``retry_after_max``."""

    def __init__(self, message: str, *, wait: float) -> None:
        super().__init__(message)
        self.wait = wait


@dataclass(frozen=True, slots=True)
class Limits:
    """What one call accepts: at most ``max_bytes`` of answer body, within ``deadline``
    seconds for the whole call (every attempt, wait and redirect included)."""

    max_bytes: int
    deadline: float


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard one call tries. The Kubernetes client's retries use it too."""

    #: Tries per call, the first included.
    attempts: int = 6
    #: The first retry waits about this long; each later one twice as long, up to the maximum.
    backoff_factor: float = 0.5
    backoff_max: float = 30.0
    #: Waits are drawn from [ceiling / 2, ceiling] so that many clients do not retry in step.
    jitter: bool = True
    #: A ``Retry-After`` asking for longer than this fails the call at once.
    retry_after_max: float = 120.0
    retry_statuses: frozenset[int] = TRANSIENT_STATUSES
    connect_timeout: float = 3.05
    #: The longest wait for one read from the server.
    read_timeout: float = 30.0

    @property
    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` seconds of one attempt."""
        return (self.connect_timeout, self.read_timeout)

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (counting from 0)."""
        ceiling = min(self.backoff_max, self.backoff_factor * 2.0**retry)
        if not self.jitter:
            return ceiling
        jittered: float = random.uniform(ceiling / 2, ceiling)  # noqa: S311 - not a secret
        return jittered


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete HTTP answer (its body read within the call's limits)."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def header(self, name: str) -> str | None:
        """A header's value (names are case-insensitive)."""
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)

    def text(self, limit: int = 200) -> str:
        """The start of the body as text, for error messages."""
        return self.body[:limit].decode("utf-8", "replace")

    def json(self, what: str) -> object:
        """The body as strict JSON (UTF-8, no duplicate keys, no NaN).

        Raises:
            HttpRefusedError: naming ``what`` and the problem.
        """
        try:
            return parse_strict_json(self.body, what=what)
        except MalformedError as exc:
            raise HttpRefusedError(str(exc)) from None


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


def parse_retry_after(value: str | None, *, now: dt.datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


@dataclass
class _Call:
    """One call's state: its limits, its clock and what it has tried."""

    method: Method
    url: str
    limit: Limits
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.limit.deadline - (time.monotonic() - self.started)


class HttpClient:
    """Keep-alive HTTP connections with one retry policy, URL policy and per-call limits.

    ``token`` is sent as ``Authorization: Bearer`` to the origins of the URLs called directly,
    never to another origin reached by a redirect. ``what`` names the URLs in messages
    (``"corpus URL"``). ``sleep`` replaces ``time.sleep`` between attempts (tests). Use it as
    a context manager (or ``close``) to release its connections.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        retry: RetryPolicy | None = None,
        what: str = "URL",
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._token = token
        self._what = what
        self._session = requests.Session()
        self._session.trust_env = False  # no proxy, CA bundle or netrc from the environment
        self._session.headers["User-Agent"] = USER_AGENT
        self._session.headers["Accept-Encoding"] = "identity"  # the size cap counts real bytes

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._session.close()

    # -- calls ------------------------------------------------------------------------------

    def get(
        self,
        url: str,
        *,
        limit: Limits,
        redirects: int = 0,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str | int] | None = None,
    ) -> Answer:
        """GET ``url``; retried per the policy, redirects followed up to ``redirects``."""
        with self._exchange("GET", url, limit, redirects, headers, params, None) as (
            response,
            call,
        ):
            return self._answer(response, call)

    def put(
        self,
        url: str,
        *,
        limit: Limits,
        body: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """PUT ``body`` to ``url`` (idempotent by HTTP's definition, so retried)."""
        with self._exchange("PUT", url, limit, 0, headers, None, body) as (response, call):
            return self._answer(response, call)

    def download(self, url: str, sink: IO[bytes], *, limit: Limits, redirects: int = 0) -> Answer:
        """GET ``url`` and write a 2xx body to ``sink`` as it arrives (``Answer.body`` is empty);
        any other status is returned with its (capped) body and nothing written."""
        with self._exchange("GET", url, limit, redirects, None, None, None) as (response, call):
            if not 200 <= response.status_code < 300:
                return self._answer(response, call, max_bytes=MAX_ERROR_BODY_BYTES)
            for chunk in self._chunks(response, call, limit.max_bytes):
                sink.write(chunk)
            return Answer(response.status_code, dict(response.headers), b"", response.url)

    # -- the exchange -----------------------------------------------------------------------

    @contextmanager
    def _exchange(  # noqa: PLR0917 - one private entry for the three public calls
        self,
        method: Method,
        url: str,
        limit: Limits,
        redirects: int,
        headers: Mapping[str, str] | None,
        params: Mapping[str, str | int] | None,
        body: bytes | None,
    ) -> Iterator[tuple[requests.Response, _Call]]:
        """The final response (after retries and redirects), closed when the block ends."""
        self._check(url)
        call = _Call(method, url, limit)
        origin = _origin(url)
        for hop in range(redirects + 1):
            response = self._attempts(call, origin, headers, params, body)
            if response.status_code not in _REDIRECT_STATUSES:
                with response:
                    yield response, call
                return
            location = response.headers.get("Location", "")
            response.close()
            if method != "GET" or hop == redirects:
                raise HttpRefusedError(
                    f"{call.url} answered HTTP {response.status_code} redirecting to "
                    f"{location!r}, which this call does not follow"
                )
            target = urljoin(call.url, location)
            try:
                self._check(target)
            except TenantUsageError as exc:
                raise HttpRefusedError(f"redirect from {call.url} refused: {exc}") from None
            call.url = target
            params = None  # the Location carries its own query

    def _attempts(
        self,
        call: _Call,
        origin: str,
        headers: Mapping[str, str] | None,
        params: Mapping[str, str | int] | None,
        body: bytes | None,
    ) -> requests.Response:
        policy = self.retry
        all_headers = dict(headers or {})
        if self._token is not None and _origin(call.url) == origin:
            all_headers.setdefault("Authorization", f"Bearer {self._token}")
        last_error: HttpUnavailableError | None = None
        for attempt in range(policy.attempts):
            left = call.left()
            if left <= 0:
                raise HttpUnavailableError(
                    f"{call.method} {call.url}: no complete answer within the "
                    f"{call.limit.deadline:.0f} s deadline"
                    + (f" (last error: {last_error})" if last_error else "")
                )
            timeout = (min(policy.connect_timeout, left), min(policy.read_timeout, left))
            try:
                response = self._session.request(
                    call.method,
                    call.url,
                    headers=all_headers,
                    params=params,
                    data=body,
                    timeout=timeout,
                    allow_redirects=False,
                    stream=True,
                )
            except requests.exceptions.SSLError as exc:
                raise HttpRefusedError(f"{call.method} {call.url}: TLS failed: {exc}") from exc
            except requests.RequestException as exc:
                last_error = _unavailable(call, exc)
                if attempt + 1 == policy.attempts:
                    break
                self._wait(call, policy.delay(attempt), last_error)
                continue
            if response.status_code not in policy.retry_statuses or attempt + 1 == policy.attempts:
                return response
            wait = parse_retry_after(
                response.headers.get("Retry-After"), now=dt.datetime.now(dt.UTC)
            )
            response.close()
            if wait is not None and wait > policy.retry_after_max:
                raise RetryAfterTooLongError(
                    f"{call.url} answered HTTP {response.status_code} and asked to wait "
                    f"{wait:.0f} s (more than {policy.retry_after_max:.0f} s)",
                    wait=wait,
                )
            self._wait(call, policy.delay(attempt) if wait is None else wait, None)
        assert last_error is not None
        raise HttpUnavailableError(
            f"{call.method} {call.url} failed after {policy.attempts} attempts: {last_error}",
            refused=last_error.refused,
        )

    def _wait(self, call: _Call, seconds: float, error: HttpUnavailableError | None) -> None:
        if seconds > call.left():
            raise HttpUnavailableError(
                f"{call.method} {call.url}: the next attempt would start after the "
                f"{call.limit.deadline:.0f} s deadline (wait {seconds:.0f} s)"
                + (f"; last error: {error}" if error else "")
            )
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            time.sleep(seconds)

    def _answer(
        self, response: requests.Response, call: _Call, *, max_bytes: int | None = None
    ) -> Answer:
        limit = call.limit.max_bytes if max_bytes is None else max_bytes
        if not 200 <= response.status_code < 300:
            limit = min(limit, MAX_ERROR_BODY_BYTES)
            body = b"".join(self._chunks(response, call, limit, truncate=True))
        else:
            body = b"".join(self._chunks(response, call, limit))
        return Answer(response.status_code, dict(response.headers), body, response.url)

    def _chunks(
        self, response: requests.Response, call: _Call, limit: int, *, truncate: bool = False
    ) -> Iterator[bytes]:
        declared = response.headers.get("Content-Length", "")
        if not truncate and declared.isdigit() and int(declared) > limit:
            raise AnswerTooLargeError(
                f"{call.url} announces {declared} bytes, over the {limit}-byte limit",
                limit=limit,
            )
        received = 0
        try:
            for chunk in response.raw.stream(_CHUNK, decode_content=False):
                if call.left() <= 0:
                    raise HttpUnavailableError(
                        f"{call.method} {call.url}: the answer did not arrive within the "
                        f"{call.limit.deadline:.0f} s deadline"
                    )
                received += len(chunk)
                if received > limit:
                    if truncate:
                        yield chunk[: len(chunk) - (received - limit)]
                        return
                    raise AnswerTooLargeError(
                        f"{call.url} answered more than the {limit}-byte limit", limit=limit
                    )
                yield chunk
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # while streaming the body
            raise HttpUnavailableError(
                f"{call.method} {call.url}: reading the answer failed: {exc}"
            ) from exc

    def _check(self, url: str) -> None:
        check_url(url, what=self._what)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port}"


def _unavailable(call: _Call, exc: requests.RequestException) -> HttpUnavailableError:
    if isinstance(exc, requests.Timeout):
        return HttpUnavailableError(f"{call.method} {call.url}: timed out ({exc})")
    refused = isinstance(exc, requests.ConnectionError) and _no_connection(exc)
    return HttpUnavailableError(f"{call.method} {call.url}: {exc}", refused=refused)


def _no_connection(exc: requests.ConnectionError) -> bool:
    """True when no connection could be made at all (nothing listens at the address)."""
    cause: object = exc.args[0] if exc.args else None
    reason = getattr(cause, "reason", None)
    return isinstance(reason, NewConnectionError) or isinstance(cause, NewConnectionError)


def json_body(document: object) -> bytes:
    """A JSON request body (compact, UTF-8)."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
