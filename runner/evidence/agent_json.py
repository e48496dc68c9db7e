"""The attestation agent's JSON evidence <-> the raw 1184-byte SEV-SNP report.

The CoCo attestation agent (guest-components, virtee/sev 6.3.x serde shape) answers
``/aa/evidence`` with the report *parsed* into JSON, so the signed bytes have to be rebuilt
field by field before the signature can be checked. This module is pure: no IO.

Layout (ABI table 23, report versions 2..5; design/coco-runtime.md "Report layout")::

    0x000 version u32        0x004 guest_svn u32      0x008 policy u64
    0x010 family_id[16]      0x020 image_id[16]       0x030 vmpl u32
    0x034 sig_algo u32       0x038 current_tcb u64    0x040 plat_info u64
    0x048 key_info u32       0x050 report_data[64]    0x090 measurement[48]
    0x0C0 host_data[32]      0x0E0 id_key_digest[48]  0x110 author_key_digest[48]
    0x140 report_id[32]      0x160 report_id_ma[32]   0x180 reported_tcb u64
    0x188 cpuid fam/mod/step (v3+)                    0x1A0 chip_id[64]
    0x1E0 committed_tcb u64  0x1E8 current build/minor/major
    0x1EC committed build/minor/major                 0x1F0 launch_tcb u64
    0x1F8 launch_mit_vector u64 (v5)                  0x200 current_mit_vector u64 (v5)
    0x2A0 signature r[72] s[72], then reserved up to 0x4A0

Bytes that the JSON cannot carry (reserved ranges) must be zero in a report we convert to
JSON: otherwise the round trip would silently change the signed bytes, so we refuse.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from attestation.abi.report import REPORT_SIZE, SIGNATURE_COMPONENT_SIZE

#: Offsets of the fields (ABI names in comments where ours differ).
OFF_VERSION: Final = 0x000
OFF_GUEST_SVN: Final = 0x004
OFF_POLICY: Final = 0x008
OFF_FAMILY_ID: Final = 0x010
OFF_IMAGE_ID: Final = 0x020
OFF_VMPL: Final = 0x030
OFF_SIG_ALGO: Final = 0x034
OFF_CURRENT_TCB: Final = 0x038
OFF_PLAT_INFO: Final = 0x040
OFF_KEY_INFO: Final = 0x048
OFF_REPORT_DATA: Final = 0x050
OFF_MEASUREMENT: Final = 0x090
OFF_HOST_DATA: Final = 0x0C0
OFF_ID_KEY_DIGEST: Final = 0x0E0
OFF_AUTHOR_KEY_DIGEST: Final = 0x110
OFF_REPORT_ID: Final = 0x140
OFF_REPORT_ID_MA: Final = 0x160
OFF_REPORTED_TCB: Final = 0x180
OFF_CPUID_FAM_ID: Final = 0x188
OFF_CPUID_MOD_ID: Final = 0x189
OFF_CPUID_STEP: Final = 0x18A
OFF_CHIP_ID: Final = 0x1A0
OFF_COMMITTED_TCB: Final = 0x1E0
OFF_CURRENT_VERSION: Final = 0x1E8
OFF_COMMITTED_VERSION: Final = 0x1EC
OFF_LAUNCH_TCB: Final = 0x1F0
OFF_LAUNCH_MIT_VECTOR: Final = 0x1F8
OFF_CURRENT_MIT_VECTOR: Final = 0x200
OFF_SIGNATURE_R: Final = 0x2A0
OFF_SIGNATURE_S: Final = 0x2E8

#: CPUID family of Turin; its TCB_VERSION puts FMC in byte 0 (virtee/sev from_turin_bytes).
TURIN_CPUID_FAMILY: Final = 0x1A

FieldKind = Literal["u32", "u64", "bytes", "tcb", "version", "opt_u8", "opt_u64"]


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    offset: int
    kind: FieldKind
    size: int


#: The agent's ``attestation_report`` keys, in the order virtee/sev 6.3 serialises them.
FIELDS: Final[tuple[_Field, ...]] = (
    _Field("version", OFF_VERSION, "u32", 4),
    _Field("guest_svn", OFF_GUEST_SVN, "u32", 4),
    _Field("policy", OFF_POLICY, "u64", 8),
    _Field("family_id", OFF_FAMILY_ID, "bytes", 16),
    _Field("image_id", OFF_IMAGE_ID, "bytes", 16),
    _Field("vmpl", OFF_VMPL, "u32", 4),
    _Field("sig_algo", OFF_SIG_ALGO, "u32", 4),
    _Field("current_tcb", OFF_CURRENT_TCB, "tcb", 8),
    _Field("plat_info", OFF_PLAT_INFO, "u64", 8),
    _Field("key_info", OFF_KEY_INFO, "u32", 4),
    _Field("report_data", OFF_REPORT_DATA, "bytes", 64),
    _Field("measurement", OFF_MEASUREMENT, "bytes", 48),
    _Field("host_data", OFF_HOST_DATA, "bytes", 32),
    _Field("id_key_digest", OFF_ID_KEY_DIGEST, "bytes", 48),
    _Field("author_key_digest", OFF_AUTHOR_KEY_DIGEST, "bytes", 48),
    _Field("report_id", OFF_REPORT_ID, "bytes", 32),
    _Field("report_id_ma", OFF_REPORT_ID_MA, "bytes", 32),
    _Field("reported_tcb", OFF_REPORTED_TCB, "tcb", 8),
    _Field("cpuid_fam_id", OFF_CPUID_FAM_ID, "opt_u8", 1),
    _Field("cpuid_mod_id", OFF_CPUID_MOD_ID, "opt_u8", 1),
    _Field("cpuid_step", OFF_CPUID_STEP, "opt_u8", 1),
    _Field("chip_id", OFF_CHIP_ID, "bytes", 64),
    _Field("committed_tcb", OFF_COMMITTED_TCB, "tcb", 8),
    _Field("current", OFF_CURRENT_VERSION, "version", 3),
    _Field("committed", OFF_COMMITTED_VERSION, "version", 3),
    _Field("launch_tcb", OFF_LAUNCH_TCB, "tcb", 8),
    _Field("launch_mit_vector", OFF_LAUNCH_MIT_VECTOR, "opt_u64", 8),
    _Field("current_mit_vector", OFF_CURRENT_MIT_VECTOR, "opt_u64", 8),
)

#: TCB_VERSION byte index per component, legacy (Milan/Genoa) and Turin layouts.
_LEGACY_TCB: Final[Mapping[str, int]] = {"bootloader": 0, "tee": 1, "snp": 6, "microcode": 7}
_TURIN_TCB: Final[Mapping[str, int]] = {
    "fmc": 0,
    "bootloader": 1,
    "tee": 2,
    "snp": 3,
    "microcode": 7,
}
_TCB_KEYS: Final = ("fmc", "bootloader", "tee", "snp", "microcode")

#: Certificate-type spellings of virtee/sev ``CertType`` and which of them are certificates.
CERT_TYPES: Final = frozenset({"ARK", "ASK", "VCEK", "VLEK", "CRL", "Empty"})
_CERTIFICATE_TYPES: Final = frozenset({"ARK", "ASK", "VCEK", "VLEK"})


class AgentJsonError(ValueError):
    """The agent's JSON evidence does not have the documented shape."""


