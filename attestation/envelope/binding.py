"""REPORT_DATA binding: how an envelope's ``binding`` object is tied to the report."""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import canonicalize
from attestation.envelope.model import Binding, ReportDataEncoding
from attestation.errors import UsageError

REPORT_DATA_SIZE: Final = 64


def report_data_for(binding: Binding, encoding: ReportDataEncoding = "sha512") -> bytes:
    """The 64 REPORT_DATA bytes a genuine run puts in its report for ``binding``."""
    return report_data_from_canonical(binding.canonical_bytes(), encoding)


def report_data_from_canonical(canonical_binding: bytes, encoding: ReportDataEncoding) -> bytes:
    """REPORT_DATA from the RFC 8785 bytes of a binding (evidence providers start here)."""
    if encoding == "sha512":
        return hashlib.sha512(canonical_binding).digest()
    if encoding == "sha256-hex":
        return hashlib.sha256(canonical_binding).hexdigest().encode("ascii")
    raise UsageError(f"unknown report data encoding {encoding!r}")


def report_data_matches(expected: bytes, actual: bytes) -> bool:
    """Constant-time comparison of two REPORT_DATA values."""
    return hmac.compare_digest(expected, actual)


def result_digest(result: object) -> str:
    """``sha256:`` of the canonical JSON of an evaluation result."""
    return canonical_result_digest(canonicalize(result))


def canonical_result_digest(canonical: bytes) -> str:
    """:func:`result_digest` of a result whose RFC 8785 bytes the caller already has."""
    return sha256_digest(canonical)
