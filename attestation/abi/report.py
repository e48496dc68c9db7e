"""The SEV-SNP ATTESTATION_REPORT ABI: parse and serialize the 1184-byte report, versions 2-5.

Layout: AMD SEV-SNP ABI specification, table "ATTESTATION_REPORT Structure"
(publication 56860; checked against the real reports in tests/assets/real). All integers are
little-endian. :data:`LAYOUT` names every byte range, reserved ranges included, and covers
``0..REPORT_SIZE`` exactly.

Parsing::

    report = parse_report(data)          # raises MalformedError naming field, offset, bytes
    assert serialize_report(report) == data
    report.product_line                  # from CPUID (v3+); None for v2
    report.tcb("reported")               # TcbVersion; v2 needs product=... (from the cert)
    report.signed_bytes()                # bytes 0x000-0x29F, what the signature covers

Building a report (the simulated signer)::

    template = unsigned_template(ProductLine.GENOA)          # version 5, policy 0x30000, ...
    body = dataclasses.replace(template, report_data=..., measurement=..., vmpl=0)
    der = vcek_key.sign(body.signed_bytes(), ec.ECDSA(hashes.SHA384()))
    r, s = decode_dss_signature(der)                           # R, S as integers
    raw = serialize_report(body.with_signature(r, s))          # or signature.sign_report_bytes

:class:`AttestationReport` validates on construction, so a builder cannot produce a report
the parser would reject: sizes of byte fields, reserved flags, policy bits and CPUID product.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass, replace
from typing import ClassVar, Final, Literal

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.tcb import TcbVersion
from attestation.errors import MalformedError

REPORT_SIZE: Final = 0x4A0
SIGNED_REGION_END: Final = 0x2A0
#: R and S are 72-byte little-endian integers (the P-384 values use the low 48 bytes).
SIGNATURE_COMPONENT_SIZE: Final = 0x48
SUPPORTED_VERSIONS: Final = range(2, 6)
#: SIGNATURE_ALGO 1 is ECDSA P-384 with SHA-384; nothing else is defined.
SIGNATURE_ALGO_ECDSA_P384_SHA384: Final = 1

SIGNING_KEY_VCEK: Final = 0
SIGNING_KEY_VLEK: Final = 1
SIGNING_KEY_NONE: Final = 7

TcbName = Literal["current", "reported", "committed", "launch"]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One named byte range of the report."""

    name: str
    offset: int
    size: int
    reserved: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.size

    def describe(self) -> str:
        return f"{self.name} [{self.offset:#05x}:{self.end:#05x}]"


#: Every byte of the report, in order. ``reserved`` ranges must be zero (MBZ).
#: CPUID_* (0x188-0x18A) are reserved in v2; the mitigation vectors (0x1F8-0x207) before v5.
LAYOUT: Final[tuple[FieldSpec, ...]] = (
    FieldSpec("version", 0x000, 4),
    FieldSpec("guest_svn", 0x004, 4),
    FieldSpec("policy", 0x008, 8),
    FieldSpec("family_id", 0x010, 16),
    FieldSpec("image_id", 0x020, 16),
    FieldSpec("vmpl", 0x030, 4),
    FieldSpec("signature_algo", 0x034, 4),
    FieldSpec("current_tcb", 0x038, 8),
    FieldSpec("platform_info", 0x040, 8),
    FieldSpec("flags", 0x048, 4),
    FieldSpec("reserved_04c", 0x04C, 4, reserved=True),
    FieldSpec("report_data", 0x050, 64),
    FieldSpec("measurement", 0x090, 48),
    FieldSpec("host_data", 0x0C0, 32),
    FieldSpec("id_key_digest", 0x0E0, 48),
    FieldSpec("author_key_digest", 0x110, 48),
    FieldSpec("report_id", 0x140, 32),
    FieldSpec("report_id_ma", 0x160, 32),
    FieldSpec("reported_tcb", 0x180, 8),
    FieldSpec("cpuid_fam_id", 0x188, 1),
    FieldSpec("cpuid_mod_id", 0x189, 1),
    FieldSpec("cpuid_step", 0x18A, 1),
    FieldSpec("reserved_18b", 0x18B, 21, reserved=True),
    FieldSpec("chip_id", 0x1A0, 64),
    FieldSpec("committed_tcb", 0x1E0, 8),
    FieldSpec("current_build", 0x1E8, 1),
    FieldSpec("current_minor", 0x1E9, 1),
    FieldSpec("current_major", 0x1EA, 1),
    FieldSpec("reserved_1eb", 0x1EB, 1, reserved=True),
    FieldSpec("committed_build", 0x1EC, 1),
    FieldSpec("committed_minor", 0x1ED, 1),
    FieldSpec("committed_major", 0x1EE, 1),
    FieldSpec("reserved_1ef", 0x1EF, 1, reserved=True),
    FieldSpec("launch_tcb", 0x1F0, 8),
    FieldSpec("launch_mit_vector", 0x1F8, 8),
    FieldSpec("current_mit_vector", 0x200, 8),
    FieldSpec("reserved_208", 0x208, 152, reserved=True),
    FieldSpec("signature_r", 0x2A0, SIGNATURE_COMPONENT_SIZE),
    FieldSpec("signature_s", 0x2E8, SIGNATURE_COMPONENT_SIZE),
    FieldSpec("signature_reserved", 0x330, 368, reserved=True),
)
FIELDS: Final = {spec.name: spec for spec in LAYOUT}
_CPUID_FIELDS: Final = ("cpuid_fam_id", "cpuid_mod_id", "cpuid_step")
_SIGNER_BY_KEY: Final = {SIGNING_KEY_VCEK: SignerKind.VCEK, SIGNING_KEY_VLEK: SignerKind.VLEK}
_MIT_VECTOR_FIELDS: Final = ("launch_mit_vector", "current_mit_vector")

