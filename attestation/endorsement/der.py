"""A small, strict DER reader for the few ASN.1 values the verifier inspects itself.

``cryptography`` parses certificates, but hands AMD's KDS extensions over as raw bytes and
keeps RSASSA-PSS parameters in private attributes. This reader covers exactly what those
need (low-number tags, definite minimal lengths, INTEGER, IA5String, OBJECT IDENTIFIER,
SEQUENCE) and rejects everything else with a :class:`MalformedError` naming ``what``.
"""

from __future__ import annotations

from typing import NamedTuple

from attestation.errors import MalformedError

TAG_INTEGER = 0x02
TAG_BIT_STRING = 0x03
TAG_OCTET_STRING = 0x04
TAG_NULL = 0x05
TAG_OID = 0x06
TAG_IA5_STRING = 0x16
TAG_SEQUENCE = 0x30

_HIGH_TAG_NUMBER = 0x1F
_LONG_LENGTH = 0x80
_MAX_LENGTH_OCTETS = 4


class DerElement(NamedTuple):
    """One TLV: its identifier octet and its content octets."""

    tag: int
    content: bytes


def read_element(data: bytes, offset: int, *, what: str) -> tuple[DerElement, int]:
    """Read the TLV starting at ``offset``; return it and the offset just past it."""
    if offset + 2 > len(data):
        raise MalformedError(f"{what}: truncated DER header at offset {offset}")
    tag = data[offset]
    if tag & _HIGH_TAG_NUMBER == _HIGH_TAG_NUMBER:
        raise MalformedError(f"{what}: high-number DER tag 0x{tag:02x} is not supported")
    first = data[offset + 1]
    position = offset + 2
    if first < _LONG_LENGTH:
        length = first
    else:
        count = first & 0x7F
        if count == 0:
            raise MalformedError(f"{what}: indefinite DER length is not allowed")
        if count > _MAX_LENGTH_OCTETS or position + count > len(data):
            raise MalformedError(f"{what}: bad DER length octets at offset {offset}")
        length = int.from_bytes(data[position : position + count], "big")
        if data[position] == 0 or length < _LONG_LENGTH:
            raise MalformedError(f"{what}: non-minimal DER length at offset {offset}")
        position += count
    end = position + length
    if end > len(data):
        raise MalformedError(
            f"{what}: DER value at offset {offset} claims {length} bytes, "
            f"only {len(data) - position} remain"
        )
    return DerElement(tag, data[position:end]), end


def read_single(data: bytes, *, what: str, tag: int | None = None) -> DerElement:
    """Read exactly one TLV that spans all of ``data`` (optionally of the given tag)."""
    element, end = read_element(data, 0, what=what)
    if end != len(data):
        raise MalformedError(f"{what}: {len(data) - end} trailing bytes after the DER value")
    if tag is not None and element.tag != tag:
        raise MalformedError(f"{what}: expected DER tag 0x{tag:02x}, found 0x{element.tag:02x}")
    return element


def read_all(content: bytes, *, what: str) -> list[DerElement]:
    """Split the content of a constructed value into its TLVs."""
    elements: list[DerElement] = []
    offset = 0
    while offset < len(content):
        element, offset = read_element(content, offset, what=what)
        elements.append(element)
    return elements


def decode_non_negative_integer(content: bytes, *, what: str) -> int:
    """A DER INTEGER's content as a non-negative int (values >= 0x80 carry a leading 0)."""
    if not content:
        raise MalformedError(f"{what}: empty INTEGER")
    if len(content) > 1 and (
        (content[0] == 0 and content[1] < 0x80) or (content[0] == 0xFF and content[1] >= 0x80)
    ):
        raise MalformedError(f"{what}: non-minimal INTEGER encoding {content.hex()}")
    if content[0] >= 0x80:
        raise MalformedError(f"{what}: negative INTEGER {content.hex()}")
    return int.from_bytes(content, "big")


def encode_non_negative_integer(value: int) -> bytes:
    """DER INTEGER TLV for ``value`` >= 0 (short lengths only: values below 2**1000)."""
    if value < 0:
        raise ValueError("value must be non-negative")
    body = value.to_bytes(value.bit_length() // 8 + 1, "big")
    return bytes([TAG_INTEGER, len(body)]) + body


def decode_ia5_string(content: bytes, *, what: str) -> str:
    """IA5String content (7-bit ASCII) as str."""
    if any(byte >= 0x80 for byte in content):
        raise MalformedError(f"{what}: IA5String contains non-ASCII bytes")
    return content.decode("ascii")


def encode_ia5_string(text: str) -> bytes:
    """DER IA5String TLV (short form only: at most 127 characters)."""
    body = text.encode("ascii")
    if len(body) >= _LONG_LENGTH:
        raise ValueError("IA5String too long for this encoder")
    return bytes([TAG_IA5_STRING, len(body)]) + body


def decode_oid(content: bytes, *, what: str) -> str:
    """OBJECT IDENTIFIER content as a dotted string."""
    if not content or content[-1] & 0x80:
        raise MalformedError(f"{what}: truncated OBJECT IDENTIFIER")
    arcs: list[int] = []
    value = 0
    for index, byte in enumerate(content):
        if value == 0 and byte == 0x80 and (index == 0 or not content[index - 1] & 0x80):
            raise MalformedError(f"{what}: non-minimal OBJECT IDENTIFIER arc")
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(arc) for arc in head + arcs[1:])
