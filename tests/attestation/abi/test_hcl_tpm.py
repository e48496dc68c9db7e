"""The HCL report and vTPM quote ABI: real reports parse and round-trip, every field is named,
and anything Azure's paravisor or vTPM does not produce is refused with its field and offset."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.hcl import (
    HCL_REPORT_SIZE,
    IGVM_REQUEST_OFFSET,
    SNP_REPORT_OFFSET,
    VARIABLE_DATA_OFFSET,
    parse_hcl_report,
    parse_variable_data,
    serialize_hcl_report,
)
from attestation.abi.report import parse_report
from attestation.abi.tpm import (
    ClockInfo,
    Quote,
    QuoteSignature,
    parse_quote,
    parse_signature,
    pcr_digest_of,
    quote_layout,
    serialize_quote,
    serialize_signature,
)
from attestation.errors import MalformedError
from tests.azure_sets import SETS, load


@pytest.mark.parametrize("name", SETS)
def test_real_hcl_report_parses_and_round_trips(name: str) -> None:
    evidence = load(name).evidence
    hcl = parse_hcl_report(evidence.hcl_report)
    assert serialize_hcl_report(hcl) == evidence.hcl_report
    # The embedded report is the one parser's, byte for byte.
    assert hcl.snp_report == parse_report(
        evidence.hcl_report[SNP_REPORT_OFFSET:IGVM_REQUEST_OFFSET]
    )
    assert hcl.snp_report.report_data[:32] == hashlib.sha256(hcl.variable_data_bytes).digest()
    assert hcl.variable_data.ak_public_key.modulus.bit_length() == 2048
    assert hcl.variable_data.ak_public_key.exponent == 65537
    assert hcl.report_size == VARIABLE_DATA_OFFSET + len(hcl.variable_data_bytes)


def test_real_hcl_report_fields() -> None:
    hcl = parse_hcl_report(load("evidence-v1.json").evidence.hcl_report)
    assert (hcl.header_version, hcl.report_size, hcl.request_type, hcl.status) == (1, 2346, 2, 0)
    assert (hcl.igvm_data_size, hcl.igvm_version, hcl.report_type) == (1130, 1, 2)
    assert hcl.report_data_hash_type == 1
    assert hcl.variable_data.user_data == bytes(64)
    genoa = parse_hcl_report(load("evidence-genoa.json").evidence.hcl_report)
    assert (genoa.header_version, genoa.report_size) == (2, 2436)
    v2 = parse_hcl_report(load("evidence-v2.json").evidence.hcl_report)
    assert v2.variable_data.user_data is not None
    assert v2.variable_data.user_data.hex().startswith("982f5c6e45df0ed3")


@pytest.mark.parametrize("name", SETS)
def test_real_quote_parses_and_round_trips(name: str) -> None:
    evidence = load(name).evidence
    quote = parse_quote(evidence.quote)
    assert serialize_quote(quote) == evidence.quote
    assert quote.selected_pcrs == tuple(range(24))
    assert pcr_digest_of(evidence.pcrs) == quote.pcr_digest
    layout = quote_layout(evidence.quote)
    assert layout[0].offset == 0
    assert sum(field.size for field in layout) == len(evidence.quote)
    assert all(a.offset + a.size == b.offset for a, b in itertools.pairwise(layout))


def test_real_quote_fields() -> None:
    quote = parse_quote(load("evidence-v1.json").evidence.quote)
    assert quote.extra_data == b"challenge"
    assert quote.qualified_signer.hex().startswith("000b")
    assert len(quote.qualified_signer) == 34
    assert quote.clock_info == ClockInfo(0x359BAE, 2, 0, safe=True)
    assert quote.firmware_version == 0x2020031200120003
    names = [field.name for field in quote_layout(load("evidence-v1.json").evidence.quote)]
    assert names[:4] == ["magic", "type", "qualifiedSigner.size", "qualifiedSigner"]
    assert names[-2:] == ["pcrDigest.size", "pcrDigest"]


HCL = load("evidence-v1.json").evidence.hcl_report
QUOTE = load("evidence-v1.json").evidence.quote


def _set(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (HCL[:-1], "HCL report is 2599 bytes, not 2600"),
        (_set(HCL, 0, b"HCLB"), "HCL report signature [0x000:0x004] is b'HCLB'"),
        (_set(HCL, 4, (3).to_bytes(4, "little")), "version [0x004:0x008] 3 is not supported"),
        (_set(HCL, 0xC, (1).to_bytes(4, "little")), "request_type [0x00c:0x010] is 1"),
        (_set(HCL, 0x10, (1).to_bytes(4, "little")), "status [0x010:0x014] is 1"),
        (_set(HCL, 0x1F, b"\1"), "reserved [0x014:0x020] not all zero"),
        (_set(HCL, 0x20, (9).to_bytes(4, "little")), "SNP report at 0x20: version [0x000:0x004]"),
        (_set(HCL, 0x4C8, (4).to_bytes(4, "little")), "igvm.report_type [0x4c8:0x4cc] is not 2"),
        (_set(HCL, 0x4CC, (2).to_bytes(4, "little")), "igvm.report_data_hash_type [0x4cc:0x4d0]"),
        (_set(HCL, 0x4C0, (1131).to_bytes(4, "little")), "igvm.data_size [0x4c0:0x4c4] 1131"),
        (_set(HCL, 0x4D0, (9000).to_bytes(4, "little")), "variable_data_size [0x4d0:0x4d4] 9000"),
        (_set(HCL, 8, (2347).to_bytes(4, "little")), "report_size [0x008:0x00c] 2347"),
        (_set(HCL, 2599, b"\1"), "padding [0x92a:0xa28] after the variable data"),
    ],
)
def test_hcl_report_refused_with_field_and_offset(data: bytes, message: str) -> None:
    with pytest.raises(MalformedError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_hcl_report(data)


def _variable_data(**changes: object) -> bytes:
    hcl = parse_hcl_report(HCL)
    document = json.loads(hcl.variable_data_bytes)
    document.update(changes)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[]", "must be a JSON object"),
        (b'{"keys": 1}', "no 'keys' array"),
        (_variable_data(keys=[]), "has 0 'HCLAkPub' keys, not one"),
        (_variable_data(keys=[{"kid": "HCLAkPub", "kty": "EC"}]), "kty 'EC', not 'RSA'"),
        (
            _variable_data(keys=[{"kid": "HCLAkPub", "kty": "RSA", "n": "AQAB", "e": "AQAB"}]),
            "is a 17-bit key, not RSA-2048",
        ),
        (
            _variable_data(keys=[{"kid": "HCLAkPub", "kty": "RSA", "n": "AQ==", "e": "AQAB"}]),
            "n must be unpadded base64url",
        ),
        (_variable_data(**{"user-data": "00" * 63}), "'user-data' must be 128 hex digits"),
        (_variable_data(**{"user-data": "zz" * 64}), "'user-data' is not hex"),
        (b'{"keys": [], "keys": []}', "not valid JSON"),
    ],
)
def test_variable_data_refused(data: bytes, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        parse_variable_data(data)


def test_two_attestation_keys_are_refused() -> None:
    hcl = parse_hcl_report(HCL)
    keys = json.loads(hcl.variable_data_bytes)["keys"]
    with pytest.raises(MalformedError, match="has 2 'HCLAkPub' keys"):
        parse_variable_data(_variable_data(keys=[keys[0], keys[0]]))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_set(QUOTE, 0, b"\xff\x54\x43\x48"), r"magic \[0x0:0x4\] is 0xff544348, not 0xff544347"),
        (_set(QUOTE, 4, b"\x80\x17"), r"type \[0x4:0x6\] is 0x8017, not 0x8018"),
        (_set(QUOTE, 6, b"\x00\x50"), "qualifiedSigner.size at 0x6 is 80, over 66"),
        (QUOTE[:-1], "ends inside pcrDigest at 0x5a: 32 bytes needed, 31 left"),
        (QUOTE + b"\0", "1 bytes after pcrDigest"),
        (_set(QUOTE, 0x4E, b"\x00\x00\x00\x02"), r"pcrSelect.count \[0x4e:0x52\]"),
        (_set(QUOTE, 0x52, b"\x00\x04"), r"pcrSelect.hash \[0x52:0x54\] is 0x0004"),
        (_set(QUOTE, 0x54, b"\x04"), r"pcrSelect.sizeofSelect \[0x54:0x55\]"),
        (_set(QUOTE, 0x45, b"\x02"), "clockInfo.safe is 2"),
        (bytes(300), "TPMS_ATTEST is 300 bytes, over 211"),
    ],
)
def test_quote_refused_with_field_and_offset(data: bytes, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        parse_quote(data)


def test_signature_round_trip_and_refusals() -> None:
    raw = load("evidence-v1.json").evidence.signature
    marshalled = serialize_signature(raw)
    assert marshalled[:6] == bytes.fromhex("0014000b0100")
    assert parse_signature(marshalled) == raw
    with pytest.raises(MalformedError, match="not RSASSA"):
        parse_signature(b"\x00\x16" + marshalled[2:])
    with pytest.raises(MalformedError, match="not SHA-256"):
        parse_signature(marshalled[:2] + b"\x00\x0c" + marshalled[4:])
    with pytest.raises(MalformedError, match="TPMT_SIGNATURE is 261 bytes, not 262"):
        parse_signature(marshalled[:-1])
    with pytest.raises(MalformedError, match="is 255 bytes, not 256"):
        QuoteSignature(bytes(255))


quotes = st.builds(
    Quote,
    qualified_signer=st.binary(max_size=66),
    extra_data=st.binary(max_size=66),
    clock_info=st.builds(
        ClockInfo,
        clock=st.integers(0, 2**64 - 1),
        reset_count=st.integers(0, 2**32 - 1),
        restart_count=st.integers(0, 2**32 - 1),
        safe=st.booleans(),
    ),
    firmware_version=st.integers(0, 2**64 - 1),
    selected_pcrs=st.frozensets(st.integers(0, 23)).map(lambda pcrs: tuple(sorted(pcrs))),
    pcr_digest=st.binary(min_size=32, max_size=32),
)


@given(quotes)
def test_any_quote_round_trips(quote: Quote) -> None:
    data = serialize_quote(quote)
    assert parse_quote(data) == quote
    assert sum(field.size for field in quote_layout(data)) == len(data)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_parse_or_raise_malformed(data: bytes) -> None:
    try:
        quote = parse_quote(data)
    except MalformedError:
        return
    assert serialize_quote(quote) == data


@given(st.integers(0, HCL_REPORT_SIZE - 1), st.integers(0, 255))
def test_changed_hcl_byte_parses_to_the_same_bytes_or_raises(offset: int, value: int) -> None:
    data = _set(HCL, offset, bytes([value]))
    try:
        hcl = parse_hcl_report(data)
    except MalformedError:
        return
    assert serialize_hcl_report(hcl) == data


@given(st.binary(max_size=400))
def test_variable_data_bytes_round_trip(tail: bytes) -> None:
    hcl = parse_hcl_report(HCL)
    document = json.loads(hcl.variable_data_bytes)
    document["extra"] = tail.hex()
    variable = json.dumps(document, separators=(",", ":")).encode()
    size = len(variable)
    changed = dataclasses.replace(
        hcl,
        variable_data_bytes=variable,
        igvm_data_size=20 + size,
        report_size=VARIABLE_DATA_OFFSET + size,
    )
    data = serialize_hcl_report(changed)
    assert parse_hcl_report(data) == dataclasses.replace(
        changed, variable_data=parse_variable_data(variable)
    )
