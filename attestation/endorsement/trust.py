"""The pinned trust store: AMD's ARK/ASK/ASVK per product line, and an opt-in simulated root.

The nine AMD certificates ship as package data
(``attestation/endorsement/roots/<line>/{ark,ask,asvk}.pem``) and are checked against the
SHA-256 of their DER on load, so a modified installation fails closed instead of trusting
whatever sits in the package directory. Nothing carried in the
input (an envelope's certChain, a PEM bundle) ever becomes a root: the only way to add one is
:meth:`TrustStore.with_simulated_root`, which a tenant calls deliberately.
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm

from attestation.abi.product import ProductLine, SignerKind
from attestation.contracts import sha256_digest
from attestation.endorsement.certificate import certificate_der
from attestation.errors import MalformedError, UntrustedChainError, UsageError

#: Organization (O) of every simulated certificate; AMD's is "Advanced Micro Devices".
SIMULATED_ORGANIZATION = "SIMULATED - not AMD"


class AmdRole(enum.StrEnum):
    """The three AMD certificates per product line."""

    ARK = "ark"
    ASK = "ask"
    ASVK = "asvk"


#: SHA-256 of each pinned AMD certificate's DER: AMD's public certificates, as KDS serves them
#: at ``/vcek/v1/<line>/cert_chain`` (ASK, ARK) and ``/vlek/v1/<line>/cert_chain`` (ASVK, ARK).
PINNED_FINGERPRINTS: Mapping[tuple[ProductLine, AmdRole], str] = types.MappingProxyType(
    {
        (ProductLine.MILAN, AmdRole.ARK): (
            "sha256:69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd"
        ),
        (ProductLine.MILAN, AmdRole.ASK): (
            "sha256:67d303bd3905fd38db8b20e0793699870e7fa612eaad5dec358293fd8c0bac1b"
        ),
        (ProductLine.MILAN, AmdRole.ASVK): (
            "sha256:c5e081f59b7efab1fe2f8b505e159704e72f29cab7ef7cf628a05a42439082f5"
        ),
        (ProductLine.GENOA, AmdRole.ARK): (
            "sha256:4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1"
        ),
        (ProductLine.GENOA, AmdRole.ASK): (
            "sha256:5464738c1546aed5f2cecf1dc98c5c960a92e8913238a61711bc90ec6e828521"
        ),
        (ProductLine.GENOA, AmdRole.ASVK): (
            "sha256:197e610743a917d6b9bb982a5a9226ccc0a15b611be0619e626aca9151457372"
        ),
        (ProductLine.TURIN, AmdRole.ARK): (
            "sha256:1f084161a44bb6d93778a904877d4819cafa5d05ef4193b2ded9dd9c73dd3f6a"
        ),
        (ProductLine.TURIN, AmdRole.ASK): (
            "sha256:5b77ef5fe7a7a004fd9032668fba9d0fda22f88c4442069a479636a6ae3b3185"
        ),
        (ProductLine.TURIN, AmdRole.ASVK): (
            "sha256:104e10a8bd060a3c20a434261a57d0588fd65a88915b4f65b08bdecaf8df1a3c"
        ),
    }
)

_ROLE_FOR_SIGNER: Mapping[SignerKind, AmdRole] = types.MappingProxyType(
    {SignerKind.VCEK: AmdRole.ASK, SignerKind.VLEK: AmdRole.ASVK}
)


def fingerprint(certificate: x509.Certificate) -> str:
    """``sha256:<hex>`` of the certificate's DER: how roots are pinned and reported."""
    return sha256_digest(certificate_der(certificate))


def intermediate_role(signer_kind: SignerKind) -> AmdRole:
    """ASK for VCEKs, ASVK for VLEKs."""
    return _ROLE_FOR_SIGNER[signer_kind]


