"""The raw-report verification pipeline: report + VCEK/VLEK -> ordered checks -> verdict.

Stages run in the order of the exit-code table (docs/verification.md), and the verdict is
the class of the first failing check:

1. malformed          ``report.parse``, ``endorsement.parse``
2. untrusted-chain    ``endorsement.chain`` (pinned AMD root of the certificate's product line
                      and signer kind, at ``now``; optional CRL)
3. bad-signature      ``report.signature`` (ECDSA P-384/SHA-384 over 0x000-0x29F)
4. endorsement-mismatch  ``endorsement.signer-kind``, ``endorsement.product-line``,
                      ``endorsement.struct-version``, ``endorsement.tcb``, ``endorsement.chip-id``
5. platform-policy    ``policy.*``
6. workload-identity  ``workload.*``

Nothing read from the report is trusted before the signature verifies: after a failed
stage 1-3, later checks are listed with ``ok=None`` ("not run"). Stage 4 and later all run,
so every violation is reported (stages 5-6 are "not run" only when the report and certificate
name different product lines: their TCB layouts differ). Verification failures never raise;
they become failed checks. Envelope mode (:mod:`attestation.envelope.verification`) follows
:attr:`ReportChecks.checks` with its binding (7) and expectation (8) checks and builds the
result with :meth:`VerificationResult.from_checks`.

Chain validation is the expensive, report-independent part: :class:`Verifier` memoizes it per
distinct (certificate, intermediates, product line, now, CRL).
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography import x509

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import (
    SIGNED_REGION_END,
    AttestationReport,
    parse_report,
    signer_kind_of,
)
from attestation.abi.signature import verify_report_signature
from attestation.abi.tcb import TcbVersion
from attestation.endorsement.certificate import (
    Endorsement,
    endorsement_from_certificate,
    load_endorsement_chain,
)
from attestation.endorsement.chain import VerifiedChain, verify_chain
from attestation.endorsement.trust import TrustStore
from attestation.errors import AttestationError, FailureClass, MalformedError
from attestation.verify.checks import Check, VerificationResult
from attestation.verify.policy import CRYPTO_ONLY, Policy, evaluate_policy

EndorsementInput = bytes | Sequence[x509.Certificate] | Endorsement

_MALFORMED = FailureClass.MALFORMED
_CHAIN = FailureClass.UNTRUSTED_CHAIN
_SIGNATURE = FailureClass.BAD_SIGNATURE
_MISMATCH = FailureClass.ENDORSEMENT_MISMATCH

#: Names and classes of the checks that depend on an authentic report, listed as "not run"
#: when an earlier stage fails.
LATER_STAGES: tuple[tuple[str, FailureClass], ...] = (
    ("endorsement.chain", _CHAIN),
    ("report.signature", _SIGNATURE),
    ("endorsement.signer-kind", _MISMATCH),
    ("endorsement.product-line", _MISMATCH),
    ("endorsement.struct-version", _MISMATCH),
    ("endorsement.tcb", _MISMATCH),
    ("endorsement.chip-id", _MISMATCH),
    ("policy", FailureClass.PLATFORM_POLICY),
    ("workload", FailureClass.WORKLOAD_IDENTITY),
)
#: The classes of the stages that decide whether a certificate endorses a report.
_ENDORSEMENT_STAGES = frozenset({_MALFORMED, _CHAIN, _SIGNATURE, _MISMATCH})
#: Required TCB components per layout: every one must be in the certificate.
_REQUIRED_SPLS = ("bl", "tee", "snp", "ucode")
_TURIN_STRUCT_VERSION = 1
_MILAN_GENOA_STRUCT_VERSION = 0
_TURIN_HWID_LENGTH = 8


@dataclass
class ReportChecks:
    """The checks of one raw-report verification and what they established.

    ``report``/``endorsement`` are set when they parsed, ``chain`` when it verified;
    ``authentic`` is True only when the chain and the signature verified (later stages may then
    trust the report's contents).
    """

    checks: list[Check] = field(default_factory=list)
    report: AttestationReport | None = None
    endorsement: Endorsement | None = None
    chain: VerifiedChain | None = None
    product_line: ProductLine | None = None
    authentic: bool = False

    def result(self) -> VerificationResult:
        # The chain is the result's only when it endorses an authentic report.
        return VerificationResult.from_checks(
            self.checks, self.report, self.product_line, self.chain if self.authentic else None
        )


_Parsed = tuple[Endorsement, tuple[x509.Certificate, ...]]


def _endorsement_parts(endorsement: EndorsementInput) -> _Parsed:
    if isinstance(endorsement, Endorsement):
        return endorsement, ()
    if isinstance(endorsement, bytes):
        return load_endorsement_chain(endorsement)  # decodes every part of each certificate
    certificates = tuple(endorsement)
    if not certificates:
        raise MalformedError("no certificate given")
    return endorsement_from_certificate(certificates[0]), certificates[1:]


class Verifier:
    """Verifies raw reports under one trust store and policy, memoizing chain validation."""

    def __init__(
        self,
        trust: TrustStore,
        *,
        policy: Policy,
        crl: bytes | None = None,
        cache_size: int = 64,
        workload_claim: bool = False,
    ) -> None:
        """``workload_claim``: the verdicts are about a workload (envelope mode), so a hardware
        report needs its MEASUREMENT pinned (:mod:`attestation.verify.policy`)."""
        self._trust = trust
        self._workload_claim = workload_claim
        self._policy = policy
        self._crl = crl
        self._cache_size = cache_size
        self._chain_cache: OrderedDict[
            tuple[object, ...], tuple[VerifiedChain, Check] | AttestationError
        ] = OrderedDict()
        self._endorsement_cache: OrderedDict[bytes, _Parsed] = OrderedDict()

    # Read-only: memoized chain verdicts hold only for the trust store and CRL they were
    # computed under; a verifier for other anchors is a new Verifier.
    @property
    def trust(self) -> TrustStore:
        return self._trust

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def crl(self) -> bytes | None:
        return self._crl

    def _remember(self, cache: OrderedDict[Any, Any], key: object, value: object) -> None:
        cache[key] = value
        if len(cache) > self._cache_size:
            cache.popitem(last=False)

    def _endorsement(self, endorsement: EndorsementInput) -> _Parsed:
        """Parse the endorsement; identical input bytes are parsed once (they are immutable).

        Only successes are memoized: a failure is re-raised fresh from a new parse.
        """
        if not isinstance(endorsement, bytes):
            return _endorsement_parts(endorsement)
        cached = self._endorsement_cache.get(endorsement)
        if cached is None:
            cached = _endorsement_parts(endorsement)
            self._remember(self._endorsement_cache, endorsement, cached)
        return cached

    def _chain(
        self,
        endorsement: Endorsement,
        intermediates: tuple[x509.Certificate, ...],
        product: ProductLine,
        now: datetime,
    ) -> tuple[VerifiedChain, Check] | AttestationError:
        """The verified chain and its passed check, or the error that stopped it (memoized).

        Certificates compare by their DER, so the key stands for exactly those bytes.
        """
        key = (endorsement.der, intermediates, product, now, self.crl)
        cached = self._chain_cache.get(key)
        if cached is not None:
            self._chain_cache.move_to_end(key)
            return cached
        outcome: tuple[VerifiedChain, Check] | AttestationError
        try:
            chain = verify_chain(
                endorsement,
                product,
                trust=self.trust,
                now=now,
                crl=self.crl,
                intermediates=intermediates,
            )
            outcome = (
                chain,
                Check.passed(
                    "endorsement.chain",
                    _CHAIN,
                    f"{endorsement.signer_kind.value.upper()} chains to the pinned {product} root "
                    f"at {now.isoformat()}",
                ),
            )
        except AttestationError as exc:
            outcome = exc
        self._remember(self._chain_cache, key, outcome)
        return outcome

    def check(
        self, report_bytes: bytes, endorsement: EndorsementInput, *, now: datetime
    ) -> ReportChecks:
        """Run every raw-report check; never raises for a verification failure."""
        out = ReportChecks()
        try:
            out.report = parse_report(report_bytes)
            out.checks.append(_report_parsed(out.report.version, len(report_bytes)))
        except AttestationError as exc:
            out.checks.append(Check.from_error("report.parse", exc))
        intermediates: tuple[x509.Certificate, ...] = ()
        try:
            out.endorsement, intermediates = self._endorsement(endorsement)
            e = out.endorsement
            out.checks.append(_endorsement_parsed(e.signer_kind, e.product_name))
        except AttestationError as exc:
            out.checks.append(Check.from_error("endorsement.parse", exc))
        if out.report is None or out.endorsement is None:
            return _skip_rest(out, 0, "the input did not parse")
        report, cert = out.report, out.endorsement

        report_product = report.product_line
        chain_product = cert.product_line or report_product
        if chain_product is None:
            out.checks.append(
                Check.failed(
                    "endorsement.chain",
                    _CHAIN,
                    "neither the certificate (productName) nor the version 2 report names a "
                    "product line, so no AMD root applies",
                )
            )
            return _skip_rest(out, 1, "no trusted chain")
        chained = self._chain(cert, intermediates, chain_product, now)
        if isinstance(chained, AttestationError):
            out.checks.append(Check.from_error("endorsement.chain", chained))
            return _skip_rest(out, 1, "no trusted chain")
        out.chain, chain_check = chained
        out.checks.append(chain_check)
        signed = report_bytes[:SIGNED_REGION_END]
        try:
            verify_report_signature(report, cert.public_key, signed)
        except AttestationError as exc:
            out.checks.append(Check.from_error("report.signature", exc))
            return _skip_rest(out, 2, "the report is not authentic")
        out.checks.append(
            Check.passed(
                "report.signature",
                _SIGNATURE,
                "ECDSA P-384/SHA-384 signature verifies (body sha384:"
                f"{hashlib.sha384(signed).hexdigest()})",
            )
        )
        out.authentic = True
        out.product_line = report_product or cert.product_line
        out.checks.extend(endorsement_checks(report, cert, report_product))
        signer = report.signer_kind
        product_ok = _product_line(report_product, cert.product_line).ok
        if out.product_line is None or signer is None or not product_ok:
            # TCB layouts differ between product lines: policy on a contradictory report
            # would read the wrong bytes.
            return _skip_rest(out, len(LATER_STAGES) - 2, "the product lines disagree")
        out.checks.extend(
            evaluate_policy(
                report,
                self.policy,
                product=out.product_line,
                signer=signer,
                hardware=not out.chain.simulated,
                workload_claim=self._workload_claim,
            )
        )
        return out

    def verify(
        self, report_bytes: bytes, endorsement: EndorsementInput, *, now: datetime
    ) -> VerificationResult:
        """Verify a raw report; the result's exit code is the first failing class."""
        return self.check(report_bytes, endorsement, now=now).result()


@functools.lru_cache(maxsize=16)
def _report_parsed(version: int, size: int) -> Check:
    return Check.passed("report.parse", _MALFORMED, f"version {version}, {size} bytes")


@functools.lru_cache(maxsize=64)
def _endorsement_parsed(kind: SignerKind, product_name: str | None) -> Check:
    return Check.passed(
        "endorsement.parse",
        _MALFORMED,
        f"{kind.value.upper()} for {product_name or 'no product name'}",
    )


def _skip_rest(out: ReportChecks, start: int, why: str) -> ReportChecks:
    out.checks.extend(Check.not_run(name, cls, why) for name, cls in LATER_STAGES[start:])
    return out


def verify_report(
    report_bytes: bytes,
    endorsement: EndorsementInput,
    *,
    policy: Policy,
    trust: TrustStore,
    now: datetime,
    crl: bytes | None = None,
) -> VerificationResult:
    """Verify one raw report against its VCEK/VLEK (a one-shot :class:`Verifier`)."""
    return Verifier(trust, policy=policy, crl=crl).verify(report_bytes, endorsement, now=now)


def verify_endorsement(
    report_bytes: bytes,
    endorsement: EndorsementInput,
    *,
    trust: TrustStore,
    now: datetime,
    crl: bytes | None = None,
) -> VerificationResult:
    """Does this certificate endorse this report? Stages 1-4 of :meth:`Verifier.check`: the
    report and certificate parse, the certificate chains to a pinned root at ``now``, it signed
    the report, and it describes the report (signer kind, product line, TCB, chip ID). No
    platform or workload policy: that is the tenant's (:func:`verify_report`).

    The result's ``chain`` holds the verified path (``intermediate``, ``ark``) and its
    ``platform`` says whose root it reached.
    """
    raw = Verifier(trust, policy=CRYPTO_ONLY, crl=crl).check(report_bytes, endorsement, now=now)
    return VerificationResult.from_checks(
        (check for check in raw.checks if check.failure_class in _ENDORSEMENT_STAGES),
        raw.report,
        raw.product_line,
        raw.chain if raw.authentic else None,
    )


def endorsement_checks(
    report: AttestationReport, cert: Endorsement, report_product: ProductLine | None = None
) -> list[Check]:
    """Stage 4: does the (authentic) certificate describe this report? Every check runs.

    ``report_product`` is ``report.product_line`` if the caller has it already.
    """
    if report_product is None:
        report_product = report.product_line
    checks = [
        _signer_kind(report.signing_key, cert.signer_kind),
        _product_line(report_product, cert.product_line),
    ]
    product = report_product or cert.product_line
    if product is None:
        checks.append(Check.failed("endorsement.struct-version", _MISMATCH, "no product line"))
        return checks
    checks.append(_struct_version(cert.struct_version, product))
    # The report's own product line when it has one (v3+), so its layout is the report's.
    checks.append(_tcb(report.reported_tcb, product, tuple(cert.spls.items())))
    checks.append(_chip_id(report, cert, product))
    return checks


# The checks below the chip ID are pure functions of a few values a fleet shares (signer kind,
# product line, structVersion, TCB levels): each outcome is built once. Not the chip ID's,
# which is one chip's.


@functools.lru_cache(maxsize=64)
def _signer_kind(signing_key: int, certified: SignerKind) -> Check:
    name = "endorsement.signer-kind"
    kind = signer_kind_of(signing_key)
    if kind is certified:
        return Check.passed(name, _MISMATCH, f"SIGNING_KEY {signing_key} = {kind}")
    return Check.failed(
        name,
        _MISMATCH,
        f"report SIGNING_KEY {signing_key} ({kind or 'none'}) but the certificate is a "
        f"{certified.value.upper()}",
    )


@functools.lru_cache(maxsize=64)
def _product_line(own: ProductLine | None, certified: ProductLine | None) -> Check:
    name = "endorsement.product-line"
    if own is None:
        if certified is None:
            return Check.failed(name, _MISMATCH, "version 2 report and no productName")
        return Check.passed(
            name, _MISMATCH, f"version 2 report: product line {certified} from certificate"
        )
    if certified is own:
        return Check.passed(name, _MISMATCH, f"report CPUID and certificate both say {own}")
    return Check.failed(
        name,
        _MISMATCH,
        f"report CPUID says {own} but the certificate is for {certified or 'no product'}",
    )


@functools.lru_cache(maxsize=64)
def _struct_version(struct_version: int | None, product: ProductLine) -> Check:
    name = "endorsement.struct-version"
    want = _TURIN_STRUCT_VERSION if product.uses_turin_tcb_layout else _MILAN_GENOA_STRUCT_VERSION
    if struct_version == want:
        return Check.passed(name, _MISMATCH, f"structVersion {want} for {product}")
    return Check.failed(
        name, _MISMATCH, f"structVersion {struct_version} but {product} needs {want}"
    )


@functools.lru_cache(maxsize=256)
def _tcb(reported_tcb: int, product: ProductLine, spls: tuple[tuple[str, int], ...]) -> Check:
    name = "endorsement.tcb"
    reported = TcbVersion.decode(reported_tcb, product).components()
    certified = dict(spls)
    problems: list[str] = []
    required = (*_REQUIRED_SPLS, "fmc") if product.uses_turin_tcb_layout else _REQUIRED_SPLS
    problems.extend(f"{spl}SPL missing" for spl in required if spl not in certified)
    for spl, value in spls:
        if spl not in reported:
            problems.append(f"{spl}SPL {value} has no place in a {product} TCB")
        elif reported[spl] != value:
            problems.append(f"{spl}SPL {value} != REPORTED_TCB {reported[spl]}")
    if problems:
        return Check.failed(name, _MISMATCH, "certificate TCB: " + ", ".join(problems))
    return Check.passed(name, _MISMATCH, f"certificate SPLs equal REPORTED_TCB {reported}")


def _chip_id(report: AttestationReport, cert: Endorsement, product: ProductLine) -> Check:
    return _chip_id_check(
        report.chip_id, report.chip_id_masked, cert.signer_kind, cert.hwid, product
    )


# A pure function of one chip's values, remembered like the chain of that chip (a Verifier
# sees the same few chips again and again).
@functools.lru_cache(maxsize=256)
def _chip_id_check(
    chip: bytes, masked: bool, signer_kind: SignerKind, hwid: bytes | None, product: ProductLine
) -> Check:
    name = "endorsement.chip-id"
    if signer_kind is SignerKind.VLEK:
        if hwid is not None:
            return Check.failed(name, _MISMATCH, "a VLEK must not carry a hwID")
        return Check.passed(name, _MISMATCH, "VLEK: no hwID, CHIP_ID is not bound (by design)")
    if hwid is None:
        return Check.failed(name, _MISMATCH, "the VCEK has no hwID")
    if masked:
        return Check.failed(
            name, _MISMATCH, "CHIP_ID is masked (all zero) and cannot be bound to the VCEK hwID"
        )
    if product.uses_turin_tcb_layout:
        ok = (
            len(hwid) == _TURIN_HWID_LENGTH
            and chip[:_TURIN_HWID_LENGTH] == hwid
            and not any(chip[_TURIN_HWID_LENGTH:])
        )
    else:
        ok = hwid == chip
    if ok:
        return Check.passed(name, _MISMATCH, f"hwID {hwid.hex()} matches CHIP_ID")
    return Check.failed(name, _MISMATCH, f"hwID {hwid.hex()} != CHIP_ID {chip.hex()}")
