"""The GHCB certificate table parser."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.evidence.certtable import (
    ENTRY_SIZE,
    GUID_ARK,
    GUID_ASK,
    GUID_CRL,
    GUID_VCEK,
    GUID_VLEK,
    CertTableError,
    build_cert_table,
    chain_from_table,
    parse_cert_table,
)


def test_guid_constants_and_rfc4122_byte_order() -> None:
    assert str(GUID_VCEK) == "63da758d-e664-4564-adc5-f4b93be8accd"
    assert str(GUID_VLEK) == "a8074bc2-a25a-483e-aae6-39c045a0b8a1"
    assert str(GUID_ASK) == "4ab7b379-bbac-4fe4-a02f-05aef327c782"
    assert str(GUID_ARK) == "c0b406a4-a803-4952-9743-3fb6014cd0ae"
    assert str(GUID_CRL) == "92f81bc3-5811-4d3d-97ff-d19f88dc67ea"
    table = build_cert_table([(GUID_VCEK, b"v")])
    # the table stores the GUID as written (RFC 4122), not Microsoft's mixed-endian form
    assert table[:16] == bytes.fromhex("63da758de6644564adc5f4b93be8accd")
    assert struct.unpack_from("<II", table, 16) == (2 * ENTRY_SIZE, 1)
    assert table[2 * ENTRY_SIZE :] == b"v"


def test_parse_known_table() -> None:
    table = build_cert_table(
        [(GUID_ARK, b"ark"), (GUID_CRL, b"crl"), (GUID_VCEK, b"vcek"), (GUID_ASK, b"ask")],
        pad_to=4096,
    )
    entries = parse_cert_table(table)
    assert [e.name for e in entries] == ["ARK", "CRL", "VCEK", "ASK"]
    assert chain_from_table(entries) == (b"vcek", b"ask", b"ark")


def test_unknown_guid_is_kept_but_not_in_chain() -> None:
    other = uuid.UUID("00000000-0000-0000-0000-000000000001")
    entries = parse_cert_table(build_cert_table([(other, b"x"), (GUID_VLEK, b"vlek")]))
    assert entries[0].name == str(other)
    assert chain_from_table(entries) == (b"vlek",)


def test_empty_buffer_means_no_certificates() -> None:
    assert parse_cert_table(b"") == ()
    assert parse_cert_table(bytes(4096)) == ()


def test_missing_terminator() -> None:
    table = GUID_VCEK.bytes + struct.pack("<II", ENTRY_SIZE, 0) + b"\x01" * 6
    with pytest.raises(CertTableError, match="no all-zero terminator"):
        parse_cert_table(table)


def test_entry_pointing_outside_buffer() -> None:
    table = bytearray(build_cert_table([(GUID_VCEK, b"abc")]))
    struct.pack_into("<I", table, 20, 4)  # length 4, only 3 bytes there
    with pytest.raises(CertTableError, match=r"entry 0 \(VCEK\) points at bytes 48\.\.52"):
        parse_cert_table(bytes(table))


def test_entry_pointing_into_table() -> None:
    table = bytearray(build_cert_table([(GUID_VCEK, b"abc")]))
    struct.pack_into("<I", table, 16, 0)
    with pytest.raises(CertTableError, match="inside the table"):
        parse_cert_table(bytes(table))


def test_duplicate_guid() -> None:
    with pytest.raises(CertTableError, match="appears twice"):
        parse_cert_table(build_cert_table([(GUID_VCEK, b"a"), (GUID_VCEK, b"b")]))


@given(st.lists(st.binary(min_size=1, max_size=64), max_size=4))
def test_build_parse_round_trip(blobs: list[bytes]) -> None:
    guids = [GUID_VCEK, GUID_ASK, GUID_ARK, GUID_CRL][: len(blobs)]
    entries = parse_cert_table(build_cert_table(list(zip(guids, blobs, strict=True))))
    assert [(e.guid, e.data) for e in entries] == list(zip(guids, blobs, strict=True))


@given(st.binary(max_size=200))
def test_arbitrary_bytes_parse_or_fail_cleanly(data: bytes) -> None:
    try:
        entries = parse_cert_table(data)
    except CertTableError:
        return
    for entry in entries:
        assert len(entry.data) <= len(data)
