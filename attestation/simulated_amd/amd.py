"""A simulated AMD: its own PKI and a signer that writes real-layout SNP reports.

It mirrors AMD's hierarchy so simulated evidence runs through exactly the same verifier code:

- ARK: RSA-4096, self-signed with RSASSA-PSS / SHA-384 / MGF1-SHA-384 / salt 48, subject
  ``CN=ARK-Simulated (NOT AMD), OU=attested-replay simulated PKI, O=SIMULATED - not AMD``.
- ASK (``CN=SEV-Simulated``) and ASVK (``CN=SEV-VLEK-Simulated``): RSA-4096, issued by the ARK.
  One ARK/ASK/ASVK serve every product line (a tenant pins one simulated root).
- VCEK / VLEK: ECDSA P-384, ``CN=SEV-VCEK`` / ``CN=SEV-VLEK`` (kept, so they parse exactly like
  AMD's) with ``O=SIMULATED - not AMD``, a random serial (AMD's are 0, which ``cryptography``
  refuses to issue), and AMD's KDS extensions:
  structVersion (1 on Turin, else 0), productName ("Milan-B0", "Genoa", "Turin"; VLEKs use the
  bare line name), the SPLs of REPORTED_TCB (fmc and no spl_4 on Turin), hwID as raw bytes (the
  64-byte CHIP_ID, or its first 8 bytes on Turin) for VCEKs, csp_id for VLEKs.

Like a real chip, the VCEK key is a function of (product line, CHIP_ID, REPORTED_TCB): it is
derived with HKDF-SHA-384 from a seed kept in the state, so re-issuing a certificate (new
validity, new signature) keeps the key. VLEK keys derive from (product line, csp_id, TCB).

This module does no file IO: :meth:`SimulatedAmd.to_state` / :meth:`SimulatedAmd.from_state`
exchange PEM/hex strings; :mod:`attestation.simulated_amd.state` persists them in a directory.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import (
    SIGNING_KEY_VCEK,
    SIGNING_KEY_VLEK,
    AttestationReport,
    GuestPolicy,
    PlatformInfo,
    parse_report,
    serialize_report,
    unsigned_template,
)
from attestation.abi.signature import sign_report_bytes
from attestation.abi.tcb import TcbVersion
from attestation.endorsement import der
from attestation.endorsement.certificate import (
    OID_CSP_ID,
    OID_HWID,
    OID_PRODUCT_NAME,
    OID_STRUCT_VERSION,
    SPL_OIDS,
)
from attestation.endorsement.trust import fingerprint
from attestation.errors import MalformedError
from attestation.simulated_amd.pki import (
    ARK_COMMON_NAME,
    ASK_COMMON_NAME,
    ASVK_COMMON_NAME,
    BACKDATE,
    PSS,
    RSA_BITS,
    VCEK_LIFETIME,
    VLEK_LIFETIME,
    cert_pem,
    issue_authority,
    key_pem,
    load_cert,
    load_key,
    subject_name,
    utc_now,
)

STATE_FORMAT: Final = "attested-replay-simulated-amd/1"
DEFAULT_CSP_ID: Final = "CN=simulated.csp.invalid"
_SEED_SIZE: Final = 32
_P384_ORDER: Final = int(
    "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf"
    "581a0db248b0a77aecec196accc52973",
    16,
)
_TURIN_HWID_SIZE: Final = 8

#: A fixed simulated CHIP_ID (Turin keeps 8 significant bytes, the rest zero).
SIMULATED_CHIP_ID: Final = hashlib.sha512(b"attested-replay simulated chip").digest()

#: Realistic REPORTED_TCB per product line (values seen on real reports in tests/assets/real).
DEFAULT_TCB: Final[Mapping[ProductLine, TcbVersion]] = types.MappingProxyType(
    {
        ProductLine.MILAN: TcbVersion(ProductLine.MILAN, bl=4, tee=0, snp=24, ucode=219, spl4=0),
        ProductLine.GENOA: TcbVersion(ProductLine.GENOA, bl=10, tee=0, snp=25, ucode=84, spl4=0),
        ProductLine.TURIN: TcbVersion(ProductLine.TURIN, bl=1, tee=0, snp=2, ucode=71, fmc=0),
    }
)
#: Firmware (major, minor, build) per product line, as on those reports.
DEFAULT_FIRMWARE: Final[Mapping[ProductLine, tuple[int, int, int]]] = types.MappingProxyType(
    {
        ProductLine.MILAN: (1, 55, 29),
        ProductLine.GENOA: (1, 55, 43),
        ProductLine.TURIN: (1, 55, 61),
    }
)
#: A fixed non-zero launch digest for reports that do not choose one.
DEFAULT_MEASUREMENT: Final = hashlib.sha384(b"attested-replay simulated launch").digest()
_VCEK_PRODUCT_NAMES: Final[Mapping[ProductLine, str]] = types.MappingProxyType(
    {ProductLine.MILAN: "Milan-B0", ProductLine.GENOA: "Genoa", ProductLine.TURIN: "Turin"}
)
_SIGNING_KEY_CODES: Final[Mapping[SignerKind, int]] = types.MappingProxyType(
    {SignerKind.VCEK: SIGNING_KEY_VCEK, SignerKind.VLEK: SIGNING_KEY_VLEK}
)
#: The entries of :meth:`SimulatedAmd.to_state` (file names in the state directory).
STATE_KEYS: Final = (
    "format",
    "ark.pem",
    "ark.key.pem",
    "ask.pem",
    "ask.key.pem",
    "asvk.pem",
    "asvk.key.pem",
    "vek-seed.hex",
)
#: State entries that hold secrets (persisted with mode 0600).
PRIVATE_STATE_KEYS: Final = frozenset(
    {"ark.key.pem", "ask.key.pem", "asvk.key.pem", "vek-seed.hex"}
)


def _tcb_for(product_line: ProductLine, reported_tcb: TcbVersion | int | None) -> TcbVersion:
    if reported_tcb is None:
        return DEFAULT_TCB[product_line]
    if isinstance(reported_tcb, int):
        return TcbVersion.decode(reported_tcb, product_line)
    if reported_tcb.product is not product_line:
        raise ValueError(f"TCB is for {reported_tcb.product}, not {product_line}")
    return reported_tcb


def _chip_id_for(product_line: ProductLine, chip_id: bytes | None) -> bytes:
    if chip_id is None:
        chip_id = SIMULATED_CHIP_ID
        if product_line is ProductLine.TURIN:
            chip_id = chip_id[:_TURIN_HWID_SIZE] + bytes(64 - _TURIN_HWID_SIZE)
    if len(chip_id) != 64:
        raise ValueError(f"CHIP_ID must be 64 bytes, got {len(chip_id)}")
    if product_line is ProductLine.TURIN and any(chip_id[_TURIN_HWID_SIZE:]):
        raise ValueError("a Turin CHIP_ID has 8 significant bytes and 56 zero bytes")
    return chip_id


@dataclass(frozen=True, slots=True, eq=False)
class SimulatedAmd:
    """The simulated AMD key hierarchy (private keys included: keep its state private)."""

    ark_key: rsa.RSAPrivateKey
    ark_certificate: x509.Certificate
    ask_key: rsa.RSAPrivateKey
    ask_certificate: x509.Certificate
    asvk_key: rsa.RSAPrivateKey
    asvk_certificate: x509.Certificate
    vek_seed: bytes

    # -- creation and state -------------------------------------------------------------

    @classmethod
    def generate(cls, *, now: dt.datetime | None = None) -> SimulatedAmd:
        """A fresh hierarchy (three RSA-4096 keys: about a second; do it once)."""
        return cls.from_keys(
            ark_key=rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS),
            ask_key=rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS),
            asvk_key=rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS),
            now=now,
        )

    @classmethod
    def from_keys(
        cls,
        *,
        ark_key: rsa.RSAPrivateKey,
        ask_key: rsa.RSAPrivateKey,
        asvk_key: rsa.RSAPrivateKey,
        vek_seed: bytes | None = None,
        now: dt.datetime | None = None,
    ) -> SimulatedAmd:
        """A hierarchy with new certificates over existing RSA-4096 keys (tests reuse keys)."""
        for name, key in (("ark", ark_key), ("ask", ask_key), ("asvk", asvk_key)):
            if key.key_size != RSA_BITS:
                raise ValueError(f"{name} key must be RSA-4096, got {key.key_size} bits")
        now = utc_now() if now is None else now
        ark = issue_authority(ARK_COMMON_NAME, ark_key, None, ark_key, now)
        return cls(
            ark_key=ark_key,
            ark_certificate=ark,
            ask_key=ask_key,
            ask_certificate=issue_authority(ASK_COMMON_NAME, ask_key, ark, ark_key, now),
            asvk_key=asvk_key,
            asvk_certificate=issue_authority(ASVK_COMMON_NAME, asvk_key, ark, ark_key, now),
            vek_seed=os.urandom(_SEED_SIZE) if vek_seed is None else vek_seed,
        )

    def to_state(self) -> dict[str, str]:
        """PEM certificates, PKCS#8 PEM private keys and the hex seed, by file name."""
        return {
            "format": STATE_FORMAT,
            "ark.pem": cert_pem(self.ark_certificate),
            "ark.key.pem": key_pem(self.ark_key),
            "ask.pem": cert_pem(self.ask_certificate),
            "ask.key.pem": key_pem(self.ask_key),
            "asvk.pem": cert_pem(self.asvk_certificate),
            "asvk.key.pem": key_pem(self.asvk_key),
            "vek-seed.hex": self.vek_seed.hex(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, str]) -> SimulatedAmd:
        """Rebuild from :meth:`to_state`; MalformedError names the entry that is wrong."""
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise MalformedError(f"simulated AMD state is missing {', '.join(missing)}")
        if state["format"].strip() != STATE_FORMAT:
            raise MalformedError(
                f"simulated AMD state 'format' is {state['format'].strip()!r}, "
                f"expected {STATE_FORMAT!r}"
            )
        try:
            seed = bytes.fromhex(state["vek-seed.hex"].strip())
        except ValueError as exc:
            raise MalformedError(f"simulated AMD state 'vek-seed.hex' is not hex: {exc}") from exc
        if len(seed) != _SEED_SIZE:
            raise MalformedError(
                f"simulated AMD state 'vek-seed.hex' is {len(seed)} bytes, expected {_SEED_SIZE}"
            )
        pairs = {
            role: (load_cert(state, f"{role}.pem"), load_key(state, f"{role}.key.pem"))
            for role in ("ark", "ask", "asvk")
        }
        for role, (certificate, key) in pairs.items():
            if certificate.public_key() != key.public_key():
                raise MalformedError(
                    f"simulated AMD state '{role}.key.pem' does not match '{role}.pem'"
                )
        ark = pairs["ark"][0]
        for role, (certificate, _key) in pairs.items():
            try:
                certificate.verify_directly_issued_by(ark)
            except (ValueError, TypeError, InvalidSignature) as exc:
                raise MalformedError(
                    f"simulated AMD state '{role}.pem' is not signed by 'ark.pem'"
                ) from exc
        return cls(
            ark_key=pairs["ark"][1],
            ark_certificate=ark,
            ask_key=pairs["ask"][1],
            ask_certificate=pairs["ask"][0],
            asvk_key=pairs["asvk"][1],
            asvk_certificate=pairs["asvk"][0],
            vek_seed=seed,
        )

    # -- roots --------------------------------------------------------------------------

    @property
    def ark_pem(self) -> str:
        """The simulated root as PEM: what a tenant pins to accept simulated evidence."""
        return cert_pem(self.ark_certificate)

    @property
    def root_fingerprint(self) -> str:
        """``sha256:<hex>`` of the simulated ARK's DER."""
        return fingerprint(self.ark_certificate)

    def intermediate(self, signer: SignerKind) -> x509.Certificate:
        """The simulated ASK (VCEK) or ASVK (VLEK)."""
        return self.ask_certificate if signer is SignerKind.VCEK else self.asvk_certificate

    # -- endorsement keys and certificates ----------------------------------------------

    def endorsement_key(
        self,
        *,
        product_line: ProductLine,
        reported_tcb: TcbVersion | int | None = None,
        chip_id: bytes | None = None,
        signer: SignerKind = SignerKind.VCEK,
        csp_id: str = DEFAULT_CSP_ID,
    ) -> ec.EllipticCurvePrivateKey:
        """The deterministic P-384 key of a VCEK (line, CHIP_ID, TCB) or VLEK (line, CSP, TCB)."""
        tcb = _tcb_for(product_line, reported_tcb)
        identity = (
            _chip_id_for(product_line, chip_id)
            if signer is SignerKind.VCEK
            else csp_id.encode("utf-8")
        )
        info = b"\0".join(
            (
                b"attested-replay simulated endorsement key v1",
                signer.value.encode(),
                product_line.value.encode(),
                tcb.encode().to_bytes(8, "little"),
                identity,
            )
        )
        okm = HKDF(algorithm=hashes.SHA384(), length=64, salt=None, info=info).derive(self.vek_seed)
        scalar = int.from_bytes(okm, "big") % (_P384_ORDER - 1) + 1
        return ec.derive_private_key(scalar, ec.SECP384R1())

    def issue_endorsement(
        self,
        *,
        product_line: ProductLine,
        reported_tcb: TcbVersion | int | None = None,
        chip_id: bytes | None = None,
        signer: SignerKind = SignerKind.VCEK,
        csp_id: str = DEFAULT_CSP_ID,
        not_before: dt.datetime | None = None,
        not_after: dt.datetime | None = None,
        issued_by: SignerKind | None = None,
    ) -> x509.Certificate:
        """A VCEK/VLEK certificate. ``issued_by`` picks the other intermediate (negative tests)."""
        tcb = _tcb_for(product_line, reported_tcb)
        key = self.endorsement_key(
            product_line=product_line,
            reported_tcb=tcb,
            chip_id=chip_id,
            signer=signer,
            csp_id=csp_id,
        )
        issuer_kind = signer if issued_by is None else issued_by
        issuer = self.intermediate(issuer_kind)
        issuer_key = self.ask_key if issuer_kind is SignerKind.VCEK else self.asvk_key
        start = utc_now() - BACKDATE if not_before is None else not_before
        lifetime = VCEK_LIFETIME if signer is SignerKind.VCEK else VLEK_LIFETIME
        end = start + lifetime if not_after is None else not_after
        common_name = "SEV-VCEK" if signer is SignerKind.VCEK else "SEV-VLEK"
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject_name(common_name))
            .issuer_name(issuer.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())  # AMD uses 0; cryptography cannot
            .not_valid_before(start)
            .not_valid_after(end)
        )
        for oid, value in self._kds_extensions(product_line, tcb, chip_id, signer, csp_id):
            builder = builder.add_extension(
                x509.UnrecognizedExtension(x509.ObjectIdentifier(oid), value), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA384(), rsa_padding=PSS)

    def issue_vcek(self, **kwargs: Any) -> x509.Certificate:  # noqa: ANN401 - forwards issue_endorsement's keywords
        """:meth:`issue_endorsement` for a VCEK."""
        return self.issue_endorsement(signer=SignerKind.VCEK, **kwargs)

    def _kds_extensions(
        self,
        product_line: ProductLine,
        tcb: TcbVersion,
        chip_id: bytes | None,
        signer: SignerKind,
        csp_id: str,
    ) -> list[tuple[str, bytes]]:
        turin = product_line is ProductLine.TURIN
        product_name = (
            _VCEK_PRODUCT_NAMES[product_line] if signer is SignerKind.VCEK else product_line.value
        )
        extensions = [
            (OID_STRUCT_VERSION, der.encode_non_negative_integer(1 if turin else 0)),
            (OID_PRODUCT_NAME, der.encode_ia5_string(product_name)),
        ]
        extensions += [
            (SPL_OIDS[name], der.encode_non_negative_integer(value))
            for name, value in tcb.components().items()
        ]
        if signer is SignerKind.VCEK:
            full = _chip_id_for(product_line, chip_id)
            extensions.append((OID_HWID, full[:_TURIN_HWID_SIZE] if turin else full))
        else:
            extensions.append((OID_CSP_ID, der.encode_ia5_string(csp_id)))
        return extensions

    def cert_chain_pem(
        self,
        product_line: ProductLine,
        signer: SignerKind = SignerKind.VCEK,
        chip_id: bytes | None = None,
        tcb: TcbVersion | int | None = None,
        *,
        csp_id: str = DEFAULT_CSP_ID,
    ) -> str:
        """Leaf, intermediate and ARK as one PEM bundle (leaf first): an envelope's certChain."""
        leaf = self.issue_endorsement(
            product_line=product_line,
            reported_tcb=tcb,
            chip_id=chip_id,
            signer=signer,
            csp_id=csp_id,
        )
        return "".join(cert_pem(c) for c in (leaf, self.intermediate(signer), self.ark_certificate))

    def endorsement_pem(
        self,
        report: bytes,
        *,
        product_line: ProductLine | None = None,
        csp_id: str = DEFAULT_CSP_ID,
    ) -> str:
        """The chain (:meth:`cert_chain_pem`) for a report this signer produced.

        ``product_line`` is needed only for version 2 reports (no CPUID bytes).
        """
        parsed = parse_report(report)
        line = parsed.product_line or product_line
        if line is None:
            raise ValueError("a version 2 report needs product_line")
        signer = parsed.signer_kind
        if signer is None:
            raise ValueError("the report is unsigned (SIGNING_KEY 7)")
        return self.cert_chain_pem(line, signer, parsed.chip_id, parsed.reported_tcb, csp_id=csp_id)

    def cert_chain_pem_for_report(
        self, report: bytes, *, product_line: ProductLine | None = None
    ) -> str:
        """Alias of :meth:`endorsement_pem` (the name the evidence provider uses)."""
        return self.endorsement_pem(report, product_line=product_line)

    # -- reports ------------------------------------------------------------------------

    def sign_report(
        self,
        *,
        report_data: bytes,
        product_line: ProductLine = ProductLine.MILAN,
        version: int = 5,
        measurement: bytes = DEFAULT_MEASUREMENT,
        host_data: bytes = bytes(32),
        policy: int | GuestPolicy = 0x30000,
        vmpl: int = 0,
        reported_tcb: TcbVersion | int | None = None,
        chip_id: bytes | None = None,
        signer: SignerKind = SignerKind.VCEK,
        csp_id: str = DEFAULT_CSP_ID,
        **fields: Any,  # noqa: ANN401 - any other AttestationReport field
    ) -> bytes:
        """A signed 1184-byte report. Defaults: COMMITTED == CURRENT == LAUNCH == REPORTED TCB,
        realistic firmware and TCB for the product line, the product's CPUID (v3+), REPORT_ID_MA
        all FF, CHIP_ID the simulated chip (all zero for a VLEK, as on AWS)."""
        tcb = _tcb_for(product_line, reported_tcb)
        if signer is SignerKind.VLEK and chip_id is None:
            report_chip_id = bytes(64)
        else:
            report_chip_id = _chip_id_for(product_line, chip_id)
        major, minor, build = DEFAULT_FIRMWARE[product_line]
        raw_tcb = tcb.encode()
        report: AttestationReport = replace(
            unsigned_template(product_line, version=version),
            report_data=report_data,
            measurement=measurement,
            host_data=host_data,
            policy=policy if isinstance(policy, GuestPolicy) else GuestPolicy.from_raw(policy),
            vmpl=vmpl,
            platform_info=PlatformInfo.from_raw(0x1),
            signing_key=_SIGNING_KEY_CODES[signer],
            report_id=hashlib.sha256(b"simulated guest context" + measurement).digest(),
            chip_id=report_chip_id,
            current_tcb=raw_tcb,
            reported_tcb=raw_tcb,
            committed_tcb=raw_tcb,
            launch_tcb=raw_tcb,
            current_major=major,
            current_minor=minor,
            current_build=build,
            committed_major=major,
            committed_minor=minor,
            committed_build=build,
        )
        if "platform_info" in fields and isinstance(fields["platform_info"], int):
            fields["platform_info"] = PlatformInfo.from_raw(fields["platform_info"])
        if fields:
            report = replace(report, **fields)
        key = self.endorsement_key(
            product_line=product_line,
            reported_tcb=report.reported_tcb,
            chip_id=chip_id,
            signer=signer,
            csp_id=csp_id,
        )
        return sign_with_key(report, key)

    # -- revocation ---------------------------------------------------------------------

    def crl(
        self,
        *,
        revoked_serials: Iterable[int] = (),
        this_update: dt.datetime | None = None,
        next_update: dt.datetime | None = None,
        signing_key: rsa.RSAPrivateKey | None = None,
    ) -> bytes:
        """A DER CRL issued by the simulated ARK (``signing_key`` forges it, for negatives)."""
        start = utc_now() - BACKDATE if this_update is None else this_update
        end = start + dt.timedelta(days=30) if next_update is None else next_update
        builder = (
            x509.CertificateRevocationListBuilder()
            .issuer_name(self.ark_certificate.subject)
            .last_update(start)
            .next_update(end)
        )
        for serial in revoked_serials:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder()
                .serial_number(serial)
                .revocation_date(start)
                .build()
            )
        key = self.ark_key if signing_key is None else signing_key
        crl = builder.sign(key, hashes.SHA384(), rsa_padding=PSS)
        return crl.public_bytes(serialization.Encoding.DER)


def sign_with_key(report: AttestationReport, key: ec.EllipticCurvePrivateKey) -> bytes:
    """Serialize ``report`` signed by ``key`` over bytes 0x000-0x29F (R, S little-endian)."""
    return serialize_report(sign_report_bytes(report, key))
