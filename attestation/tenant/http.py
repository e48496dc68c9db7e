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
  returned as the :class:`Answer`, and the caller words the error in its own terms;
* nothing comes from the environment: no proxy, CA bundle, ``.netrc`` or TLS key-log variable
  (:data:`TRUST_VARIABLES`). Server certificates are checked against certifi's bundle, or the
  file the caller names (``--ca-bundle``); :meth:`HttpClient.environment` says which, and which
  of those variables were set and ignored, for the run's record.

Why the deadline lives in the sockets. Timeouts bound each ``recv``: a server sending one byte
per second never trips them, ``http.client`` reads the status line and every header line by
line, and a buffered ``read(64 KiB)`` loops until it is full. So every connection this client
opens uses a :class:`_DeadlineSocket` (under TLS a :class:`_DeadlineSSLSocket`, through the
documented ``SSLContext.sslsocket_class``) whose timeout becomes min(configured, time left in
the call) before every ``recv``, ``send`` and handshake: no phase of a call outlives its
deadline. Only name resolution is left to the system resolver's timeout.

Why urllib3 and not ``requests``: a ``requests`` session would take proxies, CA bundles and
``.netrc`` from the environment unless told not to on every path, and its default TLS context
(built by urllib3) honours ``SSLKEYLOGFILE``; this module drives urllib3's connection pools
(keep-alive connections per origin, one connection per request in flight, so per thread) with
its own TLS context instead, for every method. Answers are read by ``http.client`` under
urllib3; an answer's head with defects (a folded or broken header line, a ``Content-Length``
that is not a number) fails the attempt instead of being logged and read on.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import email.utils
import functools
import http.client
import ipaddress
import json
import os
import random
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal, Self
from urllib.parse import urlencode, urljoin, urlsplit

import certifi
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import HeaderParsingError, NewConnectionError
from urllib3.util.response import assert_header_parsing

from attestation.encoding.json_document import json_nests_deeper, parse_strict_json
from attestation.errors import MalformedError
from attestation.files import read_regular
from attestation.tenant.errors import ServiceUnavailableError, TenantError, TenantUsageError

USER_AGENT: Final = "attested-replay/1"
#: Statuses that mean "try again later": rate limits and server-side failures.
TRANSIENT_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
#: How much of an error answer is read (and at most 200 characters of it shown).
MAX_ERROR_BODY_BYTES: Final = 16 * 1024
#: A bearer-token file holds one token (ours are 47 characters).
MAX_TOKEN_FILE_BYTES: Final = 4096
#: How deep a server's JSON may nest (the publication service's nests at most four levels).
MAX_JSON_DEPTH: Final = 32
#: Variables through which other HTTP stacks let the environment redirect trust. This module
#: reads none of them; :meth:`HttpClient.environment` reports which were set.
TRUST_VARIABLES: Final = (
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NETRC",
    "SSLKEYLOGFILE",
)
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


class DeadlineExceededError(HttpUnavailableError):
    """The call did not complete within its ``Limits.deadline`` (a slow or dripping server,
    or retries and waits that would not fit)."""


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
        """The body as strict JSON: UTF-8 without a byte order mark, no duplicate keys, no NaN,
        nested at most :data:`MAX_JSON_DEPTH` levels.

        Raises:
            HttpRefusedError: naming ``what`` and the problem.
        """
        if json_nests_deeper(self.body, MAX_JSON_DEPTH):
            raise HttpRefusedError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
        # json.loads(bytes) would also take UTF-16/32 and skip a byte order mark.
        if self.body.startswith(b"\xef\xbb\xbf"):
            raise HttpRefusedError(f"{what} starts with a byte order mark")
        try:
            self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HttpRefusedError(f"{what} is not UTF-8: {exc}") from None
        if b"\x00" in self.body:  # never in UTF-8 JSON; json.loads would read it as UTF-16/32
            raise HttpRefusedError(f"{what} is not UTF-8 JSON: it holds NUL bytes")
        try:
            return parse_strict_json(self.body, what=what)
        except MalformedError as exc:
            raise HttpRefusedError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class HttpEnvironment:
    """What a client took from outside its arguments, and what it ignored."""

    ca_bundle: str
    #: ``"certifi"``, or ``"--ca-bundle"`` when the caller named the file.
    ca_bundle_source: str
    #: Trust variables (:data:`TRUST_VARIABLES`) set in the environment and not used.
    ignored: tuple[str, ...]

    def describe(self) -> str:
        ignored = ", ".join(self.ignored) if self.ignored else "none set"
        return f"CA bundle {self.ca_bundle} ({self.ca_bundle_source}); ignored: {ignored}"


