"""Endorsement bundles: a PEM file with the VCEK or VLEK plus ASK/ASVK and ARK.

Current Kata hosts send no certificate table, so an operator mounts the chip's certificates
into the pod (``--endorsement-bundle``; ``attested-replay vcek fetch --out`` writes one).
The bundle is only carried into the envelope: the tenant's verifier checks it against
AMD's pinned roots, so nothing here decides trust.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from attestation.files import FileTooLargeError, read_regular
from runner.errors import InputError

_PEM_BEGIN: Final = b"-----BEGIN "
_CERT_BEGIN: Final = b"-----BEGIN CERTIFICATE-----"
#: A bundle is three certificates of a few KB; anything far larger is not a bundle.
MAX_BUNDLE_BYTES: Final = 256 * 1024


def _role_rank(certificate: x509.Certificate) -> int:
    """0 for the signer (not a CA), 1 for intermediates, 2 for self-issued roots."""
    if certificate.subject == certificate.issuer:
        return 2
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return 0
    return 1 if constraints.value.ca else 0


def parse_endorsement_bundle(data: bytes, *, source: str = "bundle") -> tuple[bytes, ...]:
    """DER certificates of a PEM bundle, ordered signer, intermediate, root."""
    if not data.strip():
        raise InputError(f"endorsement bundle {source} is empty")
    if data.count(_PEM_BEGIN) != data.count(_CERT_BEGIN):
        raise InputError(f"endorsement bundle {source} holds PEM blocks that are not certificates")
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise InputError(
            f"endorsement bundle {source} is not a PEM certificate bundle: {exc}"
        ) from exc
    ordered = sorted(certificates, key=_role_rank)  # stable: keeps the file order per role
    if _role_rank(ordered[0]) != 0:
        raise InputError(
            f"endorsement bundle {source} has no VCEK/VLEK (every certificate is a CA)"
        )
    return tuple(cert.public_bytes(Encoding.DER) for cert in ordered)


def load_endorsement_bundle(path: Path) -> tuple[bytes, ...]:
    """Read ``path`` (PEM: VCEK or VLEK, ASK or ASVK, ARK) into DER certificates, signer first."""
    try:
        data = read_regular(path, MAX_BUNDLE_BYTES)
    except FileTooLargeError as exc:
        raise InputError(
            f"endorsement bundle {path} is larger than {MAX_BUNDLE_BYTES} bytes; "
            "a bundle is a few KB"
        ) from exc
    except OSError as exc:
        raise InputError(f"cannot read endorsement bundle {path}: {exc}") from exc
    return parse_endorsement_bundle(data, source=str(path))


def pem_bundle(certificates: Sequence[x509.Certificate]) -> str:
    """Certificates (the endorsement first) as one PEM bundle: how they are written."""
    return "".join(c.public_bytes(Encoding.PEM).decode("ascii") for c in certificates)
