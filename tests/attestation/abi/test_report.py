"""The report ABI: layout table, parse/serialize round trip, MBZ and format errors."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import (
    FIELDS,
    LAYOUT,
    REPORT_SIZE,
    SIGNED_REGION_END,
    AttestationReport,
    GuestPolicy,
    PlatformInfo,
    parse_report,
    product_line_from_cpuid,
    serialize_report,
    unsigned_template,
)
from attestation.errors import MalformedError

REAL = Path(__file__).parents[2] / "assets" / "real"
REPORT_FILES = sorted(p.name for p in REAL.glob("*-report.bin"))
RESERVED = [spec for spec in LAYOUT if spec.reserved]


def real(name: str) -> bytes:
    return (REAL / name).read_bytes()


def with_bytes(data: bytes, offset: int, chunk: bytes) -> bytes:
    return data[:offset] + chunk + data[offset + len(chunk) :]


def test_layout_covers_the_report_exactly_without_gaps_or_overlaps() -> None:
    position = 0
    for spec in LAYOUT:
        assert spec.offset == position, spec
        assert spec.size > 0
        position = spec.end
    assert position == REPORT_SIZE == 0x4A0
    assert FIELDS["signature_r"].offset == SIGNED_REGION_END == 0x2A0
    assert len(FIELDS) == len(LAYOUT)


def test_every_layout_field_is_a_model_field_or_reserved() -> None:
    model_fields = {f.name for f in dataclasses.fields(AttestationReport)}
    for spec in LAYOUT:
        if spec.reserved:
            continue
        if spec.name == "flags":
            assert {"author_key_en", "mask_chip_key", "signing_key"} <= model_fields
        else:
            assert spec.name in model_fields


def test_there_are_eight_real_reports() -> None:
    assert len(REPORT_FILES) == 8


@pytest.mark.parametrize("name", REPORT_FILES)
def test_real_reports_round_trip_exactly(name: str) -> None:
    data = real(name)
    report = parse_report(data)
    assert serialize_report(report) == data
    assert report.signed_bytes() == data[:SIGNED_REGION_END]


@pytest.mark.parametrize(
    ("name", "version", "product", "signer", "vmpl", "policy", "platform"),
    [
        ("gsg-milan-v2-debug-report.bin", 2, None, SignerKind.VCEK, 0, 0xB0000, 0x1),
        ("virtee-milan-v2-report.bin", 2, None, SignerKind.VCEK, 0, 0x30000, 0x1),
        ("azure-milan-v3-report.bin", 3, ProductLine.MILAN, SignerKind.VCEK, 0, 0x3001F, 0x25),
        (
            "aws-milan-v3-vlek-vmpl1-report.bin",
            3,
            ProductLine.MILAN,
            SignerKind.VLEK,
            1,
            0x30000,
            0x27,
        ),
        ("oak-genoa-v5-report.bin", 5, ProductLine.GENOA, SignerKind.VCEK, 0, 0x30000, 0x25),
        ("oak-turin-v5-report.bin", 5, ProductLine.TURIN, SignerKind.VCEK, 0, 0x30000, 0x67),
    ],
    ids=["gsg-v2", "virtee-v2", "azure-v3", "aws-vlek-v3", "oak-genoa-v5", "oak-turin-v5"],
)
def test_real_reports_decode_to_known_values(  # noqa: PLR0917 - one argument per table column
    name: str,
    version: int,
    product: ProductLine | None,
    signer: SignerKind,
    vmpl: int,
    policy: int,
    platform: int,
) -> None:
    report = parse_report(real(name))
    assert report.version == version
    assert report.product_line is product
    assert report.signer_kind is signer
    assert report.vmpl == vmpl
    assert report.policy.raw == policy
    assert report.platform_info.raw == platform
    assert report.report_id_ma == b"\xff" * 32
    if version == 2:
        assert (report.cpuid_fam_id, report.cpuid_mod_id, report.cpuid_step) == (None, None, None)
    if version < 5:
        assert report.launch_mit_vector is None
        assert report.current_mit_vector is None


def test_decoded_flags_policy_and_platform_info() -> None:
    gsg = parse_report(real("gsg-milan-v2-debug-report.bin"))
    assert gsg.policy.debug is True
    assert gsg.policy.smt is True
    assert gsg.policy.migrate_ma is False
    azure = parse_report(real("azure-milan-v3-report.bin"))
    assert (azure.policy.abi_major, azure.policy.abi_minor) == (0, 0x1F)
    turin = parse_report(real("oak-turin-v5-report.bin"))
    assert turin.platform_info.smt_en is True
    assert turin.platform_info.alias_check_complete is True
    assert turin.platform_info.unknown_bits == 1 << 6
    assert turin.platform_info.unknown_bit_numbers() == [6]
    assert (turin.cpuid_fam_id, turin.cpuid_mod_id, turin.cpuid_step) == (0x1A, 0x02, 0x01)
    aws = parse_report(real("aws-milan-v3-vlek-vmpl1-report.bin"))
    assert aws.chip_id_masked is True
    assert aws.flags == 0x4


def test_resigned_pair_has_the_same_body_and_different_signatures() -> None:
    first = parse_report(real("azure-milan-v3-report.bin"))
    second = parse_report(real("azure-milan-v3-resigned-report.bin"))
    assert first.body_digest() == second.body_digest()
    assert first.body_digest() == hashlib.sha384(first.signed_bytes()).hexdigest()
    assert first.signature_r != second.signature_r


@pytest.mark.parametrize("size", [0, 1, REPORT_SIZE - 1, REPORT_SIZE + 1, 4096])
def test_wrong_size_is_malformed(size: int) -> None:
    with pytest.raises(MalformedError, match=f"exactly 1184 bytes .*got {size}"):
        parse_report(bytes(size))


@pytest.mark.parametrize("version", [0, 1, 6, 0xFFFFFFFF])
def test_unsupported_version_is_malformed(version: int) -> None:
    data = with_bytes(real("azure-milan-v3-report.bin"), 0, version.to_bytes(4, "little"))
    with pytest.raises(MalformedError, match=r"version \[0x000:0x004\] unsupported"):
        parse_report(data)


def test_signature_algo_other_than_1_is_malformed() -> None:
    data = with_bytes(real("azure-milan-v3-report.bin"), 0x34, (2).to_bytes(4, "little"))
    with pytest.raises(MalformedError, match=r"signature_algo \[0x034:0x038\] .*: 02000000"):
        parse_report(data)


@pytest.mark.parametrize("key", [2, 3, 4, 5, 6])
def test_reserved_signing_key_is_malformed(key: int) -> None:
    data = with_bytes(real("azure-milan-v3-report.bin"), 0x48, (key << 2).to_bytes(4, "little"))
    with pytest.raises(MalformedError, match=r"flags \[0x048:0x04c\] SIGNING_KEY reserved"):
        parse_report(data)


@pytest.mark.parametrize("bit", range(5, 32))
def test_flags_mbz_bits_are_malformed(bit: int) -> None:
    data = with_bytes(real("azure-milan-v3-report.bin"), 0x48, (1 << bit).to_bytes(4, "little"))
    with pytest.raises(MalformedError, match=r"flags \[0x048:0x04c\] bits 31:5"):
        parse_report(data)


def test_policy_bit_17_clear_is_malformed() -> None:
    data = with_bytes(real("azure-milan-v3-report.bin"), 0x8, (0x1001F).to_bytes(8, "little"))
    with pytest.raises(MalformedError, match=r"policy \[0x008:0x010\] reserved bit 17"):
        parse_report(data)


@pytest.mark.parametrize("bit", range(26, 64))
def test_policy_high_bits_are_malformed(bit: int) -> None:
    raw = 0x30000 | 1 << bit
    data = with_bytes(real("azure-milan-v3-report.bin"), 0x8, raw.to_bytes(8, "little"))
    with pytest.raises(MalformedError, match=r"policy \[0x008:0x010\] reserved bits 63:26"):
        parse_report(data)


@pytest.mark.parametrize("spec", RESERVED, ids=[s.name for s in RESERVED])
def test_each_reserved_range_must_be_zero(spec: object) -> None:
    assert isinstance(spec, type(LAYOUT[0]))
    data = with_bytes(real("oak-genoa-v5-report.bin"), spec.end - 1, b"\xcc")
    expected = f"{spec.name} \\[{spec.offset:#05x}:{spec.end:#05x}\\] not all zero: .*cc$"
    with pytest.raises(MalformedError, match=expected):
        parse_report(data)


@given(
    spec=st.sampled_from(RESERVED),
    data=st.data(),
    name=st.sampled_from(REPORT_FILES),
)
def test_any_nonzero_reserved_byte_is_malformed(
    spec: object, data: st.DataObject, name: str
) -> None:
    assert isinstance(spec, type(LAYOUT[0]))
    index = data.draw(st.integers(spec.offset, spec.end - 1))
    value = data.draw(st.integers(1, 255))
    blob = with_bytes(real(name), index, bytes([value]))
    with pytest.raises(MalformedError, match=spec.name):
        parse_report(blob)


@pytest.mark.parametrize("offset", [0x188, 0x189, 0x18A])
def test_cpuid_bytes_are_reserved_in_version_2(offset: int) -> None:
    data = with_bytes(real("virtee-milan-v2-report.bin"), offset, b"\x19")
    with pytest.raises(MalformedError, match="reserved in version 2"):
        parse_report(data)


@pytest.mark.parametrize("offset", [0x1F8, 0x207])
def test_mitigation_vectors_are_reserved_before_version_5(offset: int) -> None:
    data = with_bytes(real("azure-milan-v3-report.bin"), offset, b"\x01")
    with pytest.raises(MalformedError, match="reserved in version 3"):
        parse_report(data)


@pytest.mark.parametrize(
    ("family", "model", "product"),
    [
        (0x19, 0x00, ProductLine.MILAN),
        (0x19, 0x01, ProductLine.MILAN),
        (0x19, 0x0F, ProductLine.MILAN),
        (0x19, 0x10, ProductLine.GENOA),
        (0x19, 0x11, ProductLine.GENOA),
        (0x19, 0x1F, ProductLine.GENOA),
        (0x19, 0xA0, ProductLine.GENOA),
        (0x19, 0xAF, ProductLine.GENOA),
        (0x1A, 0x00, ProductLine.TURIN),
        (0x1A, 0x02, ProductLine.TURIN),
        (0x1A, 0x11, ProductLine.TURIN),
    ],
)
def test_product_line_from_cpuid(family: int, model: int, product: ProductLine) -> None:
    assert product_line_from_cpuid(family, model) is product


@pytest.mark.parametrize(
    ("family", "model"), [(0x19, 0x20), (0x19, 0xB0), (0x1A, 0x12), (0x17, 0x01), (0, 0)]
)
def test_unknown_cpuid_is_malformed(family: int, model: int) -> None:
    with pytest.raises(MalformedError, match="no known SEV-SNP product"):
        product_line_from_cpuid(family, model)
    data = with_bytes(real("azure-milan-v3-report.bin"), 0x188, bytes([family, model]))
    with pytest.raises(MalformedError, match="no known SEV-SNP product"):
        parse_report(data)


@given(st.binary(min_size=REPORT_SIZE, max_size=REPORT_SIZE))
def test_any_blob_either_is_malformed_or_round_trips(blob: bytes) -> None:
    try:
        report = parse_report(blob)
    except MalformedError:
        return
    assert serialize_report(report) == blob
    assert dataclasses.replace(report) == report


@given(
    name=st.sampled_from(REPORT_FILES),
    chunk=st.binary(min_size=1, max_size=64),
    offset=st.integers(0, REPORT_SIZE - 1),
)
def test_mutated_real_reports_are_malformed_or_round_trip(
    name: str, chunk: bytes, offset: int
) -> None:
    blob = with_bytes(real(name), offset, chunk)[:REPORT_SIZE]
    try:
        report = parse_report(blob)
    except MalformedError:
        return
    assert serialize_report(report) == blob
    # parse_report sets the slots without __post_init__: the constructor's checks agree.
    assert dataclasses.replace(report) == report


def test_a_parsed_report_is_frozen() -> None:
    report = parse_report(real("azure-milan-v3-report.bin"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.vmpl = 3  # type: ignore[misc]


def bytes_of(size: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=size, max_size=size)


u8 = st.integers(0, 0xFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, (1 << 64) - 1)


@st.composite
def reports(draw: st.DrawFn) -> AttestationReport:
    version = draw(st.integers(2, 5))
    product = draw(st.sampled_from(list(ProductLine)))
    base = unsigned_template(product if version >= 3 else None, version=version)
    updates: dict[str, object] = {
        "guest_svn": draw(u32),
        "policy": GuestPolicy.from_raw(draw(st.integers(0, (1 << 26) - 1)) | 1 << 17),
        "family_id": draw(bytes_of(16)),
        "image_id": draw(bytes_of(16)),
        "vmpl": draw(u32),
        "current_tcb": draw(u64),
        "platform_info": PlatformInfo.from_raw(draw(u64)),
        "author_key_en": draw(st.booleans()),
        "mask_chip_key": draw(st.booleans()),
        "signing_key": draw(st.sampled_from([0, 1, 7])),
        "report_data": draw(bytes_of(64)),
        "measurement": draw(bytes_of(48)),
        "host_data": draw(bytes_of(32)),
        "id_key_digest": draw(bytes_of(48)),
        "author_key_digest": draw(bytes_of(48)),
        "report_id": draw(bytes_of(32)),
        "report_id_ma": draw(bytes_of(32)),
        "reported_tcb": draw(u64),
        "chip_id": draw(bytes_of(64)),
        "committed_tcb": draw(u64),
        "launch_tcb": draw(u64),
        "signature_r": draw(bytes_of(72)),
        "signature_s": draw(bytes_of(72)),
    }
    for name in ("current", "committed"):
        for part in ("build", "minor", "major"):
            updates[f"{name}_{part}"] = draw(u8)
    if version >= 3:
        updates["cpuid_step"] = draw(u8)
    if version >= 5:
        updates["launch_mit_vector"] = draw(u64)
        updates["current_mit_vector"] = draw(u64)
    return dataclasses.replace(base, **updates)  # type: ignore[arg-type]


@given(reports())
def test_generated_reports_round_trip(report: AttestationReport) -> None:
    data = serialize_report(report)
    assert len(data) == REPORT_SIZE
    assert parse_report(data) == report
    assert serialize_report(parse_report(data)) == data


def test_unsigned_template_defaults() -> None:
    report = unsigned_template(ProductLine.TURIN)
    assert report.version == 5
    assert report.policy.raw == 0x30000
    assert report.product_line is ProductLine.TURIN
    assert report.signer_kind is SignerKind.VCEK
    assert report.is_unsigned
    assert parse_report(serialize_report(report)) == report
    v2 = unsigned_template(None, version=2)
    assert v2.product_line is None
    with pytest.raises(ValueError, match="need a product line"):
        unsigned_template(None, version=3)


def test_with_signature_stores_little_endian_72_byte_values() -> None:
    report = unsigned_template(ProductLine.MILAN).with_signature(0x0102, 0x0A0B0C)
    assert report.signature_r == b"\x02\x01" + bytes(70)
    assert report.signature_s == b"\x0c\x0b\x0a" + bytes(69)
    assert report.signature_rs == (0x0102, 0x0A0B0C)
    data = serialize_report(report)
    assert data[0x2A0:0x2A2] == b"\x02\x01"
    assert data[0x2E8:0x2EB] == b"\x0c\x0b\x0a"
    with pytest.raises(ValueError, match="72 bytes"):
        report.with_signature(1 << 576, 1)


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"version": 6}, "unsupported version 6"),
        ({"signature_algo": 2}, "unknown signature algorithm"),
        ({"signing_key": 3}, "SIGNING_KEY 3 is reserved"),
        ({"measurement": bytes(47)}, r"measurement \[0x090:0x0c0\] must be 48 bytes"),
        ({"vmpl": 1 << 32}, "vmpl .* out of range"),
        ({"cpuid_fam_id": None}, "carry CPUID bytes"),
        ({"cpuid_fam_id": 0x17}, "no known SEV-SNP product"),
        ({"launch_mit_vector": None}, "must be a u64 in v5"),
        ({"policy": 0x30000}, "policy must be a GuestPolicy"),
        ({"platform_info": 0x1}, "platform_info must be a PlatformInfo"),
    ],
)
def test_the_model_validates_on_construction(update: dict[str, object], message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        dataclasses.replace(unsigned_template(ProductLine.GENOA), **update)  # type: ignore[arg-type]


def test_tcb_needs_a_product_line_for_version_2_and_rejects_a_contradiction() -> None:
    v2 = parse_report(real("virtee-milan-v2-report.bin"))
    with pytest.raises(MalformedError, match="needs the product line"):
        v2.tcb("reported")
    assert v2.tcb("reported", ProductLine.MILAN).encode() == v2.reported_tcb
    turin = parse_report(real("oak-turin-v5-report.bin"))
    with pytest.raises(MalformedError, match="CPUID says Turin, not Milan"):
        turin.tcb("reported", ProductLine.MILAN)


def test_to_json_dict_decodes_fields() -> None:
    report = parse_report(real("oak-turin-v5-report.bin"))
    decoded = report.to_json_dict()
    assert decoded["version"] == 5
    assert decoded["productLine"] == "Turin"
    assert decoded["reportedTcb"] == {
        "raw": "0x4700000002000100",
        "fmc": 0,
        "bl": 1,
        "tee": 0,
        "snp": 2,
        "spl5": 0,
        "spl6": 0,
        "spl7": 0,
        "ucode": 0x47,
    }
    assert decoded["signingKey"] == "vcek"
    platform = decoded["platformInfo"]
    assert isinstance(platform, dict)
    assert platform["unknownBits"] == [6]


def test_policy_and_platform_info_must_be_u64() -> None:
    with pytest.raises(MalformedError, match="must be a u64"):
        GuestPolicy.from_raw(1 << 64 | 0x30000)
    with pytest.raises(MalformedError, match="must be a u64"):
        PlatformInfo.from_raw(-1)
    assert GuestPolicy.from_raw(0x3001F).raw == 0x3001F
    assert PlatformInfo.from_raw(0x67).raw == 0x67
