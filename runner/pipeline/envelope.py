"""The evidence of a run, checked once, and the envelope assembled from it.

:func:`endorse` parses what the provider returned (the report, and the certificates from the
platform or the operator's endorsement bundle) and verifies it with the tenant's verifier,
once: the verified chain says which root it reached, which is the envelope's ``platform``
(only a chain to AMD's pinned roots is ``sev-snp``). Certificates stay ``x509.Certificate``
objects until :func:`assemble_envelope` writes them into the envelope as PEM.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.hashes import SHA256
from pydantic import JsonValue

from attestation.abi.hcl import parse_hcl_report
from attestation.abi.report import AttestationReport, parse_report
from attestation.abi.tpm import parse_quote, serialize_signature
from attestation.contracts import MAX_ENVELOPE_BYTES
from attestation.endorsement.certificate import load_certificates
from attestation.endorsement.trust import TrustStore
from attestation.envelope.model import (
    API_VERSION,
    ENVELOPE_KIND,
    Binding,
    Envelope,
    Evidence,
    VtpmQuote,
)
from attestation.errors import AttestationError
from attestation.files import open_regular
from attestation.verify.az_vtpm import VtpmEvidence, check_vtpm_evidence
from attestation.verify.checks import VerificationResult
from attestation.verify.policy import CRYPTO_ONLY
from attestation.verify.verifier import Verifier
from runner.errors import EvidenceError, UsageError
from runner.evidence.base import Evidence as ProviderEvidence
from runner.evidence.bundle import pem_bundle
from runner.pipeline.verification import raise_unless_verified


@dataclass(frozen=True, slots=True)
class EndorsedEvidence:
    """A provider's evidence, parsed and verified (crypto-only) once."""

    evidence: ProviderEvidence
    report: AttestationReport
    certificates: tuple[x509.Certificate, ...]
    #: The raw-report verification; its ``chain`` and ``platform`` are the verified ones.
    verification: VerificationResult
    #: The verifier that checked it: its chain validation is memoized for the self-check.
    verifier: Verifier
    #: The REPORT_DATA value the evidence binds when it is not the report's own: the nonce of
    #: an az-snp-vtpm quote.
    quote_nonce: bytes | None = None

    @property
    def bound_report_data(self) -> bytes:
        """The REPORT_DATA value this evidence binds (the envelope's ``reportData``)."""
        return self.report.report_data if self.quote_nonce is None else self.quote_nonce


def endorse(
    evidence: ProviderEvidence,
    chain: Sequence[bytes],
    *,
    trust: TrustStore,
    now: datetime,
) -> EndorsedEvidence:
    """Parse and verify ``evidence`` with its certificate ``chain`` (DER, the endorsement
    first), trusting ``trust``.

    Raises:
        EvidenceError: the report is malformed, or there is no (parseable) certificate.
        VerificationFailedError: the certificate does not endorse the report.
    """
    try:
        report = (
            parse_report(evidence.report)
            if evidence.vtpm is None
            else parse_hcl_report(evidence.report).snp_report
        )
    except AttestationError as exc:
        raise EvidenceError(
            f"provider {evidence.provider} returned a malformed report: {exc}"
        ) from exc
    if not chain:
        raise EvidenceError(
            "no endorsement: the platform returned no certificate chain; pass "
            "--endorsement-bundle (VCEK or VLEK with ASK/ASVK and ARK) or fetch one with "
            "`attested-replay vcek fetch`"
        )
    certificates: list[x509.Certificate] = []
    for der in chain:
        try:
            certificates.extend(load_certificates(der))
        except AttestationError as exc:
            raise EvidenceError(f"the platform returned an unparseable certificate: {exc}") from exc
    # A certificate given twice (the platform's VCEK and a bundle's) is read once.
    certificates = list(
        {certificate.fingerprint(SHA256()): certificate for certificate in certificates}.values()
    )
    verifier = Verifier(trust, policy=CRYPTO_ONLY)
    if evidence.vtpm is not None:
        return _endorse_vtpm(evidence, evidence.vtpm, tuple(certificates), verifier, now=now)
    verification = verifier.check(evidence.report, certificates, now=now).result()
    raise_unless_verified(verification, "the evidence this run obtained does not verify")
    return EndorsedEvidence(evidence, report, tuple(certificates), verification, verifier)