@dataclass(frozen=True, slots=True)
class AgentCertEntry:
    """One ``cert_chain`` entry; ``cert_type`` is a name or ``OTHER:<uuid>``."""

    cert_type: str
    data: bytes

    @property
    def is_certificate(self) -> bool:
        """True for VCEK/VLEK/ASK/ARK entries (CRL, Empty and OTHER are not certificates)."""
        return self.cert_type in _CERTIFICATE_TYPES


@dataclass(frozen=True, slots=True)
class AgentEvidence:
    """A parsed ``/aa/evidence`` answer for SNP."""

    report: bytes
    cert_chain: tuple[AgentCertEntry, ...] | None
    """``None`` when the agent sent ``"cert_chain": null``."""

    @property
    def certificates(self) -> tuple[bytes, ...]:
        """DER certificates, signer first (VCEK/VLEK, then ASK, then ARK), others dropped."""
        order = {"VCEK": 0, "VLEK": 0, "ASK": 1, "ARK": 2}
        entries = [e for e in self.cert_chain or () if e.is_certificate and e.data]
        return tuple(e.data for e in sorted(entries, key=lambda e: order[e.cert_type]))


# --------------------------------------------------------------------------- raw -> JSON


def _uses_turin_layout(report: bytes) -> bool:
    version = struct.unpack_from("<I", report, OFF_VERSION)[0]
    return version >= 3 and report[OFF_CPUID_FAM_ID] == TURIN_CPUID_FAMILY


def _tcb_to_json(raw: bytes, *, turin: bool) -> dict[str, int | None]:
    layout = _TURIN_TCB if turin else _LEGACY_TCB
    out: dict[str, int | None] = dict.fromkeys(_TCB_KEYS)
    for key, index in layout.items():
        out[key] = raw[index]
    used = set(layout.values())
    if any(raw[i] for i in range(8) if i not in used):
        raise AgentJsonError(f"TCB value {raw.hex()} has non-zero reserved bytes")
    return out