@functools.lru_cache(maxsize=256)
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
        # A regular file (a mounted Secret's key is a symbolic link to one), never a FIFO.
        token = read_regular(path, MAX_TOKEN_FILE_BYTES).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
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


def http_environment(ca_bundle: Path | None = None) -> HttpEnvironment:
    """What every :class:`HttpClient` built with ``ca_bundle`` takes from outside its
    arguments; the bundle is loaded once here, so an unusable file fails before any work.

    Raises:
        TenantUsageError: ``ca_bundle`` cannot be loaded.
    """
    if ca_bundle is None:
        return _environment(Path(certifi.where()), "certifi")
    _tls_context(ca_bundle)
    return _environment(ca_bundle, "--ca-bundle")


def _environment(ca_bundle: Path, source: str) -> HttpEnvironment:
    return HttpEnvironment(
        ca_bundle=str(ca_bundle),
        ca_bundle_source=source,
        ignored=tuple(name for name in TRUST_VARIABLES if name in os.environ),
    )


# -- deadline sockets -----------------------------------------------------------------------

#: The monotonic time by which the current call must end (set for the call's duration).
_call_ends: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "attested_replay_http_call_ends", default=None
)


def _timeout_now(configured: float | None) -> float | None:
    end = _call_ends.get()
    if end is None:
        return configured
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's deadline has passed")
    return left if configured is None else min(configured, left)


class _DeadlineMixin:
    """Before each blocking call the socket timeout becomes min(configured, time left).

    The I/O methods pass their arguments through unchanged: socket's and SSLSocket's
    signatures differ (``nbytes`` defaults to 0 in one and None in the other).
    """

    _configured: float | None = None

    def settimeout(self, value: float | None) -> None:
        self._configured = value
        super().settimeout(value)  # type: ignore[misc]

    def _arm(self) -> None:
        super().settimeout(_timeout_now(self._configured))  # type: ignore[misc]

    def recv(self, *args: Any) -> bytes:  # noqa: ANN401
        self._arm()
        return super().recv(*args)  # type: ignore[misc,no-any-return]

    def recv_into(self, *args: Any) -> int:  # noqa: ANN401
        self._arm()
        return super().recv_into(*args)  # type: ignore[misc,no-any-return]

    def send(self, *args: Any) -> int:  # noqa: ANN401
        self._arm()
        return super().send(*args)  # type: ignore[misc,no-any-return]

    def sendall(self, *args: Any) -> None:  # noqa: ANN401
        self._arm()
        super().sendall(*args)  # type: ignore[misc]


class _DeadlineSocket(_DeadlineMixin, socket.socket):
    pass


class _DeadlineSSLSocket(_DeadlineMixin, ssl.SSLSocket):
    def do_handshake(self, block: bool = False) -> None:
        self._arm()
        super().do_handshake(block)


def _adopt(sock: socket.socket) -> _DeadlineSocket:
    """The same connected socket as a :class:`_DeadlineSocket`."""
    timeout = sock.gettimeout()
    adopted = _DeadlineSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    adopted.settimeout(timeout)
    return adopted


class _MalformedHeadError(http.client.HTTPException):
    """An answer's head ``http.client`` read only with defects (a folded or broken header
    line): the attempt failed, as for ``http.client``'s own errors."""


class _StrictResponse(http.client.HTTPResponse):
    """``http.client``'s answer, refused when its header lines did not parse cleanly.

    urllib3 only logs such defects and goes on with the headers that did parse; a header the
    server meant (``Content-Length``, ``Retry-After``) could then be silently missing.
    """

    def begin(self) -> None:
        super().begin()
        try:
            assert_header_parsing(self.msg)
        except HeaderParsingError as exc:
            raise _MalformedHeadError(f"the answer's head does not parse: {exc}") from None
        for declared in self.msg.get_all("Content-Length") or []:
            # http.client reads a body whose length is not a number up to the connection's end
            if not (declared.isascii() and declared.strip().isdigit()):
                raise _MalformedHeadError(f"Content-Length {declared[:40]!r} is not a number")