#: (CPUID family, inclusive model ranges) -> product line, as AMD's KDS and virtee/sev map them.
_CPUID_PRODUCTS: Final[tuple[tuple[int, tuple[tuple[int, int], ...], ProductLine], ...]] = (
    (0x19, ((0x00, 0x0F),), ProductLine.MILAN),
    (0x19, ((0x10, 0x1F), (0xA0, 0xAF)), ProductLine.GENOA),
    (0x1A, ((0x00, 0x11),), ProductLine.TURIN),
)
#: CPUID bytes used by :func:`unsigned_template` (the values seen on real hardware).
TEMPLATE_CPUID: Final[dict[ProductLine, tuple[int, int, int]]] = {
    ProductLine.MILAN: (0x19, 0x01, 0x01),
    ProductLine.GENOA: (0x19, 0x11, 0x01),
    ProductLine.TURIN: (0x1A, 0x02, 0x00),
}


#: Every known (family, model) pair: a lookup is on the verifier's hot path.
_PRODUCT_BY_CPUID: Final = {
    (family, model): product
    for family, ranges, product in _CPUID_PRODUCTS
    for lo, hi in ranges
    for model in range(lo, hi + 1)
}


def cpuid_families(product: ProductLine) -> frozenset[int]:
    """The CPUID families of a product line's parts (the model decides within a family)."""
    return frozenset(family for family, _ranges, line in _CPUID_PRODUCTS if line is product)


def product_line_from_cpuid(family: int, model: int) -> ProductLine:
    """The product line of a CPUID family/model pair.

    Raises:
        MalformedError: the pair is not a known SEV-SNP product (fail closed).
    """
    product = _PRODUCT_BY_CPUID.get((family, model))
    if product is not None:
        return product
    raise MalformedError(
        f"cpuid_fam_id/cpuid_mod_id [0x188:0x18a] name no known SEV-SNP product: "
        f"family {family:#04x} model {model:#04x}"
    )


def signer_kind_of(signing_key: int) -> SignerKind | None:
    """The key a SIGNING_KEY value names; None for 7 (unsigned) or a reserved value."""
    return _SIGNER_BY_KEY.get(signing_key)


def _mbz_error(spec: FieldSpec, data: bytes, what: str = "not all zero") -> MalformedError:
    return MalformedError(f"{spec.describe()} {what}: {data.hex()}")


