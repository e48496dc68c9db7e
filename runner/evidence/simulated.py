"""Simulated evidence: real report layout and signatures from the simulated AMD-like PKI.

Used only when asked for by name (``--evidence simulated``). A tenant accepts such evidence
only by pinning the simulated root's fingerprint in its expected-values file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from attestation.binding import report_data_from_canonical
from attestation.product import ProductLine
from runner.evidence.base import Evidence
from runner.simulated_state import load_or_create_simulated_amd
from runner.workload import code_digest

SIMULATED_PROVIDER = "simulated"


def simulated_measurement() -> bytes:
    """The MEASUREMENT simulated reports carry: SHA-384 over a label and the code digest,
    so that a change of code changes it, as a change of guest image would on hardware."""
    return hashlib.sha384(b"attested-replay simulated launch\0" + code_digest().encode()).digest()


class SimulatedProvider:
    """Signs reports with the simulated PKI kept in the state directory."""

    name = SIMULATED_PROVIDER

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        product_line: ProductLine = ProductLine.MILAN,
        measurement: bytes | None = None,
        host_data: bytes | None = None,
    ) -> None:
        self._state_dir = state_dir
        self._product_line = product_line
        self._measurement = measurement if measurement is not None else simulated_measurement()
        self._host_data = host_data if host_data is not None else bytes(32)

    def check_available(self) -> None:
        """The simulated PKI is always available (it is created on first use)."""

    def obtain(self, canonical_binding: bytes) -> Evidence:
        amd = load_or_create_simulated_amd(self._state_dir)
        report_data = report_data_from_canonical(canonical_binding, "sha512")
        report = amd.sign_report(
            report_data=report_data,
            product_line=self._product_line,
            measurement=self._measurement,
            host_data=self._host_data,
        )
        chain_pem = amd.endorsement_pem(report)
        certificates = x509.load_pem_x509_certificates(chain_pem.encode("ascii"))
        return Evidence(
            report=report,
            cert_chain=tuple(cert.public_bytes(Encoding.DER) for cert in certificates),
            provider=SIMULATED_PROVIDER,
            report_data_encoding="sha512",
        )
