"""AMD Key Distribution Service (KDS): fetch, verify and cache a chip's VCEK.

URLs (AMD's VCEK Certificate and KDS Interface Specification, publication 57230), base
``https://kdsintf.amd.com``:

* VCEK: ``/vcek/v1/{Milan|Genoa}/{hex(CHIP_ID): 128 chars}?blSPL=.&teeSPL=.&snpSPL=.&ucodeSPL=.``;
  Turin: ``/vcek/v1/Turin/{hex(CHIP_ID[0:8]), 16 chars}?...&fmcSPL=..`` (the long form gets 404).
* ASK + ARK: ``/vcek/v1/{product}/cert_chain`` (PEM, ASK first).

SPL values come from REPORTED_TCB and are written as plain decimal without zero padding
(``blSPL=3``). KDS accepts both this and the two-digit form some tools send; we use the form of
the URL recorded in the Oak test data whose answer is one of our real vectors.

A downloaded VCEK is kept only if it chains to AMD's *pinned* ASK and ARK, its SPLs and hwID
match the report, and it verifies the report's signature. KDS rate-limits (HTTP 429): we wait
as long as ``Retry-After`` asks, up to a bound, a bounded number of times (the retry policy of
:mod:`attestation.tenant.http`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import AttestationReport, parse_report
from attestation.endorsement.chain import VerifiedChain
from attestation.endorsement.trust import TrustStore, fingerprint
from attestation.errors import AttestationError, FailureClass
from attestation.files import read_regular
from attestation.tenant.fsutil import atomic_write
from attestation.tenant.http import (
    HttpClient,
    HttpError,
    Limits,
    RetryAfterTooLongError,
    RetryPolicy,
)
from attestation.verify.verifier import verify_endorsement
from runner.errors import EvidenceError, InputError, UsageError
from runner.evidence.bundle import pem_bundle

KDS_BASE_URL: Final = "https://kdsintf.amd.com"
TURIN_HWID_BYTES: Final = 8
DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_ATTEMPTS: Final = 4
#: Never wait longer than this for one Retry-After; KDS asks for ~10 s under normal load.
DEFAULT_MAX_WAIT: Final = 120.0
#: Wait used when a 429/503 carries no usable Retry-After.
DEFAULT_BACKOFF: Final = 10.0
#: The whole fetch of one certificate, rate-limit waits included (seconds).
DEFAULT_DEADLINE: Final = 300.0
#: A VCEK is ~1.3 KB and the ASK + ARK chain ~4 KB.
MAX_KDS_ANSWER_BYTES: Final = 16 * 1024
MAX_REDIRECTS: Final = 3
_RETRY_STATUSES: Final = frozenset({429, 503})
_log = structlog.get_logger(__name__)


class KdsError(EvidenceError):
    """KDS could not provide the certificate (network, 404, rate limit beyond the bound)."""


class KdsVerificationError(EvidenceError):
    """KDS answered, but the certificate does not check out for this report."""


@dataclass(frozen=True, slots=True)
class VcekRequest:
    """What identifies a VCEK at KDS: product line, hwID and REPORTED_TCB SPLs."""

    product: ProductLine
    hwid: bytes
    spls: tuple[tuple[str, int], ...]
    """``(query name, value)`` in URL order, e.g. ``("blSPL", 3)``."""

    def path(self) -> str:
        query = "&".join(f"{name}={value}" for name, value in self.spls)
        return f"/vcek/v1/{self.product.value}/{self.hwid.hex()}?{query}"

    def cache_name(self) -> Path:
        tcb = "-".join(f"{name.removesuffix('SPL')}{value}" for name, value in self.spls)
        return Path("vcek", self.product.value, self.hwid.hex(), f"{tcb}.der")


def report_product(report: AttestationReport, product: ProductLine | None) -> ProductLine:
    """The report's product line from CPUID (v3+), or the operator's ``--product`` for v2."""
    own = report.product_line
    if own is None:
        if product is None:
            raise UsageError("a version 2 report has no CPUID: pass --product Milan|Genoa|Turin")
        return product
    if product is not None and product is not own:
        raise UsageError(f"--product {product} contradicts the report's CPUID ({own})")
    return own


def vcek_request(report: AttestationReport, product: ProductLine) -> VcekRequest:
    """The KDS request for the VCEK that should have signed ``report``."""
    if report.signer_kind is SignerKind.VLEK:
        raise UsageError(
            "the report is signed by a VLEK: VLEKs are provisioned by the cloud provider and "
            "cannot be downloaded from KDS; take it from the platform's certificate table"
        )
    if report.chip_id_masked:
        raise UsageError("the report's CHIP_ID is masked (all zero): KDS cannot be queried")
    tcb = report.tcb("reported", product).components()
    spls = [("blSPL", tcb["bl"]), ("teeSPL", tcb["tee"]), ("snpSPL", tcb["snp"])]
    spls.append(("ucodeSPL", tcb["ucode"]))
    if product.uses_turin_tcb_layout:
        spls.append(("fmcSPL", tcb["fmc"]))
        hwid = report.chip_id[:TURIN_HWID_BYTES]
    else:
        hwid = report.chip_id
    return VcekRequest(product, bytes(hwid), tuple(spls))


def cert_chain_path(product: ProductLine) -> str:
    """KDS path of the ASK + ARK PEM chain for VCEKs of ``product``."""
    return f"/vcek/v1/{product.value}/cert_chain"


class KdsClient:
    """GETs from KDS through :mod:`attestation.tenant.http`: timeouts, a size cap, and bounded
    retries on 429/503 that honour ``Retry-After`` up to ``max_wait`` seconds."""

    def __init__(
        self,
        base_url: str = KDS_BASE_URL,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        attempts: int = DEFAULT_ATTEMPTS,
        max_wait: float = DEFAULT_MAX_WAIT,
        deadline: float = DEFAULT_DEADLINE,
        client: HttpClient | None = None,
        sleep: Callable[[float], None] | None = None,
        ca_bundle: Path | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.attempts = attempts
        self.deadline = deadline
        self.client = client or HttpClient(
            retry=RetryPolicy(
                attempts=attempts,
                # No Retry-After: KDS asks for about 10 s under normal load; wait that long.
                backoff_factor=DEFAULT_BACKOFF,
                backoff_max=DEFAULT_BACKOFF,
                jitter=False,
                retry_after_max=max_wait,
                retry_statuses=_RETRY_STATUSES,
                connect_timeout=timeout,
                read_timeout=timeout,
            ),
            what="KDS URL",
            sleep=sleep,
            ca_bundle=ca_bundle,
        )

    def get(self, path: str) -> bytes:
        url = self.base_url + path
        try:
            answer = self.client.get(
                url,
                limit=Limits(max_bytes=MAX_KDS_ANSWER_BYTES, deadline=self.deadline),
                redirects=MAX_REDIRECTS,
            )
        except RetryAfterTooLongError as exc:
            raise KdsError(
                f"KDS rate limit: {exc}; retry later or use a cached certificate"
            ) from exc
        except HttpError as exc:
            raise KdsError(f"KDS request {url} failed: {exc}") from exc
        if answer.status == 200:
            return answer.body
        if answer.status == 404:
            raise KdsError(
                f"KDS has no certificate at {url} (404): check the product line, and that "
                "the TCB values are ones AMD has issued"
            )
        if answer.status in _RETRY_STATUSES:
            raise KdsError(f"KDS kept answering 429/503 for {url} after {self.attempts} attempts")
        raise KdsError(f"KDS answered HTTP {answer.status} for {url}")


@dataclass(frozen=True, slots=True)
class FetchedVcek:
    """A VCEK verified for one report, with the pinned ASK and ARK it chains to."""

    vcek: x509.Certificate
    ask: x509.Certificate
    ark: x509.Certificate
    url: str
    from_cache: bool

    @property
    def vcek_der(self) -> bytes:
        return self.vcek.public_bytes(Encoding.DER)

    @property
    def ask_der(self) -> bytes:
        return self.ask.public_bytes(Encoding.DER)

    @property
    def ark_der(self) -> bytes:
        return self.ark.public_bytes(Encoding.DER)

    def bundle_pem(self) -> bytes:
        """PEM bundle VCEK, ASK, ARK (what ``--endorsement-bundle`` reads)."""
        return pem_bundle((self.vcek, self.ask, self.ark)).encode("ascii")


def verify_vcek_for_report(
    vcek_der: bytes,
    report_bytes: bytes,
    product: ProductLine,
    *,
    now: dt.datetime,
    trust: TrustStore,
) -> VerifiedChain:
    """The verifier's own answer to "does this VCEK endorse this report?" (chain to AMD's
    pinned roots, signature, TCB, chip ID), for ``product``; the verified chain."""
    result = verify_endorsement(report_bytes, vcek_der, trust=trust, now=now)
    if not result.ok or result.chain is None:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in result.failed_checks)
        # A VCEK that chains to AMD but is another chip's or TCB's does not describe the report;
        # one that does not chain (or parse) does not verify at all.
        describes = result.failure_class in (
            FailureClass.BAD_SIGNATURE,
            FailureClass.ENDORSEMENT_MISMATCH,
        )
        what = "does not describe this report" if describes else "does not verify"
        raise KdsVerificationError(f"the VCEK {what}: {failed or result.failure_class}")
    if result.product_line is not product:
        raise KdsVerificationError(
            f"the VCEK is for {result.product_line}, but the report is a {product} report"
        )
    return result.chain


def check_cert_chain(pem: bytes, product: ProductLine, trust: TrustStore) -> None:
    """The KDS ``cert_chain`` answer must be exactly AMD's pinned ASK then ARK."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise KdsVerificationError(f"KDS cert_chain is not PEM: {exc}") from exc
    expected = [trust.intermediate(product, SignerKind.VCEK), trust.ark(product)]
    if [fingerprint(c) for c in certificates] != [fingerprint(c) for c in expected]:
        raise KdsVerificationError(
            f"KDS cert_chain for {product} is not the pinned ASK and ARK "
            f"(got {len(certificates)} certificate(s) with other fingerprints)"
        )