@dataclass(frozen=True, slots=True)
class GuestPolicy:
    """POLICY (0x008): the guest's launch policy, set by the guest owner (section 3)."""

    abi_minor: int = 0
    abi_major: int = 0
    smt: bool = True
    migrate_ma: bool = False
    debug: bool = False
    single_socket: bool = False
    cxl_allow: bool = False
    mem_aes_256_xts: bool = False
    rapl_dis: bool = False
    ciphertext_hiding: bool = False
    page_swap_disable: bool = False

    _BITS: ClassVar[tuple[tuple[str, int], ...]] = (
        ("smt", 16),
        ("migrate_ma", 18),
        ("debug", 19),
        ("single_socket", 20),
        ("cxl_allow", 21),
        ("mem_aes_256_xts", 22),
        ("rapl_dis", 23),
        ("ciphertext_hiding", 24),
        ("page_swap_disable", 25),
    )
    _RESERVED_ONE: ClassVar[int] = 1 << 17
    _KNOWN_MASK: ClassVar[int] = (1 << 26) - 1

    def __post_init__(self) -> None:
        if not (0 <= self.abi_minor <= 0xFF and 0 <= self.abi_major <= 0xFF):
            raise MalformedError("policy [0x008:0x010] ABI major/minor must be bytes")

    @classmethod
    def from_raw(cls, raw: int) -> GuestPolicy:
        """Decode POLICY. Raises MalformedError if bit 17 is clear or bits 63:26 are set."""
        if not 0 <= raw < 1 << 64:
            raise MalformedError(f"policy [0x008:0x010] must be a u64, got {raw:#x}")
        hex_bytes = raw.to_bytes(8, "little").hex()
        if not raw & cls._RESERVED_ONE:
            raise MalformedError(f"policy [0x008:0x010] reserved bit 17 must be 1: {hex_bytes}")
        if raw & ~cls._KNOWN_MASK:
            raise MalformedError(f"policy [0x008:0x010] reserved bits 63:26 set: {hex_bytes}")
        flags = {name: bool(raw >> bit & 1) for name, bit in cls._BITS}
        return cls(abi_minor=raw & 0xFF, abi_major=raw >> 8 & 0xFF, **flags)

    @property
    def raw(self) -> int:
        value = self.abi_minor | self.abi_major << 8 | self._RESERVED_ONE
        for name, bit in self._BITS:
            if getattr(self, name):
                value |= 1 << bit
        return value

    def to_json_dict(self) -> dict[str, object]:
        fields: dict[str, object] = {"raw": f"{self.raw:#x}"}
        fields.update({"abiMajor": self.abi_major, "abiMinor": self.abi_minor})
        fields.update({name: getattr(self, name) for name, _ in self._BITS})
        return fields


@dataclass(frozen=True, slots=True)
class PlatformInfo:
    """PLATFORM_INFO (0x040): host platform features (section 4).

    ``unknown_bits`` keeps every bit without a name here (bit 6, seen on Turin, and 63:8) so the
    value round-trips; the policy reports them instead of rejecting by default.
    """

    smt_en: bool = False
    tsme_en: bool = False
    ecc_en: bool = False
    rapl_dis: bool = False
    ciphertext_hiding_dram_en: bool = False
    alias_check_complete: bool = False
    tio_en: bool = False
    unknown_bits: int = 0

    _BITS: ClassVar[tuple[tuple[str, int], ...]] = (
        ("smt_en", 0),
        ("tsme_en", 1),
        ("ecc_en", 2),
        ("rapl_dis", 3),
        ("ciphertext_hiding_dram_en", 4),
        ("alias_check_complete", 5),
        ("tio_en", 7),
    )
    _KNOWN_MASK: ClassVar[int] = 0b1011_1111

    def __post_init__(self) -> None:
        if self.unknown_bits & self._KNOWN_MASK or not 0 <= self.unknown_bits < 1 << 64:
            raise MalformedError("platform_info unknown_bits overlaps named bits or exceeds 64")

    @classmethod
    def from_raw(cls, raw: int) -> PlatformInfo:
        if not 0 <= raw < 1 << 64:
            raise MalformedError(f"platform_info [0x040:0x048] must be a u64, got {raw:#x}")
        flags = {name: bool(raw >> bit & 1) for name, bit in cls._BITS}
        return cls(unknown_bits=raw & ~cls._KNOWN_MASK, **flags)

    @property
    def raw(self) -> int:
        value = self.unknown_bits
        for name, bit in self._BITS:
            if getattr(self, name):
                value |= 1 << bit
        return value

    def unknown_bit_numbers(self) -> list[int]:
        bits = self.unknown_bits
        return [bit for bit in range(bits.bit_length()) if bits >> bit & 1]

    def to_json_dict(self) -> dict[str, object]:
        fields: dict[str, object] = {"raw": f"{self.raw:#x}"}
        fields.update({name: getattr(self, name) for name, _ in self._BITS})
        fields["unknownBits"] = self.unknown_bit_numbers()
        return fields


