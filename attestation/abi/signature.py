"""The report signature: ECDSA P-384 with SHA-384 over bytes 0x000-0x29F.

R and S are stored at 0x2A0 and 0x2E8 as 72-byte little-endian integers; ``cryptography``
wants a DER ``Ecdsa-Sig-Value``, built with ``encode_dss_signature``.
"""

from __future__ import annotations

from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from attestation.abi.report import (
    SIGNATURE_COMPONENT_SIZE,
    SIGNED_REGION_END,
    AttestationReport,
    serialize_report,
)
from attestation.errors import BadSignatureError

_ECDSA_SHA384: Final = ec.ECDSA(hashes.SHA384())


def signature_der(report: AttestationReport) -> bytes:
    """R and S of the report as a DER ECDSA signature."""
    r, s = report.signature_rs
    return encode_dss_signature(r, s)


def rs_from_der(der: bytes) -> tuple[int, int]:
    """The (R, S) integers of a DER ECDSA signature, e.g. to call ``with_signature``."""
    return decode_dss_signature(der)


def verify_report_signature(
    report: AttestationReport,
    public_key: ec.EllipticCurvePublicKey,
    signed_bytes: bytes | None = None,
) -> None:
    """Verify the report's signature with a VCEK/VLEK public key.

    ``signed_bytes`` may pass the original bytes 0x000-0x29F of the input (identical to
    ``report.signed_bytes()``, since parsing round-trips) to avoid re-serializing.

    Raises:
        BadSignatureError: the report is unsigned (SIGNING_KEY 7 or an all-zero signature),
            the key is not P-384, or the signature does not verify.
    """
    if report.is_unsigned:
        raise BadSignatureError(
            "report is unsigned (SIGNING_KEY = 7 or an all-zero signature field)"
        )
    if not isinstance(public_key.curve, ec.SECP384R1):
        raise BadSignatureError(f"signing key is on {public_key.curve.name}, not P-384")
    if signed_bytes is None:
        signed_bytes = serialize_report(report)[:SIGNED_REGION_END]
    elif len(signed_bytes) != SIGNED_REGION_END:
        raise ValueError(f"signed bytes must be {SIGNED_REGION_END} long")
    try:
        public_key.verify(signature_der(report), signed_bytes, _ECDSA_SHA384)
    except InvalidSignature:
        raise BadSignatureError(
            "report signature does not verify with the certificate's public key "
            "(ECDSA P-384/SHA-384 over 0x000-0x29f)"
        ) from None


def sign_report_bytes(
    report: AttestationReport, private_key: ec.EllipticCurvePrivateKey
) -> AttestationReport:
    """Sign a report's body with a P-384 key and return it with R and S set (simulation, tests)."""
    der = private_key.sign(report.signed_bytes(), _ECDSA_SHA384)
    r, s = rs_from_der(der)
    assert max(r, s).bit_length() <= 8 * SIGNATURE_COMPONENT_SIZE
    return report.with_signature(r, s)
