"""The attestation agent's JSON evidence <-> the raw 1184-byte SEV-SNP report.

The CoCo attestation agent (guest-components, virtee/sev 6.3.x serde shape) answers
``/aa/evidence`` with the report *parsed* into JSON, so the signed bytes have to be rebuilt
field by field before the signature can be checked. This module is pure: no IO.

Nothing about the report's bytes is declared here: offsets and sizes come from the one report
layout (:data:`attestation.abi.report.LAYOUT`) and the TCB byte positions from
:func:`attestation.abi.tcb.tcb_layout`; this module holds only the agent's key spellings
(``sig_algo`` for ``signature_algo``, ``bootloader`` for ``bl`` ...), its value shapes and its
order (virtee/sev 6.3 serialises the fields in ABI order). Like virtee/sev, it picks the Turin
TCB layout by the CPUID family alone (our parser then also checks the model).

Bytes that the JSON cannot carry (reserved ranges) must be zero in a report we convert to
JSON: otherwise the round trip would silently change the signed bytes, so we refuse.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from attestation.abi.product import ProductLine
from attestation.abi.report import FIELDS as REPORT_FIELDS
from attestation.abi.report import LAYOUT, REPORT_SIZE, SIGNATURE_COMPONENT_SIZE, cpuid_families
from attestation.abi.tcb import TCB_SIZE, tcb_layout

FieldKind = Literal["u32", "u64", "bytes", "tcb", "version", "opt_u8", "opt_u64"]


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    offset: int
    kind: FieldKind
    size: int


def _field(key: str, kind: FieldKind, layout_name: str | None = None) -> _Field:
    spec = REPORT_FIELDS[layout_name or key]
    return _Field(key, spec.offset, kind, spec.size)


def _version(key: str) -> _Field:
    # build, minor, major: three consecutive one-byte fields of the layout
    build = REPORT_FIELDS[f"{key}_build"]
    assert REPORT_FIELDS[f"{key}_major"].end == build.offset + 3
    return _Field(key, build.offset, "version", 3)


#: The agent's ``attestation_report`` keys, in the order virtee/sev 6.3 serialises them, with
#: the report field each one carries (``LAYOUT`` name where the agent spells it otherwise).
FIELDS: Final[tuple[_Field, ...]] = (
    _field("version", "u32"),
    _field("guest_svn", "u32"),
    _field("policy", "u64"),
    _field("family_id", "bytes"),
    _field("image_id", "bytes"),
    _field("vmpl", "u32"),
    _field("sig_algo", "u32", "signature_algo"),
    _field("current_tcb", "tcb"),
    _field("plat_info", "u64", "platform_info"),
    _field("key_info", "u32", "flags"),
    _field("report_data", "bytes"),
    _field("measurement", "bytes"),
    _field("host_data", "bytes"),
    _field("id_key_digest", "bytes"),
    _field("author_key_digest", "bytes"),
    _field("report_id", "bytes"),
    _field("report_id_ma", "bytes"),
    _field("reported_tcb", "tcb"),
    _field("cpuid_fam_id", "opt_u8"),
    _field("cpuid_mod_id", "opt_u8"),
    _field("cpuid_step", "opt_u8"),
    _field("chip_id", "bytes"),
    _field("committed_tcb", "tcb"),
    _version("current"),
    _version("committed"),
    _field("launch_tcb", "tcb"),
    _field("launch_mit_vector", "opt_u64"),
    _field("current_mit_vector", "opt_u64"),
)
OFF_VERSION: Final = REPORT_FIELDS["version"].offset
OFF_CPUID_FAM_ID: Final = REPORT_FIELDS["cpuid_fam_id"].offset
OFF_SIGNATURE_R: Final = REPORT_FIELDS["signature_r"].offset
OFF_SIGNATURE_S: Final = REPORT_FIELDS["signature_s"].offset
#: CPUID families whose TCB_VERSION uses the Turin layout (FMC in byte 0).
_TURIN_FAMILIES: Final = frozenset(
    family for line in ProductLine if line.uses_turin_tcb_layout for family in cpuid_families(line)
)
#: The agent's TCB key for each TCB component name (the certificate's SPL names).
_TCB_KEY: Final[Mapping[str, str]] = {
    "fmc": "fmc",
    "bl": "bootloader",
    "tee": "tee",
    "snp": "snp",
    "ucode": "microcode",
}
_TCB_KEYS: Final = tuple(_TCB_KEY.values())
#: One layout per TCB shape (Milan and Genoa share theirs), as agent key -> byte index; the
#: reserved bytes (spl4..spl7) have no key and must be zero.
_LEGACY_TCB: Final[Mapping[str, int]] = {
    _TCB_KEY[name]: index
    for name, index in tcb_layout(ProductLine.MILAN).items()
    if name in _TCB_KEY
}
_TURIN_TCB: Final[Mapping[str, int]] = {
    _TCB_KEY[name]: index
    for name, index in tcb_layout(ProductLine.TURIN).items()
    if name in _TCB_KEY
}
_RESERVED: Final = tuple((spec.offset, spec.end) for spec in LAYOUT if spec.reserved)

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
    version = int.from_bytes(report[OFF_VERSION : OFF_VERSION + 4], "little")
    return version >= 3 and report[OFF_CPUID_FAM_ID] in _TURIN_FAMILIES


def _tcb_to_json(raw: bytes, *, turin: bool) -> dict[str, int | None]:
    layout = _TURIN_TCB if turin else _LEGACY_TCB
    out: dict[str, int | None] = dict.fromkeys(_TCB_KEYS)
    for key, index in layout.items():
        out[key] = raw[index]
    used = set(layout.values())
    if any(raw[i] for i in range(TCB_SIZE) if i not in used):
        raise AgentJsonError(f"TCB value {raw.hex()} has non-zero reserved bytes")
    return out


def _check_reserved_zero(report: bytes) -> None:
    for start, end in _RESERVED:
        for index in range(start, end):
            if report[index]:
                raise AgentJsonError(
                    f"report byte 0x{index:03X} is reserved but non-zero; the agent's JSON "
                    "cannot carry it"
                )


def report_to_agent_json(report: bytes) -> dict[str, Any]:
    """The agent's ``attestation_report`` object for a raw report (inverse of the rebuild)."""
    if len(report) != REPORT_SIZE:
        raise AgentJsonError(f"report must be {REPORT_SIZE} bytes, got {len(report)}")
    _check_reserved_zero(report)
    version = int.from_bytes(report[OFF_VERSION : OFF_VERSION + 4], "little")
    turin = _uses_turin_layout(report)
    out: dict[str, Any] = {}
    for field in FIELDS:
        chunk = report[field.offset : field.offset + field.size]
        if field.kind in ("u32", "u64"):
            out[field.name] = int.from_bytes(chunk, "little")
        elif field.kind == "bytes":
            out[field.name] = list(chunk)
        elif field.kind == "tcb":
            out[field.name] = _tcb_to_json(chunk, turin=turin)
        elif field.kind == "version":
            out[field.name] = {"major": chunk[2], "minor": chunk[1], "build": chunk[0]}
        elif field.kind == "opt_u8":
            out[field.name] = chunk[0] if version >= 3 else None
        else:  # opt_u64: mitigation vectors exist from report version 5
            out[field.name] = int.from_bytes(chunk, "little") if version >= 5 else None
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
    raw = bytearray(TCB_SIZE)
    for key, index in (_TURIN_TCB if turin else _LEGACY_TCB).items():
        raw[index] = _require_int(obj[key], f"{where}.{key}", 8)
    return bytes(raw)


def report_from_agent_json(value: object) -> bytes:
    """Rebuild the raw signed report from the agent's ``attestation_report`` object."""
    obj = _require_object(value, "attestation_report", [f.name for f in FIELDS] + ["signature"])
    version = _require_int(obj["version"], "attestation_report.version", 32)
    fam = obj["cpuid_fam_id"]
    turin = version >= 3 and fam in _TURIN_FAMILIES
    raw = bytearray(REPORT_SIZE)
    for field in FIELDS:
        where = f"attestation_report.{field.name}"
        item = obj[field.name]
        if field.kind in ("u32", "u64"):
            value = _require_int(item, where, 8 * field.size)
            raw[field.offset : field.offset + field.size] = value.to_bytes(field.size, "little")
        elif field.kind == "bytes":
            raw[field.offset : field.offset + field.size] = _require_bytes(item, where, field.size)
        elif field.kind == "tcb":
            raw[field.offset : field.offset + TCB_SIZE] = _tcb_from_json(item, where, turin=turin)
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