_BYTES_FIELDS: Final = (
    "family_id",
    "image_id",
    "report_data",
    "measurement",
    "host_data",
    "id_key_digest",
    "author_key_digest",
    "report_id",
    "report_id_ma",
    "chip_id",
    "signature_r",
    "signature_s",
)
_U64_FIELDS: Final = ("current_tcb", "reported_tcb", "committed_tcb", "launch_tcb")
_U32_FIELDS: Final = ("version", "guest_svn", "vmpl", "signature_algo")
_U8_FIELDS: Final = (
    "current_build",
    "current_minor",
    "current_major",
    "committed_build",
    "committed_minor",
    "committed_major",
)
_BYTES_SIZES: Final = tuple((name, FIELDS[name].size) for name in _BYTES_FIELDS)
_INTEGER_GROUPS: Final = ((_U64_FIELDS, 1 << 64), (_U32_FIELDS, 1 << 32), (_U8_FIELDS, 256))
_INTEGER_LIMITS: Final = tuple((name, limit) for names, limit in _INTEGER_GROUPS for name in names)


@dataclass(frozen=True, slots=True)
class AttestationReport:
    """One SEV-SNP attestation report, every field named (see :data:`LAYOUT`).

    TCB fields hold the raw u64; decode them with :meth:`tcb`. ``cpuid_*`` are None for
    version 2 (reserved there); the mitigation vectors are None before version 5.
    """

    version: int
    guest_svn: int
    policy: GuestPolicy
    family_id: bytes
    image_id: bytes
    vmpl: int
    signature_algo: int
    current_tcb: int
    platform_info: PlatformInfo
    author_key_en: bool
    mask_chip_key: bool
    signing_key: int
    report_data: bytes
    measurement: bytes
    host_data: bytes
    id_key_digest: bytes
    author_key_digest: bytes
    report_id: bytes
    report_id_ma: bytes
    reported_tcb: int
    cpuid_fam_id: int | None
    cpuid_mod_id: int | None
    cpuid_step: int | None
    chip_id: bytes
    committed_tcb: int
    current_build: int
    current_minor: int
    current_major: int
    committed_build: int
    committed_minor: int
    committed_major: int
    launch_tcb: int
    launch_mit_vector: int | None
    current_mit_vector: int | None
    signature_r: bytes
    signature_s: bytes

    def __post_init__(self) -> None:
        if self.version not in SUPPORTED_VERSIONS:
            raise MalformedError(
                f"{FIELDS['version'].describe()} unsupported version {self.version} "
                f"(supported: 2..5)"
            )
        if not isinstance(self.policy, GuestPolicy):
            raise MalformedError("policy must be a GuestPolicy (GuestPolicy.from_raw(int))")
        if not isinstance(self.platform_info, PlatformInfo):
            raise MalformedError(
                "platform_info must be a PlatformInfo (PlatformInfo.from_raw(int))"
            )
        self._check_field_types()
        if self.signature_algo != SIGNATURE_ALGO_ECDSA_P384_SHA384:
            raise MalformedError(
                f"{FIELDS['signature_algo'].describe()} unknown signature algorithm "
                f"{self.signature_algo} (only 1 = ECDSA P-384/SHA-384)"
            )
        if self.signing_key not in (SIGNING_KEY_VCEK, SIGNING_KEY_VLEK, SIGNING_KEY_NONE):
            raise MalformedError(
                f"{FIELDS['flags'].describe()} SIGNING_KEY {self.signing_key} is reserved "
                f"(0 VCEK, 1 VLEK, 7 none)"
            )
        self._check_version_dependent_fields()

    def _check_field_types(self) -> None:
        for name, size in _BYTES_SIZES:
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != size:
                raise MalformedError(f"{FIELDS[name].describe()} must be {size} bytes")
        for name, limit in _INTEGER_LIMITS:
            if not 0 <= getattr(self, name) < limit:
                raise MalformedError(f"{FIELDS[name].describe()} out of range")

    def _check_version_dependent_fields(self) -> None:
        cpuid = (self.cpuid_fam_id, self.cpuid_mod_id, self.cpuid_step)
        if self.version >= 3:
            if None in cpuid:
                raise MalformedError(f"version {self.version} reports carry CPUID bytes")
            for name, value in zip(_CPUID_FIELDS, cpuid, strict=True):
                if not 0 <= (value or 0) <= 0xFF:
                    raise MalformedError(f"{FIELDS[name].describe()} out of range")
            product_line_from_cpuid(self.cpuid_fam_id or 0, self.cpuid_mod_id or 0)
        elif cpuid != (None, None, None):
            raise MalformedError("version 2 reports have no CPUID bytes (reserved): use None")
        vectors = (self.launch_mit_vector, self.current_mit_vector)
        if self.version >= 5:
            for name, value in zip(_MIT_VECTOR_FIELDS, vectors, strict=True):
                if value is None or not 0 <= value < 1 << 64:
                    raise MalformedError(f"{FIELDS[name].describe()} must be a u64 in v5")
        elif vectors != (None, None):
            raise MalformedError(
                f"version {self.version} reports have no mitigation vectors (reserved): use None"
            )

    @property
    def product_line(self) -> ProductLine | None:
        """The product line from the signed CPUID bytes; None for v2 (use the certificate)."""
        if self.cpuid_fam_id is None or self.cpuid_mod_id is None:
            return None
        return product_line_from_cpuid(self.cpuid_fam_id, self.cpuid_mod_id)

    @property
    def signer_kind(self) -> SignerKind | None:
        """The key that signed the report per SIGNING_KEY; None when the report is unsigned."""
        return _SIGNER_BY_KEY.get(self.signing_key)

    @property
    def flags(self) -> int:
        return int(self.author_key_en) | int(self.mask_chip_key) << 1 | self.signing_key << 2

    @property
    def chip_id_masked(self) -> bool:
        """CHIP_ID all zero: the host masked it, so it cannot be bound to a certificate."""
        return not any(self.chip_id)

    def tcb(self, which: TcbName, product: ProductLine | None = None) -> TcbVersion:
        """Decode one of the four TCB fields.

        ``product`` defaults to the report's own product line; a v2 report needs it from the
        certificate. A product that contradicts the report's CPUID is an error.

        Raises:
            MalformedError: no product line is known, or ``product`` contradicts the CPUID.
        """
        own = self.product_line
        if product is None:
            if own is None:
                raise MalformedError(
                    "a version 2 report needs the product line from its certificate"
                )
            product = own
        elif own is not None and own is not product:
            raise MalformedError(f"report CPUID says {own}, not {product}")
        raw: int = getattr(self, f"{which}_tcb")
        return TcbVersion.decode(raw, product)

    def signed_bytes(self) -> bytes:
        """Bytes 0x000-0x29F: what the VCEK/VLEK signature covers."""
        return serialize_report(self)[:SIGNED_REGION_END]

    def body_digest(self) -> str:
        """Lowercase hex SHA-384 of the signed region: identifies a report across re-signings."""
        return hashlib.sha384(self.signed_bytes()).hexdigest()

    @property
    def signature_rs(self) -> tuple[int, int]:
        """R and S as integers (little-endian in the report)."""
        return (
            int.from_bytes(self.signature_r, "little"),
            int.from_bytes(self.signature_s, "little"),
        )

    @property
    def is_unsigned(self) -> bool:
        """SIGNING_KEY is 7 (no key) or the signature field is all zero."""
        return self.signing_key == SIGNING_KEY_NONE or not (
            any(self.signature_r) or any(self.signature_s)
        )

    def with_signature(self, r: int, s: int) -> AttestationReport:
        """A copy with R and S set (each stored as 72 bytes little-endian)."""
        limit = 1 << (8 * SIGNATURE_COMPONENT_SIZE)
        if not (0 <= r < limit and 0 <= s < limit):
            raise ValueError("R and S must fit in 72 bytes")
        return replace(
            self,
            signature_r=r.to_bytes(SIGNATURE_COMPONENT_SIZE, "little"),
            signature_s=s.to_bytes(SIGNATURE_COMPONENT_SIZE, "little"),
        )

    def to_json_dict(self, product: ProductLine | None = None) -> dict[str, object]:
        """Decoded fields for ``--json``; TCBs are decoded when a product line is known."""
        product = product or self.product_line
        out: dict[str, object] = {
            "version": self.version,
            "guestSvn": self.guest_svn,
            "policy": self.policy.to_json_dict(),
            "familyId": self.family_id.hex(),
            "imageId": self.image_id.hex(),
            "vmpl": self.vmpl,
            "signatureAlgo": self.signature_algo,
            "platformInfo": self.platform_info.to_json_dict(),
            "authorKeyEn": self.author_key_en,
            "maskChipKey": self.mask_chip_key,
            "signingKey": self.signer_kind.value if self.signer_kind else "none",
            "reportData": self.report_data.hex(),
            "measurement": self.measurement.hex(),
            "hostData": self.host_data.hex(),
            "idKeyDigest": self.id_key_digest.hex(),
            "authorKeyDigest": self.author_key_digest.hex(),
            "reportId": self.report_id.hex(),
            "reportIdMa": self.report_id_ma.hex(),
            "cpuidFamId": self.cpuid_fam_id,
            "cpuidModId": self.cpuid_mod_id,
            "cpuidStep": self.cpuid_step,
            "productLine": product.value if product else None,
            "chipId": self.chip_id.hex(),
            "currentVersion": f"{self.current_major}.{self.current_minor}.{self.current_build}",
            "committedVersion": (
                f"{self.committed_major}.{self.committed_minor}.{self.committed_build}"
            ),
            "launchMitVector": self.launch_mit_vector,
            "currentMitVector": self.current_mit_vector,
            "bodyDigest": self.body_digest(),
            "signatureR": self.signature_r.hex(),
            "signatureS": self.signature_s.hex(),
        }
        names: tuple[TcbName, ...] = ("current", "reported", "committed", "launch")
        for which in names:
            raw: int = getattr(self, f"{which}_tcb")
            entry: dict[str, object] = {"raw": f"{raw:#018x}"}
            if product is not None:
                entry.update(TcbVersion.decode(raw, product).to_json_dict())
            out[f"{which}Tcb"] = entry
        return out