class _Connection(HTTPConnection):
    response_class = _StrictResponse

    def _new_conn(self) -> socket.socket:
        return _adopt(super()._new_conn())


class _TlsConnection(HTTPSConnection):
    response_class = _StrictResponse

    def _new_conn(self) -> socket.socket:
        return _adopt(super()._new_conn())


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TlsPool(HTTPSConnectionPool):
    ConnectionCls = _TlsConnection


def _tls_context(ca_bundle: Path) -> ssl.SSLContext:
    # Built by hand: ssl.create_default_context() and urllib3's own context would honour
    # SSLKEYLOGFILE, and load_default_certs() honours SSL_CERT_FILE / SSL_CERT_DIR.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the chain and the host name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=str(ca_bundle))
    except (OSError, ssl.SSLError) as exc:
        raise TenantUsageError(f"cannot load the CA bundle {ca_bundle}: {exc}") from exc
    context.sslsocket_class = _DeadlineSSLSocket
    return context


#: What may not appear in a request target (http.client's rule) or a header value.
_TARGET_FORBIDDEN: Final = re.compile(r"[\x00-\x20\x7f]")
_VALUE_FORBIDDEN: Final = re.compile(r"[\x00\r\n]")


def _checked_request(target: str, headers: Mapping[str, str]) -> None:
    """Refuse a request target or header that would change the request's framing.

    Raises:
        HttpRefusedError: naming what is wrong.
    """
    if not target.isascii() or _TARGET_FORBIDDEN.search(target):
        raise HttpRefusedError(
            f"the request target {target[:80]!r} holds a space or a control "
            "character, or is not ASCII"
        )
    for name, value in headers.items():
        if not name.isascii() or not name.isprintable() or ":" in name or " " in name:
            raise HttpRefusedError(f"{name[:40]!r} is not a header name")
        if _VALUE_FORBIDDEN.search(value):
            raise HttpRefusedError(f"header {name} holds a line break or NUL")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise HttpRefusedError(f"header {name} is not Latin-1 text") from None


@contextmanager
def _deadline(call: _Call) -> Iterator[None]:
    token = _call_ends.set(call.started + call.limit.deadline)
    try:
        yield
    finally:
        _call_ends.reset(token)


@dataclass
class _Call:
    """One call's state: its limits, its clock and what it has tried."""

    method: Method
    url: str
    limit: Limits
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.limit.deadline - (time.monotonic() - self.started)

    def left_before_attempt(self, last_error: Exception | None) -> float:
        """Seconds left for the next attempt; none left is the call's deadline error."""
        left = self.left()
        if left <= 0:
            raise DeadlineExceededError(
                f"{self.method} {self.url}: no complete answer within the "
                f"{self.limit.deadline:g} s deadline"
                + (f" (last error: {last_error})" if last_error else "")
            )
        return left


