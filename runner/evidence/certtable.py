"""The GHCB extended-report certificate table (``auxblob`` / SNP_GET_EXT_REPORT buffer).

Layout (GHCB spec MSG_REPORT_REQ; kernel ``struct snp_msg_cert_entry``): 24-byte entries
``{guid[16] (RFC 4122 byte order), offset u32 LE, length u32 LE}``, ended by an all-zero
entry. Offsets count from the start of the buffer; certificates are DER. Pure, no IO.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Final

ENTRY_SIZE: Final = 24
_ENTRY: Final = struct.Struct("<16sII")

GUID_VCEK: Final = uuid.UUID("63da758d-e664-4564-adc5-f4b93be8accd")
GUID_VLEK: Final = uuid.UUID("a8074bc2-a25a-483e-aae6-39c045a0b8a1")
GUID_ASK: Final = uuid.UUID("4ab7b379-bbac-4fe4-a02f-05aef327c782")  # also the ASVK
GUID_ARK: Final = uuid.UUID("c0b406a4-a803-4952-9743-3fb6014cd0ae")
GUID_CRL: Final = uuid.UUID("92f81bc3-5811-4d3d-97ff-d19f88dc67ea")

GUID_NAMES: Final = {
    GUID_VCEK: "VCEK",
    GUID_VLEK: "VLEK",
    GUID_ASK: "ASK",
    GUID_ARK: "ARK",
    GUID_CRL: "CRL",
}
#: Certificates go into the envelope signer first, then intermediate, then root.
_CHAIN_ORDER: Final = (GUID_VCEK, GUID_VLEK, GUID_ASK, GUID_ARK)


class CertTableError(ValueError):
    """The certificate table is malformed (no terminator, entry out of bounds, ...)."""


@dataclass(frozen=True, slots=True)
class CertTableEntry:
    guid: uuid.UUID
    data: bytes

    @property
    def name(self) -> str:
        """VCEK/VLEK/ASK/ARK/CRL, or the GUID for entries we do not know."""
        return GUID_NAMES.get(self.guid, str(self.guid))


def parse_cert_table(buffer: bytes) -> tuple[CertTableEntry, ...]:
    """Parse a certificate table; an empty buffer means "no certificates"."""
    if not buffer:
        return ()
    entries: list[CertTableEntry] = []
    seen: set[uuid.UUID] = set()
    position = 0
    while True:
        if position + ENTRY_SIZE > len(buffer):
            raise CertTableError(
                f"certificate table has no all-zero terminator within {len(buffer)} bytes"
            )
        raw_guid, offset, length = _ENTRY.unpack_from(buffer, position)
        if raw_guid == bytes(16) and offset == 0 and length == 0:
            break
        guid = uuid.UUID(bytes=raw_guid)
        where = f"certificate table entry {len(entries)} ({GUID_NAMES.get(guid, guid)})"
        if guid in seen:
            raise CertTableError(f"{where} appears twice")
        seen.add(guid)
        table_end = position + ENTRY_SIZE
        if offset < table_end or offset + length > len(buffer):
            raise CertTableError(
                f"{where} points at bytes {offset}..{offset + length}, outside the "
                f"{len(buffer)}-byte buffer or inside the table"
            )
        entries.append(CertTableEntry(guid, bytes(buffer[offset : offset + length])))
        position += ENTRY_SIZE
    return tuple(entries)


def build_cert_table(entries: list[tuple[uuid.UUID, bytes]], *, pad_to: int = 0) -> bytes:
    """Serialise a certificate table (used by the emulators and tests)."""
    header_size = ENTRY_SIZE * (len(entries) + 1)
    header = bytearray()
    body = bytearray()
    for guid, data in entries:
        header += _ENTRY.pack(guid.bytes, header_size + len(body), len(data))
        body += data
    header += bytes(ENTRY_SIZE)
    out = bytes(header + body)
    return out + bytes(max(0, pad_to - len(out)))


def chain_from_table(entries: tuple[CertTableEntry, ...]) -> tuple[bytes, ...]:
    """The DER certificates of a table, signer first; the CRL and unknown GUIDs are dropped."""
    by_guid = {e.guid: e.data for e in entries if e.data}
    return tuple(by_guid[g] for g in _CHAIN_ORDER if g in by_guid)
