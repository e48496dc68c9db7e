"""VCEK / VLEK certificates: loading and AMD's KDS extensions.

The extensions live under OID arc 1.3.6.1.4.1.3704.1 (AMD publication 57230, VCEK certificate):
``.1`` structVersion INTEGER, ``.2`` productName IA5String, ``.3.1``-``.3.9`` the SPLs as
INTEGERs, ``.4`` hwID (raw bytes on every real AMD certificate; a DER OCTET STRING wrapper is
accepted too), ``.5`` csp_id IA5String. ``cryptography`` hands them over as raw extension
values; :mod:`attestation.endorsement.der` decodes them strictly. An unknown OID inside AMD's
arc is an error (fail closed), as is a second copy of any extension.

VCEK and VLEK serial numbers are 0; ``cryptography`` warns when it parses them and keeps going.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from attestation.abi.product import ProductLine, SignerKind
from attestation.endorsement import der
from attestation.endorsement.memo import BoundedMemo
from attestation.errors import MalformedError

AMD_KDS_ARC = "1.3.6.1.4.1.3704.1"
OID_STRUCT_VERSION = f"{AMD_KDS_ARC}.1"
OID_PRODUCT_NAME = f"{AMD_KDS_ARC}.2"
OID_HWID = f"{AMD_KDS_ARC}.4"
OID_CSP_ID = f"{AMD_KDS_ARC}.5"

#: SPL name -> OID, in KDS order. Milan/Genoa carry bl..spl7 + ucode; Turin adds fmc, drops spl4.
SPL_OIDS: Mapping[str, str] = types.MappingProxyType(
    {
        "bl": f"{AMD_KDS_ARC}.3.1",
        "tee": f"{AMD_KDS_ARC}.3.2",
        "snp": f"{AMD_KDS_ARC}.3.3",
        "spl4": f"{AMD_KDS_ARC}.3.4",
        "spl5": f"{AMD_KDS_ARC}.3.5",
        "spl6": f"{AMD_KDS_ARC}.3.6",
        "spl7": f"{AMD_KDS_ARC}.3.7",
        "ucode": f"{AMD_KDS_ARC}.3.8",
        "fmc": f"{AMD_KDS_ARC}.3.9",
    }
)
_SPL_BY_OID = {oid: name for name, oid in SPL_OIDS.items()}
_KNOWN_AMD_OIDS = frozenset(
    {OID_STRUCT_VERSION, OID_PRODUCT_NAME, OID_HWID, OID_CSP_ID, *SPL_OIDS.values()}
)

#: Subject CN -> signer kind (anything else is not a report-signing certificate).
_SIGNER_BY_CN: Mapping[str, SignerKind] = types.MappingProxyType(
    {"SEV-VCEK": SignerKind.VCEK, "SEV-VLEK": SignerKind.VLEK}
)
#: hwID lengths on real certificates: the full 64-byte CHIP_ID (Milan/Genoa) or 8 bytes (Turin).
HWID_LENGTHS = frozenset({8, 64})
_SHORT_INTEGER_SIZE = 3  # 02 01 xx
_SPL_MAX = 0xFF  # each SPL is one byte of TCB_VERSION
_PEM_MARKER = b"-----BEGIN"
_PRODUCT_NAME = re.compile(r"^([A-Za-z]+)(?:-[A-Za-z0-9]+)?$")


@dataclass(frozen=True, slots=True)
class Endorsement:
    """A parsed VCEK or VLEK certificate (its chain is checked by
    ``attestation.endorsement.chain``).

    ``issuer`` is the certificate's issuer name, ``critical_extensions`` the dotted OIDs of its
    extensions marked critical and ``basic_constraints_ca`` its basicConstraints cA (None when
    absent), decoded once here for the chain's checks.
    """

    certificate: x509.Certificate
    der: bytes
    issuer: x509.Name
    critical_extensions: tuple[str, ...]
    basic_constraints_ca: bool | None
    signer_kind: SignerKind
    struct_version: int | None
    product_name: str | None
    product_line: ProductLine | None
    spls: Mapping[str, int]
    hwid: bytes | None
    csp_id: str | None
    public_key: ec.EllipticCurvePublicKey


#: What ``cryptography`` raises for certificates it loaded but cannot decode a part of
#: (names, extensions and keys are decoded lazily, on first access).
PARSE_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    UnsupportedAlgorithm,
    x509.DuplicateExtension,
    x509.InvalidVersion,
    x509.UnsupportedGeneralNameType,
)


def load_certificates(data: bytes) -> tuple[x509.Certificate, ...]:
    """Every certificate of a PEM bundle (in order), or the single certificate of a DER blob.

    Each certificate is decoded completely here (names, validity, extensions, public key), so
    later code never meets a lazily raised parse error. The result is a pure function of the
    exact bytes: it is remembered per process (:mod:`attestation.endorsement.memo`), so the
    certChain that thousands of envelopes of one chip carry is parsed once.
    """
    data = bytes(data)  # the key is exactly these bytes, never a mutable buffer
    certificates = _LOADED.get(data)
    if certificates is None:
        certificates = _loaded(data)
        for index, certificate in enumerate(certificates, start=1):
            require_fully_parseable(certificate, f"certificate {index} of {len(certificates)}")
        if _PEM_MARKER not in data:
            # A DER input is exactly the certificate's DER (cryptography refuses trailing
            # bytes and reads DER only), so it is kept as it came instead of re-encoded.
            _DER.put(id(certificates[0]), (certificates[0], data), input_bytes=len(data))
        _LOADED.put(data, certificates, input_bytes=len(data))
    return certificates


#: Certificate inputs (a few KB each) parsed and decoded completely, by their exact bytes.
_LOADED: BoundedMemo[bytes, tuple[x509.Certificate, ...]] = BoundedMemo(256)


def certificate_der(certificate: x509.Certificate) -> bytes:
    """The DER of ``certificate`` as ``cryptography`` encodes it (the bytes its signature is
    verified over), computed once per certificate object (objects are immutable; the memo
    holds the object, so its id cannot be reused while the entry exists)."""
    entry = _DER.get(id(certificate))
    if entry is not None and entry[0] is certificate:
        return entry[1]
    encoded = certificate.public_bytes(serialization.Encoding.DER)
    _DER.put(id(certificate), (certificate, encoded), input_bytes=len(encoded))
    return encoded


_DER: BoundedMemo[int, tuple[x509.Certificate, bytes]] = BoundedMemo(1024)


def _loaded(data: bytes) -> tuple[x509.Certificate, ...]:
    """The certificates of a PEM bundle or DER blob, loaded (parts decode lazily)."""
    if not data:
        raise MalformedError("certificate input is empty")
    if _PEM_MARKER in data:
        try:
            return tuple(x509.load_pem_x509_certificates(data))
        except PARSE_ERRORS as exc:
            raise MalformedError(f"certificate PEM cannot be parsed: {exc}") from exc
    try:
        return (x509.load_der_x509_certificate(data),)
    except PARSE_ERRORS as exc:
        raise MalformedError(f"certificate is neither PEM nor valid DER X.509: {exc}") from exc


def require_fully_parseable(certificate: x509.Certificate, what: str) -> None:
    """Decode every part of ``certificate`` now; MalformedError names the part that fails."""
    _decode(what, "subject", lambda: certificate.subject)
    _decode(what, "issuer", lambda: certificate.issuer)
    _decode(what, "validity", lambda: _validity(certificate))
    _decode(what, "extensions", lambda: list(certificate.extensions))
    _decode(what, "public key", certificate.public_key)


_T = TypeVar("_T")


def _decode(what: str, part: str, decode: Callable[[], _T]) -> _T:
    try:
        return decode()
    except PARSE_ERRORS as exc:
        raise MalformedError(f"{what}: {part} cannot be decoded: {exc}") from exc


def _validity(certificate: x509.Certificate) -> tuple[object, object]:
    return certificate.not_valid_before_utc, certificate.not_valid_after_utc


def load_endorsement(data: bytes) -> Endorsement:
    """Parse a VCEK/VLEK from PEM, DER or a PEM bundle (the leaf is the first certificate)."""
    return load_endorsement_chain(data)[0]


def load_endorsement_chain(data: bytes) -> tuple[Endorsement, tuple[x509.Certificate, ...]]:
    """The endorsement (first certificate) of PEM, DER or a PEM bundle, and the certificates
    after it."""
    certificates = load_certificates(data)
    return _decoded_endorsement(certificates[0]), certificates[1:]


def endorsement_from_certificate(certificate: x509.Certificate) -> Endorsement:
    """Decode the signer kind, public key and AMD extensions of a VCEK/VLEK certificate."""
    known = _ENDORSEMENTS.get(certificate_der(certificate))
    if known is not None:
        return known
    require_fully_parseable(certificate, "endorsement certificate")
    return _decoded_endorsement(certificate)


#: Decoded VCEKs/VLEKs by their DER: a pure function of those bytes.
_ENDORSEMENTS: BoundedMemo[bytes, Endorsement] = BoundedMemo(256)


def _decoded_endorsement(certificate: x509.Certificate) -> Endorsement:
    """:func:`endorsement_from_certificate` for a certificate ``load_certificates`` already
    decoded completely (decoding it twice doubled the cost of a new chip's verification),
    remembered by its DER.
    """
    encoded = certificate_der(certificate)
    known = _ENDORSEMENTS.get(encoded)
    if known is None:
        known = _decode_endorsement(certificate, encoded)
        _ENDORSEMENTS.put(encoded, known, input_bytes=len(encoded))
    return known


def _decode_endorsement(certificate: x509.Certificate, encoded: bytes) -> Endorsement:
    """Check the key and decode AMD's extensions; everything else ``cryptography`` decoded."""
    extensions = certificate.extensions
    try:
        constraints = extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        constraints = None
    signer_kind = _signer_kind(certificate.subject)
    values = _amd_extension_values(certificate)
    public_key = certificate.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(
        public_key.curve, ec.SECP384R1
    ):
        raise MalformedError(
            f"{signer_kind.value.upper()} public key must be ECDSA P-384, "
            f"found {type(public_key).__name__}"
            + (
                f" on {public_key.curve.name}"
                if isinstance(public_key, ec.EllipticCurvePublicKey)
                else ""
            )
        )
    struct_version = _optional_integer(values, OID_STRUCT_VERSION, "structVersion")
    product_name = _optional_string(values, OID_PRODUCT_NAME, "productName")
    product_line = None if product_name is None else _product_line(product_name)
    spls: dict[str, int] = {}
    for name, oid in SPL_OIDS.items():
        value = _optional_integer(values, oid, f"{name}SPL")
        if value is None:
            continue
        if value > _SPL_MAX:
            raise MalformedError(f"certificate extension {name}SPL ({oid}) = {value} exceeds 255")
        spls[name] = value
    hwid = None if OID_HWID not in values else _hwid(values[OID_HWID])
    csp_id = _optional_string(values, OID_CSP_ID, "csp_id")
    return Endorsement(
        certificate=certificate,
        der=encoded,
        issuer=certificate.issuer,
        critical_extensions=tuple(e.oid.dotted_string for e in extensions if e.critical),
        basic_constraints_ca=constraints,
        signer_kind=signer_kind,
        struct_version=struct_version,
        product_name=product_name,
        product_line=product_line,
        spls=types.MappingProxyType(spls),
        hwid=hwid,
        csp_id=csp_id,
        public_key=public_key,
    )


def _signer_kind(subject: x509.Name) -> SignerKind:
    names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise MalformedError(
            f"certificate subject must have exactly one CN, found {len(names)} "
            f"({subject.rfc4514_string()})"
        )
    common_name = names[0].value
    kind = _SIGNER_BY_CN.get(common_name if isinstance(common_name, str) else "")
    if kind is None:
        raise MalformedError(
            f"certificate subject CN {common_name!r} is neither 'SEV-VCEK' nor 'SEV-VLEK'"
        )
    return kind


def _amd_extension_values(certificate: x509.Certificate) -> dict[str, bytes]:
    values: dict[str, bytes] = {}
    for extension in certificate.extensions:  # decoded by require_fully_parseable
        oid = extension.oid.dotted_string
        if not oid.startswith(f"{AMD_KDS_ARC}."):
            continue
        if oid not in _KNOWN_AMD_OIDS:
            raise MalformedError(f"certificate carries unknown AMD extension {oid}")
        if not isinstance(extension.value, x509.UnrecognizedExtension):
            raise MalformedError(f"certificate extension {oid} has an unexpected type")
        values[oid] = extension.value.value
    return values


def _optional_integer(values: Mapping[str, bytes], oid: str, name: str) -> int | None:
    raw = values.get(oid)
    if raw is None:
        return None
    # The two encodings of every real KDS value, read directly: INTEGER of one content byte
    # below 0x80 (02 01 xx), or of two whose first is the 00 that keeps xx >= 0x80 positive
    # (02 02 00 xx). Both are minimal DER; anything else goes through the full decoder.
    size = len(raw)
    if size == _SHORT_INTEGER_SIZE and raw[0] == der.TAG_INTEGER and raw[1] == 1 and raw[2] < 0x80:
        return raw[2]
    if (
        size == _SHORT_INTEGER_SIZE + 1
        and raw[0] == der.TAG_INTEGER
        and raw[1] == 2  # two content bytes
        and raw[2] == 0
        and raw[3] >= 0x80
    ):
        return raw[3]
    what = f"certificate extension {name} ({oid})"
    element = der.read_single(values[oid], what=what, tag=der.TAG_INTEGER)
    return der.decode_non_negative_integer(element.content, what=what)


def _optional_string(values: Mapping[str, bytes], oid: str, name: str) -> str | None:
    if oid not in values:
        return None
    what = f"certificate extension {name} ({oid})"
    element = der.read_single(values[oid], what=what, tag=der.TAG_IA5_STRING)
    return der.decode_ia5_string(element.content, what=what)


@functools.lru_cache(maxsize=64)  # a pure function of the name; errors are not cached
def _product_line(product_name: str) -> ProductLine:
    match = _PRODUCT_NAME.fullmatch(product_name)
    lines = {line.value: line for line in ProductLine}
    if match is None or match.group(1) not in lines:
        raise MalformedError(
            f"certificate productName {product_name!r} names no known product line "
            f"({', '.join(lines)})"
        )
    return lines[match.group(1)]


def _hwid(value: bytes) -> bytes:
    # Real AMD certificates store the raw bytes; some tools wrap them in an OCTET STRING.
    # Lengths cannot collide: raw is 8 or 64 bytes, wrapped is 10 or 66.
    if len(value) in HWID_LENGTHS:
        return value
    what = f"certificate extension hwID ({OID_HWID})"
    if value[:1] == bytes([der.TAG_OCTET_STRING]):
        element = der.read_single(value, what=what, tag=der.TAG_OCTET_STRING)
        if len(element.content) in HWID_LENGTHS:
            return element.content
        raise MalformedError(f"{what}: wrapped hwID is {len(element.content)} bytes, not 8 or 64")
    raise MalformedError(f"{what}: {len(value)} bytes, expected 8 or 64 raw bytes")