class HttpClient:
    """Keep-alive HTTP connections with one retry policy, URL policy and per-call limits.

    ``token`` is sent as ``Authorization: Bearer`` to the origins of the URLs called directly,
    never to another origin reached by a redirect. ``what`` names the URLs in messages
    (``"corpus URL"``). ``ca_bundle`` replaces certifi's CA certificates (``--ca-bundle``).
    ``sleep`` replaces ``time.sleep`` between attempts (tests). Safe to share between threads;
    use it as a context manager (or ``close``) to release its connections.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        retry: RetryPolicy | None = None,
        what: str = "URL",
        ca_bundle: Path | None = None,
        connections: int = 10,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._token = token
        self._what = what
        self._ca_source = "certifi" if ca_bundle is None else "--ca-bundle"
        self.ca_bundle = Path(certifi.where()) if ca_bundle is None else ca_bundle
        self._tls = _tls_context(self.ca_bundle)
        self._pools = urllib3.PoolManager(
            num_pools=connections,
            maxsize=connections,
            ssl_context=self._tls,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        )
        self._pools.pool_classes_by_scheme = {"http": _Pool, "https": _TlsPool}

    def environment(self) -> HttpEnvironment:
        """The CA bundle in use and the trust variables set but ignored (for the record)."""
        return _environment(self.ca_bundle, self._ca_source)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pools.clear()

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
        """PUT ``body`` to ``url`` (idempotent by HTTP's definition, so retried; never
        redirected).

        Raises:
            HttpRefusedError: also for a path or header that holds a line break or control
                character (it would change the request's framing), before anything is sent.
        """
        with self._exchange("PUT", url, limit, 0, headers, None, body) as (response, call):
            return self._answer(response, call)

    def download(self, url: str, sink: IO[bytes], *, limit: Limits, redirects: int = 0) -> Answer:
        """GET ``url`` and write a 2xx body to ``sink`` as it arrives (``Answer.body`` is empty);
        any other status is returned with its (capped) body and nothing written."""
        with self._exchange("GET", url, limit, redirects, None, None, None) as (response, call):
            if not 200 <= response.status < 300:
                return self._answer(response, call, max_bytes=MAX_ERROR_BODY_BYTES)
            for chunk in self._chunks(response, call, limit.max_bytes):
                sink.write(chunk)
            return Answer(response.status, dict(response.headers), b"", call.url)

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
    ) -> Iterator[tuple[urllib3.BaseHTTPResponse, _Call]]:
        """The final response (after retries and redirects), released when the block ends."""
        self._check(url)
        call = _Call(method, url, limit)
        origin = _origin(url)
        if params:
            call.url = f"{url}{'&' if '?' in url else '?'}{urlencode(params)}"
        with _deadline(call):
            for hop in range(redirects + 1):
                response = self._attempts(call, origin, headers, body)
                if response.status not in _REDIRECT_STATUSES:
                    try:
                        yield response, call
                    finally:
                        _release(response)
                    return
                location = response.headers.get("Location", "")
                _release(response)
                if method != "GET" or hop == redirects:
                    raise HttpRefusedError(
                        f"{call.url} answered HTTP {response.status} redirecting to "
                        f"{location!r}, which this call does not follow"
                    )
                target = urljoin(call.url, location)
                try:
                    self._check(target)
                except TenantUsageError as exc:
                    raise HttpRefusedError(f"redirect from {call.url} refused: {exc}") from None
                call.url = target

    def _attempts(
        self,
        call: _Call,
        origin: str,
        headers: Mapping[str, str] | None,
        body: bytes | None,
    ) -> urllib3.BaseHTTPResponse:
        policy = self.retry
        all_headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        all_headers.update(headers or {})
        if self._token is not None and _origin(call.url) == origin:
            all_headers.setdefault("Authorization", f"Bearer {self._token}")
        parts = urlsplit(call.url)
        _checked_request(
            (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), all_headers
        )
        last_error: HttpUnavailableError | None = None
        for attempt in range(policy.attempts):
            left = call.left_before_attempt(last_error)
            timeout = urllib3.Timeout(
                connect=min(policy.connect_timeout, left), read=min(policy.read_timeout, left)
            )
            try:
                response = self._pools.request(
                    call.method,
                    call.url,
                    body=body,
                    headers=all_headers,
                    timeout=timeout,
                    retries=False,
                    redirect=False,
                    preload_content=False,
                    decode_content=False,
                )
            except urllib3.exceptions.SSLError as exc:
                raise HttpRefusedError(
                    f"{call.method} {call.url}: TLS failed: {_innermost(exc)}"
                ) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                last_error = _unavailable(call, exc)
                if attempt + 1 == policy.attempts:
                    break
                self._wait(call, policy.delay(attempt), last_error)
                continue
            if response.status not in policy.retry_statuses or attempt + 1 == policy.attempts:
                return response
            retry_after = response.headers.get("Retry-After")
            _release(response)
            self._wait_to_retry(call, response.status, retry_after, attempt)
        assert last_error is not None
        if isinstance(last_error, DeadlineExceededError):
            raise last_error
        raise HttpUnavailableError(
            f"{call.method} {call.url} failed after {policy.attempts} attempts: {last_error}",
            refused=last_error.refused,
        )

    def _wait_to_retry(
        self, call: _Call, status: int, retry_after: str | None, attempt: int
    ) -> None:
        """Wait before retrying a retryable status: the answer's Retry-After when it gives
        one (refused when longer than the policy allows), else the policy's backoff."""
        policy = self.retry
        wait = parse_retry_after(retry_after, now=dt.datetime.now(dt.UTC))
        if wait is not None and wait > policy.retry_after_max:
            raise RetryAfterTooLongError(
                f"{call.url} answered HTTP {status} and asked to wait "
                f"{wait:.0f} s (more than {policy.retry_after_max:.0f} s)",
                wait=wait,
            )
        self._wait(call, policy.delay(attempt) if wait is None else wait, None)

    def _wait(self, call: _Call, seconds: float, error: HttpUnavailableError | None) -> None:
        if seconds > call.left():
            raise DeadlineExceededError(
                f"{call.method} {call.url}: the next attempt would start after the "
                f"{call.limit.deadline:g} s deadline (wait {seconds:.0f} s)"
                + (f"; last error: {error}" if error else "")
            )
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            time.sleep(seconds)

    def _answer(
        self, response: urllib3.BaseHTTPResponse, call: _Call, *, max_bytes: int | None = None
    ) -> Answer:
        limit = call.limit.max_bytes if max_bytes is None else max_bytes
        if not 200 <= response.status < 300:
            limit = min(limit, MAX_ERROR_BODY_BYTES)
            body = b"".join(self._chunks(response, call, limit, truncate=True))
        else:
            body = b"".join(self._chunks(response, call, limit))
        return Answer(response.status, dict(response.headers), body, call.url)

    def _chunks(
        self,
        response: urllib3.BaseHTTPResponse,
        call: _Call,
        limit: int,
        *,
        truncate: bool = False,
    ) -> Iterator[bytes]:
        declared = response.headers.get("Content-Length", "")
        if not truncate and declared.isdigit() and int(declared) > limit:
            raise AnswerTooLargeError(
                f"{call.url} announces {declared} bytes, over the {limit}-byte limit",
                limit=limit,
            )
        received = 0
        while True:
            try:
                chunk = response.read(_CHUNK, decode_content=False)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if call.left() <= 0:
                    raise DeadlineExceededError(
                        f"{call.method} {call.url}: the answer did not arrive within the "
                        f"{call.limit.deadline:g} s deadline"
                    ) from exc
                raise HttpUnavailableError(
                    f"{call.method} {call.url}: reading the answer failed: {_innermost(exc)}"
                ) from exc
            if not chunk:
                return
            received += len(chunk)
            if received > limit:
                if truncate:
                    yield chunk[: len(chunk) - (received - limit)]
                    return
                raise AnswerTooLargeError(
                    f"{call.url} answered more than the {limit}-byte limit", limit=limit
                )
            yield chunk

    def _check(self, url: str) -> None:
        check_url(url, what=self._what)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}:{parts.port}"


