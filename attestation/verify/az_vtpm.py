"""Offline verification of Azure's az-snp-vtpm evidence: HCL report + vTPM quote + PCR values.

On an Azure confidential VM the guest does not choose REPORT_DATA: the paravisor (HCL) requested
the SEV-SNP report at boot with REPORT_DATA[0:32] = SHA-256 of its variable data, which holds
the vTPM attestation key (AK). Freshness and the run's binding come from a TPM2_Quote signed by
that AK over the caller's nonce. The chain of trust, checked in this order:

=====================  ==================  ================================================
check                  class (exit)        what
=====================  ==================  ================================================
``hcl.parse``          malformed (1)       HCL report, its SNP report and variable data
``quote.parse``        malformed (1)       TPMS_ATTEST, the signature, one PCR value per
                                           selected PCR
(the SNP checks)       1-6                 exactly :meth:`Verifier.check`: chain to AMD's
                                           pinned root, signature, TCB, hwID, policy
``hcl.vmpl``           platform-policy (5) VMPL 0: the paravisor asked for the report
``hcl.ak-binding``     binding (7)         REPORT_DATA = SHA-256(variable data) || zeros
``quote.signature``    bad-signature (3)   RSASSA-PKCS1-v1_5/SHA-256 by that AK
``quote.pcr-digest``   binding (7)         SHA-256 of the PCR values = pcrDigest
``quote.nonce``        binding (7)         extraData = the expected nonce, exactly
``hcl.user-data``      binding (7)         format v2: ``user-data`` starts with the nonce
``workload.init-data`` workload-identity   when pinned: PCR 8 = one extend of the
                       (6)                 init-data digest from zero
=====================  ==================  ================================================

The same checks trustee runs (``deps/verifier/src/az_snp_vtpm/mod.rs`` @ 78962cd4), plus the
trailing zeros of REPORT_DATA. The PCR values are trusted only through the quote, and the quote
only through the AK the hardware report binds: a later check is "not run" when one it rests on
failed.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from attestation.abi.hcl import USER_DATA_FORMAT, HclReport, parse_hcl_report
from attestation.abi.tpm import (
    SHA256_SIZE,
    Quote,
    QuoteSignature,
    parse_quote,
    pcr_digest_of,
    pcr_extend,
)
from attestation.errors import AttestationError, FailureClass, MalformedError
from attestation.verify.checks import Check, VerificationResult
from attestation.verify.verifier import EndorsementInput, ReportChecks, Verifier

_MALFORMED = FailureClass.MALFORMED
_BINDING = FailureClass.BINDING
#: The PCR the peer-pods adaptor extends the init-data digest into.
INIT_DATA_PCR: Final = 8
#: Evidence format versions of the attestation agent's az-snp-vtpm attester (0: unversioned).
FORMAT_VERSIONS: Final = frozenset({0, 1, 2})

#: Checks of the vTPM part, in order, with their classes (listed "not run" when skipped).
VTPM_CHECKS: Final[tuple[tuple[str, FailureClass], ...]] = (
    ("hcl.vmpl", FailureClass.PLATFORM_POLICY),
    ("hcl.ak-binding", _BINDING),
    ("quote.signature", FailureClass.BAD_SIGNATURE),
    ("quote.pcr-digest", _BINDING),
    ("quote.nonce", _BINDING),
    ("hcl.user-data", _BINDING),
    ("workload.init-data", FailureClass.WORKLOAD_IDENTITY),
)


@dataclass(frozen=True, slots=True)
class VtpmEvidence:
    """The bytes of one az-snp-vtpm evidence: what the verdict depends on, nothing else."""

    hcl_report: bytes
    quote: bytes
    signature: QuoteSignature
    pcrs: tuple[bytes, ...]
    format_version: int

    def __post_init__(self) -> None:
        if self.format_version not in FORMAT_VERSIONS:
            raise MalformedError(
                f"az-snp-vtpm evidence version {self.format_version} is not supported (0, 1, 2)"
            )


@dataclass
class VtpmChecks:
    """The checks of one az-snp-vtpm verification and what they established."""

    checks: list[Check] = field(default_factory=list)
    hcl: HclReport | None = None
    quote: Quote | None = None
    snp: ReportChecks | None = None
    #: The selected PCR values by PCR number, set once the quote's signature and digest held.
    pcrs: dict[int, bytes] | None = None
    #: True once the AK is bound to the authentic report and the quote's signature verified:
    #: only then does the quote's extraData say anything.
    quote_authentic: bool = False

    def result(self) -> VerificationResult:
        snp = self.snp
        if snp is None:
            return VerificationResult.from_checks(self.checks)
        return VerificationResult.from_checks(
            self.checks, snp.report, snp.product_line, snp.chain if snp.authentic else None
        )


def pcr8_for_init_data(init_data_digest: bytes) -> bytes:
    """The PCR 8 a peer pod's VM shows for an init-data digest: one extend from zero."""
    return pcr_extend(bytes(SHA256_SIZE), init_data_digest)


