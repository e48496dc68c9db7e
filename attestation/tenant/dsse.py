"""DSSE v1 signing: the envelope an in-toto statement travels in, signed by a key the tenant
holds.

Format: secure-systems-lab/dsse ``envelope.md`` and ``protocol.md`` (v1.0): the signature is
over ``PAE(payloadType, payload)`` = ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``
(lengths in ASCII decimal); the envelope is ``{"payload": base64(body), "payloadType": type,
"signatures": [{"keyid": ..., "sig": base64(signature)}]}`` (standard base64 with padding).

Keys: a PEM private key (PKCS #8, unencrypted) of type Ed25519 (signature: 64 bytes, RFC 8032)
or ECDSA on P-256 with SHA-256 or P-384 with SHA-384 (signature: DER, as DSSE's ECDSA users
write it). ``keyid`` is the hex SHA-256 of the public key's DER SubjectPublicKeyInfo, so a
consumer holding the public key computes it itself.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from attestation.files import FileTooLargeError, read_regular
from attestation.tenant.errors import TenantUsageError

INTOTO_PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
#: A PEM private key is a few hundred bytes; this refuses anything else without reading it.
MAX_KEY_FILE_BYTES: Final = 64 * 1024
_CURVES: Final = {"secp256r1": hashes.SHA256, "secp384r1": hashes.SHA384}


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A tenant's DSSE signing key (Ed25519, ECDSA P-256 or P-384)."""

    private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey

    @property
    def public_der(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def keyid(self) -> str:
        return hashlib.sha256(self.public_der).hexdigest()

    def sign(self, message: bytes) -> bytes:
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            return self.private.sign(message)
        algorithm = _CURVES[self.private.curve.name]()
        return self.private.sign(message, ec.ECDSA(algorithm))


def load_signing_key(path: Path, *, what: str) -> SigningKey:
    """The PEM private key at ``path`` (a regular file); :class:`TenantUsageError` naming
    ``what`` (the option) and the problem otherwise."""
    try:
        data = read_regular(path, MAX_KEY_FILE_BYTES)
    except FileTooLargeError as exc:
        raise TenantUsageError(f"{what} {path}: larger than {MAX_KEY_FILE_BYTES} bytes") from exc
    except OSError as exc:
        raise TenantUsageError(f"{what} {path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise TenantUsageError(
            f"{what} {path}: not an unencrypted PEM private key ({exc})"
        ) from exc
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return SigningKey(key)
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in _CURVES:
        return SigningKey(key)
    raise TenantUsageError(
        f"{what} {path}: an Ed25519, ECDSA P-256 or ECDSA P-384 key is needed for DSSE signatures"
    )


def sign_envelope(payload: bytes, key: SigningKey, *, payload_type: str) -> dict[str, Any]:
    """The DSSE envelope of ``payload`` with one signature by ``key``."""
    return {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": payload_type,
        "signatures": [
            {
                "keyid": key.keyid,
                "sig": base64.b64encode(key.sign(pae(payload_type, payload))).decode("ascii"),
            }
        ],
    }