#: Fields read as little-endian integers; every other field (and every reserved range) is bytes.
_INTEGER_FIELDS: Final = frozenset(
    {
        *_U64_FIELDS,
        *_U32_FIELDS,
        *_U8_FIELDS,
        *_CPUID_FIELDS,
        *_MIT_VECTOR_FIELDS,
        "policy",
        "platform_info",
        "flags",
    }
)
_INTEGER_CODES: Final = {1: "B", 4: "I", 8: "Q"}
#: The whole report in one ``struct`` call: parsing is on the verifier's hot path
#: (benchmarks/verify.py), and one unpack replaces a slice and int conversion per field.
_REPORT_STRUCT: Final = struct.Struct(
    "<"
    + "".join(
        _INTEGER_CODES[spec.size] if spec.name in _INTEGER_FIELDS else f"{spec.size}s"
        for spec in LAYOUT
    )
)
#: The order :func:`parse_report` unpacks into; it must be :data:`LAYOUT`'s.
_UNPACK_ORDER: Final = (  # noqa: SIM905 - one string reads as the unpack below
    "version guest_svn policy family_id image_id vmpl signature_algo current_tcb platform_info "
    "flags reserved_04c report_data measurement host_data id_key_digest author_key_digest "
    "report_id report_id_ma reported_tcb cpuid_fam_id cpuid_mod_id cpuid_step reserved_18b "
    "chip_id committed_tcb current_build current_minor current_major reserved_1eb "
    "committed_build committed_minor committed_major reserved_1ef launch_tcb launch_mit_vector "
    "current_mit_vector reserved_208 signature_r signature_s signature_reserved"
).split()
if tuple(_UNPACK_ORDER) != tuple(spec.name for spec in LAYOUT):  # pragma: no cover
    raise AssertionError("parse_report's unpack order differs from LAYOUT")