def check_vtpm_evidence(
    evidence: VtpmEvidence,
    endorsement: EndorsementInput,
    *,
    verifier: Verifier,
    nonce: bytes,
    now: datetime,
    init_data_digest: bytes | None = None,
) -> VtpmChecks:
    """Run every check of the module's table; never raises for a verification failure.

    ``nonce`` is the whole extraData the quote must carry (the envelope's REPORT_DATA value);
    ``init_data_digest``, when the tenant pins init-data, the 32-byte digest PCR 8 extends.
    """
    out = VtpmChecks()
    try:
        out.hcl = parse_hcl_report(evidence.hcl_report)
        out.checks.append(
            Check.passed(
                "hcl.parse",
                _MALFORMED,
                f"HCL report version {out.hcl.header_version}, "
                f"{len(out.hcl.variable_data_bytes)} bytes of variable data",
            )
        )
    except AttestationError as exc:
        out.checks.append(Check.from_error("hcl.parse", exc))
    try:
        out.quote = _parsed_quote(evidence)
        out.checks.append(
            Check.passed(
                "quote.parse",
                _MALFORMED,
                f"TPMS_ATTEST quote over PCRs {list(out.quote.selected_pcrs)} (SHA-256)",
            )
        )
    except AttestationError as exc:
        out.checks.append(Check.from_error("quote.parse", exc))
    hcl, quote = out.hcl, out.quote
    if hcl is None or quote is None:
        out.checks.extend(
            Check.not_run(name, cls, "the evidence did not parse") for name, cls in VTPM_CHECKS
        )
        return out
    out.snp = verifier.check(hcl.snp_report_bytes, endorsement, now=now)
    out.checks.extend(out.snp.checks)
    if not out.snp.authentic:
        out.checks.extend(
            Check.not_run(name, cls, "the SNP report is not authentic") for name, cls in VTPM_CHECKS
        )
        return out
    out.checks.extend(
        _vtpm_checks(
            out, evidence, hcl=hcl, quote=quote, nonce=nonce, init_data_digest=init_data_digest
        )
    )
    return out


def _parsed_quote(evidence: VtpmEvidence) -> Quote:
    quote = parse_quote(evidence.quote)
    count = len(quote.selected_pcrs)
    if len(evidence.pcrs) != count:
        raise MalformedError(
            f"the evidence has {len(evidence.pcrs)} PCR values, the quote selects {count}"
        )
    for index, value in enumerate(evidence.pcrs):
        if len(value) != SHA256_SIZE:
            raise MalformedError(f"PCR value {index} is {len(value)} bytes, not 32 (SHA-256)")
    return quote