def _release(response: urllib3.BaseHTTPResponse) -> None:
    """Give the connection back to the pool; one whose answer was not read to its end is
    closed first, so that its leftovers never become the next answer."""
    if not response.closed:
        response.close()
    response.release_conn()


def _innermost(exc: BaseException) -> str:
    # urllib3 wraps the cause; the innermost message is the one a person can act on.
    while isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    # urllib3 puts its connection object first ("_Connection(host=..., port=...): Failed to
    # establish a new connection: ..."); the URL is named by the caller already.
    if len(exc.args) == 2 and isinstance(exc.args[0], HTTPConnection | HTTPSConnection):
        return str(exc.args[1])
    text = str(exc)
    connection = getattr(exc, "conn", None)
    if connection is not None:
        text = text.removeprefix(f"{connection}: ")
    return text or type(exc).__name__


def _unavailable(call: _Call, exc: BaseException, *, refused: bool = False) -> HttpUnavailableError:
    if call.left() <= 0:
        return DeadlineExceededError(
            f"{call.method} {call.url}: no answer within the {call.limit.deadline:g} s deadline"
        )
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError) and not isinstance(
        exc, NewConnectionError
    ):
        return HttpUnavailableError(f"{call.method} {call.url}: timed out ({_innermost(exc)})")
    refused = refused or isinstance(exc, NewConnectionError)
    return HttpUnavailableError(f"{call.method} {call.url}: {_innermost(exc)}", refused=refused)


def json_body(document: object) -> bytes:
    """A JSON request body (compact, UTF-8)."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