def _check_reserved_zero(report: bytes) -> None:
    covered = bytearray(REPORT_SIZE)
    for field in FIELDS:
        covered[field.offset : field.offset + field.size] = b"\x01" * field.size
    covered[OFF_SIGNATURE_R : OFF_SIGNATURE_S + SIGNATURE_COMPONENT_SIZE] = b"\x01" * 144
    for index, byte in enumerate(report):
        if byte and not covered[index]:
            raise AgentJsonError(
                f"report byte 0x{index:03X} is reserved but non-zero; the agent's JSON "
                "cannot carry it"
            )


def report_to_agent_json(report: bytes) -> dict[str, Any]:
    """The agent's ``attestation_report`` object for a raw report (inverse of the rebuild)."""
    if len(report) != REPORT_SIZE:
        raise AgentJsonError(f"report must be {REPORT_SIZE} bytes, got {len(report)}")
    _check_reserved_zero(report)
    version = struct.unpack_from("<I", report, OFF_VERSION)[0]
    turin = _uses_turin_layout(report)
    out: dict[str, Any] = {}
    for field in FIELDS:
        chunk = report[field.offset : field.offset + field.size]
        if field.kind == "u32":
            out[field.name] = struct.unpack("<I", chunk)[0]
        elif field.kind == "u64":
            out[field.name] = struct.unpack("<Q", chunk)[0]
        elif field.kind == "bytes":
            out[field.name] = list(chunk)
        elif field.kind == "tcb":
            out[field.name] = _tcb_to_json(chunk, turin=turin)
        elif field.kind == "version":
            out[field.name] = {"major": chunk[2], "minor": chunk[1], "build": chunk[0]}
        elif field.kind == "opt_u8":
            out[field.name] = chunk[0] if version >= 3 else None
        else:  # opt_u64: mitigation vectors exist from report version 5
            out[field.name] = struct.unpack("<Q", chunk)[0] if version >= 5 else None
    out["signature"] = {
        "r": list(report[OFF_SIGNATURE_R : OFF_SIGNATURE_R + SIGNATURE_COMPONENT_SIZE]),
        "s": list(report[OFF_SIGNATURE_S : OFF_SIGNATURE_S + SIGNATURE_COMPONENT_SIZE]),
    }
    return out


def evidence_to_agent_json(report: bytes, cert_chain: Sequence[AgentCertEntry] | None) -> str:
    """The full ``/aa/evidence`` body the agent would send (used by emulators and tests)."""
    chain: list[dict[str, Any]] | None = None
    if cert_chain is not None:
        chain = []
        for entry in cert_chain:
            cert_type: Any = entry.cert_type
            if entry.cert_type.startswith("OTHER:"):
                cert_type = {"OTHER": entry.cert_type.removeprefix("OTHER:")}
            chain.append({"cert_type": cert_type, "data": list(entry.data)})
    return json.dumps({"attestation_report": report_to_agent_json(report), "cert_chain": chain})


# --------------------------------------------------------------------------- JSON -> raw


