"""The simulated AMD's certificate machinery: names, lifetimes, RSA-PSS signing, PEM.

Certificates mirror AMD's (RSA-4096 authorities signing with RSASSA-PSS / SHA-384 /
MGF1-SHA-384 / salt 48) so that simulated evidence runs through exactly the verifier code real
evidence does; every subject carries ``O=SIMULATED - not AMD`` so it is never mistaken for AMD.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from attestation.endorsement.trust import SIMULATED_ORGANIZATION
from attestation.errors import MalformedError

SIMULATED_UNIT: Final = "attested-replay simulated PKI"
ARK_COMMON_NAME: Final = "ARK-Simulated (NOT AMD)"
ASK_COMMON_NAME: Final = "SEV-Simulated"
ASVK_COMMON_NAME: Final = "SEV-VLEK-Simulated"
RSA_BITS: Final = 4096
ROOT_LIFETIME: Final = dt.timedelta(days=25 * 365)
VCEK_LIFETIME: Final = dt.timedelta(days=7 * 365)
VLEK_LIFETIME: Final = dt.timedelta(days=365)
BACKDATE: Final = dt.timedelta(days=1)
PSS: Final = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def subject_name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            # AMD's order (CN last), so RFC 4514 strings read "CN=...,O=...,OU=...".
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, SIMULATED_UNIT),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, SIMULATED_ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def issue_authority(
    common_name: str,
    key: rsa.RSAPrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: rsa.RSAPrivateKey,
    now: dt.datetime,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject_name(common_name))
        .issuer_name(subject_name(common_name) if issuer is None else issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + ROOT_LIFETIME)
        .add_extension(
            x509.BasicConstraints(ca=True, path_length=None if issuer is None else 0),
            critical=True,
        )
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=issuer is None,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return builder.sign(issuer_key, hashes.SHA384(), rsa_padding=PSS)


def cert_pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")


def key_pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")


def load_cert(state: Mapping[str, str], name: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(state[name].encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise MalformedError(f"simulated AMD state '{name}' is not a PEM certificate") from exc


def load_key(state: Mapping[str, str], name: str) -> rsa.RSAPrivateKey:
    try:
        # The RSA consistency check costs ~0.3 s per 4096-bit key. from_state instead compares
        # each key's public half with its certificate, and a damaged private half only yields
        # signatures that fail verification.
        key = serialization.load_pem_private_key(
            state[name].encode("ascii"), password=None, unsafe_skip_rsa_key_validation=True
        )
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise MalformedError(f"simulated AMD state '{name}' is not a PEM private key") from exc
    if not isinstance(key, rsa.RSAPrivateKey) or key.key_size != RSA_BITS:
        raise MalformedError(f"simulated AMD state '{name}' is not an RSA-4096 key")
    return key