def _endorse_vtpm(
    evidence: ProviderEvidence,
    vtpm: VtpmEvidence,
    certificates: tuple[x509.Certificate, ...],
    verifier: Verifier,
    *,
    now: datetime,
) -> EndorsedEvidence:
    """az-snp-vtpm evidence, verified as a tenant would (crypto only) with the nonce its quote
    carries (the provider checked it is the one asked for; the envelope's self-check checks it
    against the binding)."""
    try:
        nonce = parse_quote(vtpm.quote).extra_data
    except AttestationError as exc:
        raise EvidenceError(
            f"provider {evidence.provider} returned a malformed quote: {exc}"
        ) from exc
    checked = check_vtpm_evidence(vtpm, certificates, verifier=verifier, nonce=nonce, now=now)
    verification = checked.result()
    raise_unless_verified(verification, "the evidence this run obtained does not verify")
    assert checked.hcl is not None  # verified
    assert verification.chain is not None
    # The verified path (VCEK, ASK, ARK): the agent sends the VCEK alone, and the envelope
    # carries the whole chain, as for SEV-SNP evidence.
    path = verification.chain
    report = checked.hcl.snp_report
    return EndorsedEvidence(
        evidence,
        report,
        (path.leaf, path.intermediate, path.ark),
        verification,
        verifier,
        nonce,
    )


def assemble_envelope(
    binding: Binding, endorsed: EndorsedEvidence, *, result: dict[str, JsonValue] | None
) -> Envelope:
    """The envelope for ``binding``: convenience fields copied from the verified report, and
    ``platform`` from the root its chain reached."""
    report = endorsed.report
    platform = endorsed.verification.platform
    assert platform is not None  # endorse() returns only verified evidence
    return Envelope(
        api_version=API_VERSION,
        kind=ENVELOPE_KIND,
        run_id=binding.run_id,
        tenant=binding.tenant,
        binding=binding,
        report_data=endorsed.bound_report_data.hex(),
        measurement=report.measurement.hex(),
        host_data=report.host_data.hex(),
        platform=platform,
        evidence=Evidence(
            report=base64.b64encode(endorsed.evidence.report).decode("ascii"),
            provider=endorsed.evidence.provider,
            cert_chain=pem_bundle(endorsed.certificates),
            report_data_encoding=endorsed.evidence.report_data_encoding,
            **_vtpm_fields(endorsed.evidence.vtpm),
        ),
        result=result,
    )


def _vtpm_fields(vtpm: VtpmEvidence | None) -> dict[str, Any]:
    """``evidence.kind`` and ``evidence.vtpm`` of az-snp-vtpm evidence (nothing otherwise)."""
    if vtpm is None:
        return {}
    quote = VtpmQuote(
        quote=base64.b64encode(vtpm.quote).decode("ascii"),
        signature=base64.b64encode(serialize_signature(vtpm.signature)).decode("ascii"),
        pcrs=tuple(pcr.hex() for pcr in vtpm.pcrs),
        format_version=vtpm.format_version,
    )
    return {"kind": "az-snp-vtpm", "vtpm": quote}


def envelope_json_bytes(envelope: Envelope) -> bytes:
    """The bytes written and published for an envelope (its digest is over exactly these)."""
    return envelope_document_bytes(envelope.to_json_dict())


def envelope_document_bytes(document: Mapping[str, object]) -> bytes:
    """An envelope's JSON document as a run writes it: indented by two spaces, UTF-8, a final
    line break."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()


def read_envelope_file(path: Path, *, what: str) -> bytes:
    """The bytes of envelope file ``path`` (``what`` names it in messages, e.g. the option),
    read up to one byte past :data:`MAX_ENVELOPE_BYTES` so that the envelope parser names an
    oversized one; a regular file only (a FIFO or device would block or never end).

    Raises:
        UsageError: ``<what> <path>: cannot read it: <reason>``.
    """
    try:
        with open_regular(path) as handle:
            return handle.read(MAX_ENVELOPE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read it: {exc.strerror or exc}") from exc