def _require_int(value: object, where: str, bits: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AgentJsonError(f"{where} must be an integer, got {type(value).__name__}")
    if not 0 <= value < (1 << bits):
        raise AgentJsonError(f"{where} must fit in {bits} unsigned bits, got {value}")
    return value


def _require_bytes(value: object, where: str, size: int) -> bytes:
    if not isinstance(value, list):
        raise AgentJsonError(f"{where} must be an array of {size} integers")
    if len(value) != size:
        raise AgentJsonError(f"{where} must have {size} elements, got {len(value)}")
    return bytes(_require_int(v, f"{where}[{i}]", 8) for i, v in enumerate(value))


def _require_object(value: object, where: str, keys: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise AgentJsonError(f"{where} must be an object")
    missing = [k for k in keys if k not in value]
    unknown = sorted(set(value) - set(keys))
    if missing:
        raise AgentJsonError(f"{where} lacks {', '.join(missing)}")
    if unknown:
        raise AgentJsonError(f"{where} has unknown keys {', '.join(unknown)}")
    return value


def _tcb_from_json(value: object, where: str, *, turin: bool) -> bytes:
    obj = _require_object(value, where, _TCB_KEYS)
    if (obj["fmc"] is not None) != turin:
        raise AgentJsonError(
            f"{where}.fmc is {'missing' if turin else 'set'} but the report's CPUID family "
            f"{'is' if turin else 'is not'} Turin"
        )
    raw = bytearray(8)
    for key, index in (_TURIN_TCB if turin else _LEGACY_TCB).items():
        raw[index] = _require_int(obj[key], f"{where}.{key}", 8)
    return bytes(raw)


def report_from_agent_json(value: object) -> bytes:
    """Rebuild the raw signed report from the agent's ``attestation_report`` object."""
    obj = _require_object(value, "attestation_report", [f.name for f in FIELDS] + ["signature"])
    version = _require_int(obj["version"], "attestation_report.version", 32)
    fam = obj["cpuid_fam_id"]
    turin = version >= 3 and fam == TURIN_CPUID_FAMILY
    raw = bytearray(REPORT_SIZE)
    for field in FIELDS:
        where = f"attestation_report.{field.name}"
        item = obj[field.name]
        if field.kind == "u32":
            struct.pack_into("<I", raw, field.offset, _require_int(item, where, 32))
        elif field.kind == "u64":
            struct.pack_into("<Q", raw, field.offset, _require_int(item, where, 64))
        elif field.kind == "bytes":
            raw[field.offset : field.offset + field.size] = _require_bytes(item, where, field.size)
        elif field.kind == "tcb":
            raw[field.offset : field.offset + 8] = _tcb_from_json(item, where, turin=turin)
        elif field.kind == "version":
            ver = _require_object(item, where, ("major", "minor", "build"))
            raw[field.offset] = _require_int(ver["build"], f"{where}.build", 8)
            raw[field.offset + 1] = _require_int(ver["minor"], f"{where}.minor", 8)
            raw[field.offset + 2] = _require_int(ver["major"], f"{where}.major", 8)
        elif item is not None:  # optional fields: null means absent (zero bytes)
            bits = 8 if field.kind == "opt_u8" else 64
            raw[field.offset : field.offset + field.size] = _require_int(
                item, where, bits
            ).to_bytes(field.size, "little")
    sig = _require_object(obj["signature"], "attestation_report.signature", ("r", "s"))
    raw[OFF_SIGNATURE_R : OFF_SIGNATURE_R + SIGNATURE_COMPONENT_SIZE] = _require_bytes(
        sig["r"], "attestation_report.signature.r", SIGNATURE_COMPONENT_SIZE
    )
    raw[OFF_SIGNATURE_S : OFF_SIGNATURE_S + SIGNATURE_COMPONENT_SIZE] = _require_bytes(
        sig["s"], "attestation_report.signature.s", SIGNATURE_COMPONENT_SIZE
    )
    return bytes(raw)


def _cert_entry_from_json(value: object, index: int) -> AgentCertEntry:
    where = f"cert_chain[{index}]"
    obj = _require_object(value, where, ("cert_type", "data"))
    cert_type = obj["cert_type"]
    if isinstance(cert_type, dict) and set(cert_type) == {"OTHER"}:
        try:
            name = "OTHER:" + str(uuid.UUID(str(cert_type["OTHER"])))
        except ValueError as exc:
            raise AgentJsonError(f"{where}.cert_type OTHER is not a UUID") from exc
    elif isinstance(cert_type, str) and cert_type in CERT_TYPES:
        name = cert_type
    else:
        raise AgentJsonError(f"{where}.cert_type {cert_type!r} is not a known certificate type")
    data = obj["data"]
    if not isinstance(data, list):
        raise AgentJsonError(f"{where}.data must be an array of integers")
    return AgentCertEntry(name, bytes(_require_int(v, f"{where}.data", 8) for v in data))


def parse_agent_evidence(body: bytes | str) -> AgentEvidence:
    """Parse an ``/aa/evidence`` answer from the SNP attester into raw report + chain."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AgentJsonError(f"evidence is not JSON: {exc}") from exc
    return agent_evidence_from_document(doc)


def agent_evidence_from_document(doc: object) -> AgentEvidence:
    """:func:`parse_agent_evidence` for an answer already decoded from JSON."""
    if not isinstance(doc, dict):
        raise AgentJsonError("evidence must be a JSON object")
    if "attestation_report" not in doc:
        raise AgentJsonError(f"evidence lacks attestation_report (keys: {sorted(doc)})")
    unknown = sorted(set(doc) - {"attestation_report", "cert_chain"})
    if unknown:
        raise AgentJsonError(f"evidence has unknown keys {', '.join(unknown)}")
    report = report_from_agent_json(doc["attestation_report"])
    chain_json = doc.get("cert_chain")
    if chain_json is None:
        return AgentEvidence(report, None)
    if not isinstance(chain_json, list):
        raise AgentJsonError("cert_chain must be an array or null")
    entries = tuple(_cert_entry_from_json(v, i) for i, v in enumerate(chain_json))
    return AgentEvidence(report, entries)
