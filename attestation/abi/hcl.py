"""The HCL report of Azure confidential VMs: the SEV-SNP report the paravisor requested at boot.

Azure's paravisor (HCL) asks the PSP for a report whose REPORT_DATA[0:32] is SHA-256 of a JSON
"variable data" document holding the vTPM attestation key (``HCLAkPub``) and ``user-data``; the
guest reads the whole report from vTPM NV index 0x01400001. Layout (little-endian) as
kinvolk/azure-cvm-tooling parses it (``az-cvm-vtpm/src/hcl/mod.rs`` @ e4e44074) and as the real
reports in tests/assets/azure-vtpm show:

=========  ======  ===================================================================
offset     size    field
=========  ======  ===================================================================
0x000      32      header: signature ``HCLA``, version, report_size, request_type,
                   status, 12 reserved bytes
0x020      1184    the SEV-SNP ATTESTATION_REPORT (:mod:`attestation.abi.report`)
0x4C0      20      IGVM request data: data_size, version, report_type (2 = SNP),
                   report_data_hash_type (1 = SHA-256), variable_data_size
0x4D4      n       variable data (JSON), ``report_size`` ends it
...        rest    zero up to the NV index's 2600 bytes
=========  ======  ===================================================================

The embedded SNP report is parsed by :func:`attestation.abi.report.parse_report`, the one
parser of those bytes.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from typing import Final

from attestation.abi.report import REPORT_SIZE, AttestationReport, parse_report
from attestation.encoding.json_document import parse_strict_json
from attestation.errors import MalformedError

#: The NV index holds the report in a buffer of this size (zero after ``report_size``).
HCL_REPORT_SIZE: Final = 2600
HCL_SIGNATURE: Final = b"HCLA"
HEADER_SIZE: Final = 0x20
SNP_REPORT_OFFSET: Final = HEADER_SIZE
IGVM_REQUEST_OFFSET: Final = SNP_REPORT_OFFSET + REPORT_SIZE
IGVM_REQUEST_SIZE: Final = 20
VARIABLE_DATA_OFFSET: Final = IGVM_REQUEST_OFFSET + IGVM_REQUEST_SIZE
#: Header versions seen on Azure (1 on Milan, 2 on Genoa); the layout is the same.
SUPPORTED_HEADER_VERSIONS: Final = frozenset({1, 2})
#: request_type 2: an attestation request (the only kind whose report Azure exposes).
REQUEST_TYPE_ATTESTATION: Final = 2
IGVM_REQUEST_VERSION: Final = 1
REPORT_TYPE_SNP: Final = 2
REPORT_DATA_HASH_SHA256: Final = 1
#: The JWK ``kid`` of the vTPM attestation key in the variable data.
AK_KEY_ID: Final = "HCLAkPub"
#: ``user-data`` is 64 bytes, written as 128 hex digits (vTPM NV index 0x01400002).
USER_DATA_SIZE: Final = 64
#: The attestation agent's az-snp-vtpm evidence version from which ``user-data`` carries the
#: caller's report data too (earlier versions leave it zero).
USER_DATA_FORMAT: Final = 2
#: RSA moduli accepted for the attestation key (Azure's is 2048 bits).
AK_MODULUS_BITS: Final = 2048

_HEADER: Final = struct.Struct("<4sIIII12s")
_IGVM: Final = struct.Struct("<IIIII")


@dataclass(frozen=True, slots=True)
class AkPublicKey:
    """The RSA public numbers of the vTPM attestation key (the ``HCLAkPub`` JWK)."""

    modulus: int
    exponent: int


@dataclass(frozen=True, slots=True)
class VariableData:
    """What the verdict reads from the variable data JSON (the rest is kept in the raw bytes)."""

    ak_public_key: AkPublicKey
    user_data: bytes | None


@dataclass(frozen=True, slots=True)
class HclReport:
    """One HCL report, every field named (see the module's table)."""

    header_version: int
    report_size: int
    request_type: int
    status: int
    snp_report: AttestationReport
    snp_report_bytes: bytes
    igvm_data_size: int
    igvm_version: int
    report_type: int
    report_data_hash_type: int
    variable_data_bytes: bytes
    variable_data: VariableData


def _where(name: str, offset: int, size: int) -> str:
    return f"HCL report {name} [{offset:#05x}:{offset + size:#05x}]"


def _require(ok: bool, name: str, offset: int, size: int, problem: str) -> None:
    if not ok:
        raise MalformedError(f"{_where(name, offset, size)} {problem}")


def parse_hcl_report(data: bytes) -> HclReport:
    """An HCL report from the 2600 bytes of the vTPM NV index.

    Raises:
        MalformedError: naming the field, its offset and what is wrong (the embedded SNP
            report's own errors name its field and offset within the SNP report).
    """
    if len(data) != HCL_REPORT_SIZE:
        raise MalformedError(f"HCL report is {len(data)} bytes, not {HCL_REPORT_SIZE}")
    signature, version, report_size, request_type, status, reserved = _HEADER.unpack_from(data)
    _require(signature == HCL_SIGNATURE, "signature", 0, 4, f"is {signature!r}, not b'HCLA'")
    _require(
        version in SUPPORTED_HEADER_VERSIONS, "version", 4, 4, f"{version} is not supported (1, 2)"
    )
    _require(
        request_type == REQUEST_TYPE_ATTESTATION,
        "request_type",
        0xC,
        4,
        f"is {request_type}, not 2 (attestation)",
    )
    _require(status == 0, "status", 0x10, 4, f"is {status}, not 0 (success)")
    _require(not any(reserved), "reserved", 0x14, 12, f"not all zero: {reserved.hex()}")
    snp_bytes = data[SNP_REPORT_OFFSET:IGVM_REQUEST_OFFSET]
    try:
        snp_report = parse_report(snp_bytes)
    except MalformedError as exc:
        raise MalformedError(f"HCL report's SNP report at {SNP_REPORT_OFFSET:#x}: {exc}") from None
    data_size, igvm_version, report_type, hash_type, var_size = _IGVM.unpack_from(
        data, IGVM_REQUEST_OFFSET
    )
    off = IGVM_REQUEST_OFFSET
    _require(igvm_version == IGVM_REQUEST_VERSION, "igvm.version", off + 4, 4, "is not 1")
    _require(report_type == REPORT_TYPE_SNP, "igvm.report_type", off + 8, 4, "is not 2 (SNP)")
    _require(
        hash_type == REPORT_DATA_HASH_SHA256,
        "igvm.report_data_hash_type",
        off + 12,
        4,
        "is not 1 (SHA-256)",
    )
    _require(
        VARIABLE_DATA_OFFSET + var_size <= HCL_REPORT_SIZE,
        "igvm.variable_data_size",
        off + 16,
        4,
        f"{var_size} runs past the report's end",
    )
    _require(
        data_size == IGVM_REQUEST_SIZE + var_size,
        "igvm.data_size",
        off,
        4,
        f"{data_size} is not 20 + variable_data_size ({var_size})",
    )
    end = VARIABLE_DATA_OFFSET + var_size
    _require(report_size == end, "report_size", 8, 4, f"{report_size} does not end at {end}")
    _require(not any(data[end:]), "padding", end, HCL_REPORT_SIZE - end, "after the variable data")
    variable_bytes = data[VARIABLE_DATA_OFFSET:end]
    return HclReport(
        header_version=version,
        report_size=report_size,
        request_type=request_type,
        status=status,
        snp_report=snp_report,
        snp_report_bytes=snp_bytes,
        igvm_data_size=data_size,
        igvm_version=igvm_version,
        report_type=report_type,
        report_data_hash_type=hash_type,
        variable_data_bytes=variable_bytes,
        variable_data=parse_variable_data(variable_bytes),
    )


def serialize_hcl_report(report: HclReport) -> bytes:
    """The 2600 bytes of ``report`` (the inverse of :func:`parse_hcl_report`)."""
    header = _HEADER.pack(
        HCL_SIGNATURE,
        report.header_version,
        report.report_size,
        report.request_type,
        report.status,
        bytes(12),
    )
    igvm = _IGVM.pack(
        report.igvm_data_size,
        report.igvm_version,
        report.report_type,
        report.report_data_hash_type,
        len(report.variable_data_bytes),
    )
    body = header + report.snp_report_bytes + igvm + report.variable_data_bytes
    if len(body) > HCL_REPORT_SIZE:
        raise MalformedError(f"HCL report would be {len(body)} bytes, over {HCL_REPORT_SIZE}")
    return body + bytes(HCL_REPORT_SIZE - len(body))


def _base64url_uint(value: object, where: str) -> int:
    if not isinstance(value, str) or not value or "=" in value:
        raise MalformedError(f"{where} must be unpadded base64url text")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError) as exc:
        raise MalformedError(f"{where} is not base64url: {exc}") from None
    if not raw or raw[0] == 0:
        raise MalformedError(f"{where} has a leading zero byte (not a JWK integer)")
    return int.from_bytes(raw, "big")


