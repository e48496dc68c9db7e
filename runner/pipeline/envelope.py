"""Assemble an attestation envelope from a replay outcome and the evidence over its binding."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from cryptography import x509
from pydantic import JsonValue

from attestation.abi.report import parse_report
from attestation.envelope.model import (
    API_VERSION,
    ENVELOPE_KIND,
    Binding,
    Envelope,
    Evidence,
)
from attestation.envelope.verification import platform_of_chain
from attestation.errors import AttestationError
from runner.errors import EvidenceError
from runner.evidence.base import Evidence as ProviderEvidence


def assemble_envelope(
    binding: Binding,
    evidence: ProviderEvidence,
    *,
    endorsement_pem: str,
    result: dict[str, JsonValue] | None,
) -> Envelope:
    """The envelope for ``binding``; convenience fields are copied from the report itself,
    and ``platform`` says ``sev-snp`` only when the endorsement chains to AMD's roots."""
    try:
        report = parse_report(evidence.report)
    except AttestationError as exc:
        raise EvidenceError(
            f"provider {evidence.provider} returned a malformed report: {exc}"
        ) from exc
    if not endorsement_pem.strip():
        raise EvidenceError(
            "no endorsement: the platform returned no certificate chain; pass "
            "--endorsement-bundle (VCEK or VLEK with ASK/ASVK and ARK) or fetch one with "
            "`attested-replay vcek fetch`"
        )
    certificates = x509.load_pem_x509_certificates(endorsement_pem.encode("ascii"))
    platform = platform_of_chain(certificates, now=datetime.now(UTC))
    return Envelope(
        api_version=API_VERSION,
        kind=ENVELOPE_KIND,
        run_id=binding.run_id,
        tenant=binding.tenant,
        binding=binding,
        report_data=report.report_data.hex(),
        measurement=report.measurement.hex(),
        host_data=report.host_data.hex(),
        platform=platform,
        evidence=Evidence(
            report=base64.b64encode(evidence.report).decode("ascii"),
            provider=evidence.provider,
            cert_chain=endorsement_pem,
            report_data_encoding=evidence.report_data_encoding,
        ),
        result=result,
    )


def envelope_json_bytes(envelope: Envelope) -> bytes:
    """The bytes written and published for an envelope (its digest is over exactly these)."""
    return (json.dumps(envelope.to_json_dict(), indent=2, ensure_ascii=False) + "\n").encode()