def _vtpm_checks(
    out: VtpmChecks,
    evidence: VtpmEvidence,
    *,
    hcl: HclReport,
    quote: Quote,
    nonce: bytes,
    init_data_digest: bytes | None,
) -> list[Check]:
    report = hcl.snp_report
    checks = [
        Check(
            "hcl.vmpl",
            FailureClass.PLATFORM_POLICY,
            report.vmpl == 0,
            f"VMPL {report.vmpl}: the report must come from the paravisor at VMPL 0",
        )
    ]
    bound = hashlib.sha256(hcl.variable_data_bytes).digest() + bytes(32)
    if not hmac.compare_digest(bound, report.report_data):
        checks.append(
            Check.failed(
                "hcl.ak-binding",
                _BINDING,
                f"REPORT_DATA {report.report_data.hex()} is not SHA-256 of the HCL variable data "
                f"followed by zeros ({bound.hex()}): the attestation key is not the report's",
            )
        )
        checks.extend(Check.not_run(n, c, "the AK is not bound") for n, c in VTPM_CHECKS[2:])
        return checks
    checks.append(
        Check.passed("hcl.ak-binding", _BINDING, "REPORT_DATA = SHA-256(variable data) || zeros")
    )
    ak = hcl.variable_data.ak_public_key
    try:
        key = rsa.RSAPublicNumbers(ak.exponent, ak.modulus).public_key()
        key.verify(
            evidence.signature.signature, evidence.quote, padding.PKCS1v15(), hashes.SHA256()
        )
    except (InvalidSignature, ValueError):
        checks.append(
            Check.failed(
                "quote.signature",
                FailureClass.BAD_SIGNATURE,
                "the quote's signature does not verify with the HCLAkPub of the report "
                "(RSASSA-PKCS1-v1_5/SHA-256)",
            )
        )
        checks.extend(Check.not_run(n, c, "the quote is not signed") for n, c in VTPM_CHECKS[3:])
        return checks
    checks.append(
        Check.passed("quote.signature", FailureClass.BAD_SIGNATURE, "signed by the report's AK")
    )
    out.quote_authentic = True
    digest = pcr_digest_of(evidence.pcrs)
    pcrs_ok = hmac.compare_digest(digest, quote.pcr_digest)
    checks.append(
        Check(
            "quote.pcr-digest",
            _BINDING,
            pcrs_ok,
            f"SHA-256 of the PCR values {digest.hex()}, quote pcrDigest {quote.pcr_digest.hex()}",
        )
    )
    checks.append(_nonce_check(quote.extra_data, nonce))
    checks.append(_user_data_check(evidence.format_version, hcl.variable_data.user_data, nonce))
    if pcrs_ok:
        out.pcrs = dict(zip(quote.selected_pcrs, evidence.pcrs, strict=True))
        checks.append(_init_data_check(out.pcrs, init_data_digest))
    else:
        checks.append(
            Check.not_run(
                "workload.init-data",
                FailureClass.WORKLOAD_IDENTITY,
                "the PCR values are not the quoted ones",
            )
        )
    return checks


def _nonce_check(extra_data: bytes, nonce: bytes) -> Check:
    if hmac.compare_digest(extra_data, nonce):
        return Check.passed("quote.nonce", _BINDING, f"extraData = the expected {len(nonce)} bytes")
    return Check.failed(
        "quote.nonce",
        _BINDING,
        f"the quote's extraData {extra_data.hex()} is not the expected nonce {nonce.hex()}",
    )


def _user_data_check(version: int, user_data: bytes | None, nonce: bytes) -> Check:
    name = "hcl.user-data"
    if version < USER_DATA_FORMAT:
        return Check.passed(name, _BINDING, f"format v{version}: user-data is not bound")
    if user_data is not None and hmac.compare_digest(user_data[: len(nonce)], nonce):
        return Check.passed(name, _BINDING, "user-data starts with the expected nonce")
    shown = "absent" if user_data is None else user_data.hex()
    return Check.failed(
        name, _BINDING, f"format v2: user-data ({shown}) does not start with {nonce.hex()}"
    )


def _init_data_check(pcrs: dict[int, bytes], init_data_digest: bytes | None) -> Check:
    name = "workload.init-data"
    identity = FailureClass.WORKLOAD_IDENTITY
    if init_data_digest is None:
        return Check.passed(name, identity, "no init-data pinned: PCR 8 is not checked")
    value = pcrs.get(INIT_DATA_PCR)
    if value is None:
        return Check.failed(name, identity, "the quote does not cover PCR 8")
    want = pcr8_for_init_data(init_data_digest)
    if hmac.compare_digest(value, want):
        return Check.passed(name, identity, f"PCR 8 = extend(0, {init_data_digest.hex()})")
    return Check.failed(
        name,
        identity,
        f"PCR 8 is {value.hex()}, not {want.hex()} (one extend of the pinned init-data digest "
        f"{init_data_digest.hex()} from zero)",
    )