_ZERO: Final = {spec.name: bytes(spec.size) for spec in LAYOUT}
#: The reserved ranges in :data:`LAYOUT` order, which is the unpack's order too.
_RESERVED_FIELDS: Final = tuple(spec.name for spec in LAYOUT if spec.reserved)
_RESERVED_ZERO: Final = tuple(_ZERO[name] for name in _RESERVED_FIELDS)
# Pure functions of a u64 returning immutable values; a fleet's reports carry a few distinct
# ones. Errors are not cached.
_guest_policy: Final = functools.lru_cache(maxsize=256)(GuestPolicy.from_raw)
_platform_info: Final = functools.lru_cache(maxsize=256)(PlatformInfo.from_raw)


def _field_bytes(data: bytes, name: str) -> bytes:
    spec = FIELDS[name]
    return data[spec.offset : spec.end]


def _require_zero(name: str, value: bytes | int, data: bytes, why: str = "not all zero") -> None:
    if value:  # a non-zero int, or bytes compared below
        chunk = _field_bytes(data, name)
        if any(chunk):
            raise _mbz_error(FIELDS[name], chunk, why)


def parse_report(data: bytes) -> AttestationReport:
    """Parse a raw 1184-byte report.

    Raises:
        MalformedError: wrong size, unsupported version, unknown signature algorithm,
            reserved SIGNING_KEY, MBZ flag or policy bits, unknown CPUID product, any
            non-zero reserved range or signature tail. The message names the field,
            its offset range and the hex of the offending bytes.
    """
    if len(data) != REPORT_SIZE:
        raise MalformedError(
            f"report must be exactly {REPORT_SIZE} bytes ({REPORT_SIZE:#x}), got {len(data)}"
        )
    data = bytes(data)
    (
        version,
        guest_svn,
        policy,
        family_id,
        image_id,
        vmpl,
        algo,
        current_tcb,
        platform_info,
        flags,
        reserved_04c,
        report_data,
        measurement,
        host_data,
        id_key_digest,
        author_key_digest,
        report_id,
        report_id_ma,
        reported_tcb,
        cpuid_fam_id,
        cpuid_mod_id,
        cpuid_step,
        reserved_18b,
        chip_id,
        committed_tcb,
        current_build,
        current_minor,
        current_major,
        reserved_1eb,
        committed_build,
        committed_minor,
        committed_major,
        reserved_1ef,
        launch_tcb,
        launch_mit_vector,
        current_mit_vector,
        reserved_208,
        signature_r,
        signature_s,
        signature_reserved,
    ) = _REPORT_STRUCT.unpack(data)
    if version not in SUPPORTED_VERSIONS:
        raise _mbz_error(FIELDS["version"], _field_bytes(data, "version"), "unsupported (2..5)")
    if algo != SIGNATURE_ALGO_ECDSA_P384_SHA384:
        raise _mbz_error(
            FIELDS["signature_algo"], _field_bytes(data, "signature_algo"), "not 1 (ECDSA P-384)"
        )
    if flags >> 5:
        raise _mbz_error(FIELDS["flags"], _field_bytes(data, "flags"), "bits 31:5 must be zero")
    signing_key = flags >> 2 & 0b111
    if signing_key not in (SIGNING_KEY_VCEK, SIGNING_KEY_VLEK, SIGNING_KEY_NONE):
        raise _mbz_error(FIELDS["flags"], _field_bytes(data, "flags"), "SIGNING_KEY reserved value")
    reserved = (
        reserved_04c,
        reserved_18b,
        reserved_1eb,
        reserved_1ef,
        reserved_208,
        signature_reserved,
    )
    if reserved != _RESERVED_ZERO:
        for name, value in zip(_RESERVED_FIELDS, reserved, strict=True):
            if value != _ZERO[name]:
                raise _mbz_error(FIELDS[name], value)
    cpuid: tuple[int | None, int | None, int | None]
    if version < 3:
        for name, byte in zip(_CPUID_FIELDS, (cpuid_fam_id, cpuid_mod_id, cpuid_step), strict=True):
            _require_zero(name, byte, data, "reserved in version 2, not zero")
        cpuid = (None, None, None)
    else:
        product_line_from_cpuid(cpuid_fam_id, cpuid_mod_id)
        cpuid = (cpuid_fam_id, cpuid_mod_id, cpuid_step)
    vectors: tuple[int | None, int | None]
    if version < 5:
        for name, vector in zip(
            _MIT_VECTOR_FIELDS, (launch_mit_vector, current_mit_vector), strict=True
        ):
            _require_zero(name, vector, data, f"reserved in version {version}, not zero")
        vectors = (None, None)
    else:
        vectors = (launch_mit_vector, current_mit_vector)
    # The frozen constructor checks the values again (__post_init__): one way to build a
    # report, whether parsed or made, at the cost of 38 attribute sets on the hot path.
    return AttestationReport(
        version,
        guest_svn,
        _guest_policy(policy),
        family_id,
        image_id,
        vmpl,
        algo,
        current_tcb,
        _platform_info(platform_info),
        bool(flags & 1),
        bool(flags & 2),
        signing_key,
        report_data,
        measurement,
        host_data,
        id_key_digest,
        author_key_digest,
        report_id,
        report_id_ma,
        reported_tcb,
        *cpuid,
        chip_id,
        committed_tcb,
        current_build,
        current_minor,
        current_major,
        committed_build,
        committed_minor,
        committed_major,
        launch_tcb,
        *vectors,
        signature_r,
        signature_s,
    )