def parse_variable_data(data: bytes) -> VariableData:
    """The attestation key and ``user-data`` of the HCL variable data (JSON).

    Exactly one JWK with ``kid`` ``HCLAkPub``, an RSA-2048 key; ``user-data``, when present,
    128 hex digits.

    Raises:
        MalformedError: naming what is missing or wrong.
    """
    document = parse_strict_json(data, what="HCL variable data")
    if not isinstance(document, dict):
        raise MalformedError("HCL variable data must be a JSON object")
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise MalformedError("HCL variable data has no 'keys' array")
    aks = [key for key in keys if isinstance(key, dict) and key.get("kid") == AK_KEY_ID]
    if len(aks) != 1:
        raise MalformedError(f"HCL variable data has {len(aks)} '{AK_KEY_ID}' keys, not one")
    ak = aks[0]
    where = f"HCL variable data key '{AK_KEY_ID}'"
    if ak.get("kty") != "RSA":
        raise MalformedError(f"{where} has kty {ak.get('kty')!r}, not 'RSA'")
    modulus = _base64url_uint(ak.get("n"), f"{where} n")
    exponent = _base64url_uint(ak.get("e"), f"{where} e")
    if modulus.bit_length() != AK_MODULUS_BITS:
        raise MalformedError(
            f"{where} is a {modulus.bit_length()}-bit key, not RSA-{AK_MODULUS_BITS}"
        )
    user_data = document.get("user-data")
    if user_data is not None:
        if not isinstance(user_data, str) or len(user_data) != 2 * USER_DATA_SIZE:
            raise MalformedError("HCL variable data 'user-data' must be 128 hex digits")
        try:
            user_bytes: bytes | None = bytes.fromhex(user_data)
        except ValueError:
            raise MalformedError("HCL variable data 'user-data' is not hex") from None
        if len(user_bytes or b"") != USER_DATA_SIZE:
            raise MalformedError("HCL variable data 'user-data' is not 128 hex digits")
    else:
        user_bytes = None
    return VariableData(AkPublicKey(modulus, exponent), user_bytes)