def load_pinned_certificate(product_line: ProductLine, role: AmdRole) -> x509.Certificate:
    """Load one shipped AMD certificate and check it against its pinned fingerprint."""
    name = f"{product_line.value.lower()}/{role.value}.pem"
    resource = resources.files("attestation.endorsement").joinpath("roots", *name.split("/"))
    try:
        certificate = x509.load_pem_x509_certificate(resource.read_bytes())
    except (OSError, ValueError) as exc:
        raise UntrustedChainError(
            f"pinned AMD certificate roots/{name} is unreadable: {exc}"
        ) from exc
    expected = PINNED_FINGERPRINTS[product_line, role]
    actual = fingerprint(certificate)
    if actual != expected:
        raise UntrustedChainError(
            f"pinned AMD certificate roots/{name} has fingerprint {actual}, expected {expected}"
        )
    return certificate


@functools.cache
def _amd_certificates() -> Mapping[tuple[ProductLine, AmdRole], x509.Certificate]:
    return types.MappingProxyType(
        {key: load_pinned_certificate(*key) for key in PINNED_FINGERPRINTS}
    )


@dataclass(frozen=True, slots=True)
class TrustStore:
    """Immutable set of trust anchors: AMD's pinned certificates plus any simulated ARKs the
    caller pinned (every one of them is tried)."""

    _amd: Mapping[tuple[ProductLine, AmdRole], x509.Certificate]
    simulated_roots: tuple[x509.Certificate, ...] = ()

    @classmethod
    def amd(cls) -> TrustStore:
        """AMD's pinned roots only (the default a tenant verifies against)."""
        return cls(_amd_certificates())

    def with_simulated_root(self, ark: x509.Certificate | bytes) -> TrustStore:
        """A new store that also trusts the given simulated ARK (PEM/DER bytes or certificate).

        Pinning one of AMD's own certificates this way is refused: it would make AMD-signed
        evidence look simulated. A root whose public key cannot be read is malformed input.
        """
        if isinstance(ark, bytes):
            ark = _load_single_certificate(ark)
        pinned = fingerprint(ark)
        if pinned in PINNED_FINGERPRINTS.values():
            raise UsageError(f"{pinned} is an AMD certificate, not a simulated root")
        try:
            ark.public_key()
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise MalformedError(
                f"simulated root {pinned}: its public key cannot be read: {exc}"
            ) from exc
        if any(fingerprint(root) == pinned for root in self.simulated_roots):
            return self
        return TrustStore(self._amd, (*self.simulated_roots, ark))

    def ark(self, product_line: ProductLine) -> x509.Certificate:
        """AMD's root for a product line."""
        return self._amd[product_line, AmdRole.ARK]

    def intermediate(self, product_line: ProductLine, signer_kind: SignerKind) -> x509.Certificate:
        """AMD's ASK (VCEK) or ASVK (VLEK) for a product line."""
        return self._amd[product_line, intermediate_role(signer_kind)]

    def amd_certificates(self) -> Mapping[tuple[ProductLine, AmdRole], x509.Certificate]:
        """All nine pinned AMD certificates."""
        return self._amd

    @property
    def has_simulated_root(self) -> bool:
        """Whether the caller opted in to a simulated root."""
        return bool(self.simulated_roots)

    def is_simulated(self, root: x509.Certificate) -> bool:
        """Whether ``root`` (e.g. the ARK of a verified chain) is one of this store's
        simulated roots."""
        return fingerprint(root) in {fingerprint(pinned) for pinned in self.simulated_roots}


def _load_single_certificate(data: bytes) -> x509.Certificate:
    try:
        if b"-----BEGIN" in data:
            certificates = x509.load_pem_x509_certificates(data)
        else:
            certificates = [x509.load_der_x509_certificate(data)]
    except ValueError as exc:
        raise MalformedError(f"simulated root cannot be parsed as a certificate: {exc}") from exc
    if len(certificates) != 1:
        raise MalformedError(
            f"simulated root must be exactly one certificate, found {len(certificates)}"
        )
    return certificates[0]