def serialize_report(report: AttestationReport) -> bytes:
    """The exact inverse of :func:`parse_report` (reserved ranges written as zero)."""
    values: dict[str, int | bytes] = {
        "policy": report.policy.raw,
        "platform_info": report.platform_info.raw,
        "flags": report.flags,
    }
    out = bytearray(REPORT_SIZE)
    for spec in LAYOUT:
        if spec.reserved:
            continue
        value = values[spec.name] if spec.name in values else getattr(report, spec.name)
        if value is None:  # CPUID in v2, mitigation vectors before v5: reserved, zero
            continue
        chunk = value if isinstance(value, bytes) else value.to_bytes(spec.size, "little")
        out[spec.offset : spec.end] = chunk
    return bytes(out)


def unsigned_template(product: ProductLine | None, *, version: int = 5) -> AttestationReport:
    """A valid unsigned report to build from with :func:`dataclasses.replace`.

    Defaults: policy 0x30000 (SMT allowed, no debug, no migration agent), VMPL 0,
    SIGNATURE_ALGO 1, SIGNING_KEY 0 (VCEK), REPORT_ID_MA all FF (no migration agent), the
    product's CPUID bytes (v3+; ``product`` may be None only for v2), every TCB, firmware
    version, digest and mitigation vector zero, and an all-zero signature.
    """
    if version >= 3:
        if product is None:
            raise ValueError("version 3+ reports need a product line for their CPUID bytes")
        fam, mod, step = TEMPLATE_CPUID[product]
        cpuid: tuple[int | None, int | None, int | None] = (fam, mod, step)
    else:
        cpuid = (None, None, None)
    vector = 0 if version >= 5 else None
    return AttestationReport(
        version=version,
        guest_svn=0,
        policy=GuestPolicy(),
        family_id=bytes(16),
        image_id=bytes(16),
        vmpl=0,
        signature_algo=SIGNATURE_ALGO_ECDSA_P384_SHA384,
        current_tcb=0,
        platform_info=PlatformInfo(),
        author_key_en=False,
        mask_chip_key=False,
        signing_key=SIGNING_KEY_VCEK,
        report_data=bytes(64),
        measurement=bytes(48),
        host_data=bytes(32),
        id_key_digest=bytes(48),
        author_key_digest=bytes(48),
        report_id=bytes(32),
        report_id_ma=b"\xff" * 32,
        reported_tcb=0,
        cpuid_fam_id=cpuid[0],
        cpuid_mod_id=cpuid[1],
        cpuid_step=cpuid[2],
        chip_id=bytes(64),
        committed_tcb=0,
        current_build=0,
        current_minor=0,
        current_major=0,
        committed_build=0,
        committed_minor=0,
        committed_major=0,
        launch_tcb=0,
        launch_mit_vector=vector,
        current_mit_vector=vector,
        signature_r=bytes(SIGNATURE_COMPONENT_SIZE),
        signature_s=bytes(SIGNATURE_COMPONENT_SIZE),
    )
