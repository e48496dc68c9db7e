"""Pieces every real provider shares: the REPORT_DATA check and the error classes."""

from __future__ import annotations

from typing import Final

from attestation.abi.report import FIELDS, REPORT_SIZE
from attestation.envelope.binding import REPORT_DATA_SIZE, report_data_matches
from runner.errors import EvidenceError, EvidenceUnavailableError

REPORT_DATA_OFFSET: Final = FIELDS["report_data"].offset


class ReportDataMismatchError(EvidenceError):
    """The platform returned a report over different REPORT_DATA than requested."""


class NoTeeError(EvidenceUnavailableError):
    """The interface answered, but there is no SEV-SNP hardware behind it."""


class AgentAttestationDisabledError(EvidenceUnavailableError):
    """The CoCo agent's ``/aa/*`` endpoints are switched off in this pod."""


def check_report(report: bytes, expected_report_data: bytes, *, provider: str) -> bytes:
    """Return ``report`` if it is 1184 bytes and carries exactly ``expected_report_data``."""
    if len(report) != REPORT_SIZE:
        raise EvidenceError(
            f"{provider}: the platform returned a {len(report)}-byte report, "
            f"expected {REPORT_SIZE} bytes"
        )
    actual = report[REPORT_DATA_OFFSET : REPORT_DATA_OFFSET + REPORT_DATA_SIZE]
    if not report_data_matches(expected_report_data, actual):
        raise ReportDataMismatchError(
            f"{provider}: the report's REPORT_DATA ({actual.hex()}) is not what was requested "
            f"({expected_report_data.hex()}); refusing the report"
        )
    return report
