"""The evidence-provider interface: REPORT_DATA in, a raw SNP report and its endorsement out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from attestation.envelope.model import ReportDataEncoding
from attestation.verify.az_vtpm import VtpmEvidence


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a provider obtained from the platform for one request."""

    report: bytes
    """The raw 1184-byte attestation report; az-snp-vtpm: the 2600-byte HCL report."""
    cert_chain: tuple[bytes, ...]
    """DER certificates the platform returned (VCEK/VLEK, ASK/ASVK, ARK); may be empty."""
    provider: str
    """Provider name as recorded in the envelope (``coco-aa``, ``configfs-tsm``, ...)."""
    report_data_encoding: ReportDataEncoding
    """How REPORT_DATA was derived from the canonical binding."""
    vtpm: VtpmEvidence | None = None
    """Azure's az-snp-vtpm evidence (its ``hcl_report`` is ``report``): the binding's hash is
    the nonce of its vTPM quote, not the report's REPORT_DATA."""


class EvidenceProvider(Protocol):
    """A source of SEV-SNP evidence bound to caller-chosen data."""

    name: str

    def check_available(self) -> None:
        """Raise :class:`runner.errors.EvidenceUnavailableError` when the interface is not
        there at all, cheaply and before any work is done; a present but failing interface
        is reported by :meth:`obtain`."""
        ...

    def obtain(self, canonical_binding: bytes) -> Evidence:
        """Request a report whose REPORT_DATA commits to ``canonical_binding``.

        Implementations derive REPORT_DATA with
        :func:`attestation.envelope.binding.report_data_from_canonical`, check that the returned
        report carries exactly that REPORT_DATA, and raise :class:`runner.errors.EvidenceError`
        subclasses on failure. They never fall back to another provider.
        """
        ...