def _verified_cache_entry(
    cached: Path,
    report_bytes: bytes,
    line: ProductLine,
    *,
    now: dt.datetime,
    trust: TrustStore,
) -> tuple[bytes, VerifiedChain] | None:
    """A cached VCEK that still verifies for this report; None (fetch again) when it is
    unreadable or no longer verifies, since the cache is a convenience, never trusted."""
    try:
        der = read_regular(cached, MAX_KDS_ANSWER_BYTES)
    except OSError as exc:
        _log.warning("kds_cache_entry_unreadable", path=str(cached), error=str(exc))
        return None
    try:
        chain = verify_vcek_for_report(der, report_bytes, line, now=now, trust=trust)
    except KdsVerificationError as exc:
        _log.warning("kds_cache_entry_rejected", path=str(cached), error=str(exc))
        return None
    return der, chain


def fetch_vcek(
    report_bytes: bytes,
    *,
    product: ProductLine | None = None,
    client: KdsClient | None = None,
    cache_dir: Path | None = None,
    now: dt.datetime | None = None,
    trust: TrustStore | None = None,
) -> FetchedVcek:
    """Fetch (or take from the cache) the VCEK for a raw report, verified."""
    try:
        report = parse_report(report_bytes)
    except AttestationError as exc:
        raise InputError(f"not a valid SEV-SNP report: {exc}") from exc
    client = client or KdsClient()
    now = now or dt.datetime.now(dt.UTC)
    trust = trust or TrustStore.amd()
    line = report_product(report, product)
    request = vcek_request(report, line)
    url = client.base_url + request.path()
    cached = cache_dir / request.cache_name() if cache_dir else None
    if cached is not None and cached.is_file():
        hit = _verified_cache_entry(cached, report_bytes, line, now=now, trust=trust)
        if hit is not None:
            _der, chain = hit
            return FetchedVcek(chain.leaf, chain.intermediate, chain.ark, url, from_cache=True)
    der = client.get(request.path())
    chain = verify_vcek_for_report(der, report_bytes, line, now=now, trust=trust)
    check_cert_chain(client.get(cert_chain_path(line)), line, trust)
    if cached is not None:
        atomic_write(cached, der)
    return FetchedVcek(chain.leaf, chain.intermediate, chain.ark, url, from_cache=False)
