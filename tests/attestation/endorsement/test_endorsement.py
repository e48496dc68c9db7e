"""VCEK/VLEK loading and AMD KDS extension parsing, on every real certificate."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import parse_report
from attestation.endorsement import der
from attestation.endorsement.certificate import (
    OID_HWID,
    SPL_OIDS,
    endorsement_from_certificate,
    load_certificates,
    load_endorsement,
)
from attestation.errors import MalformedError
from attestation.simulated_amd import SimulatedAmd

REAL = Path(__file__).parents[2] / "assets" / "real"
MILAN_ZERO = {"spl4": 0, "spl5": 0, "spl6": 0, "spl7": 0}
TURIN_ZERO = {"spl5": 0, "spl6": 0, "spl7": 0}

# Expected values read off the raw extension bytes (``02 01 xx`` / ``02 02 00 xx``).
EXPECTED = {
    "gsg-milan-v2-debug-vcek.der": (
        SignerKind.VCEK,
        0,
        "Milan-B0",
        {"bl": 2, "tee": 0, "snp": 5, "ucode": 68} | MILAN_ZERO,
        64,
        "3ac3fe21e13fb0990eb28a802e3fb6a2",
        None,
    ),
    "virtee-milan-v2-vcek.der": (
        SignerKind.VCEK,
        0,
        "Milan-B0",
        {"bl": 3, "tee": 0, "snp": 8, "ucode": 115} | MILAN_ZERO,
        64,
        "d49554ec717f4e5b0fe6b143bcf0405b",
        None,
    ),
    "trustee-milan-v2-idblock-provisional-vcek.der": (
        SignerKind.VCEK,
        0,
        "Milan-B0",
        {"bl": 3, "tee": 0, "snp": 8, "ucode": 115} | MILAN_ZERO,
        64,
        "c38427a30d4c7af9d96f7a15b9726982",
        None,
    ),
    "azure-milan-v3-vcek.der": (
        SignerKind.VCEK,
        0,
        "Milan-B0",
        {"bl": 4, "tee": 0, "snp": 24, "ucode": 219} | MILAN_ZERO,
        64,
        "66a5a7b4403a3006ca734aa36a76dd30",
        None,
    ),
    "aws-milan-v3-vlek-vmpl1-vlek.der": (
        SignerKind.VLEK,
        0,
        "Milan",
        {"bl": 4, "tee": 0, "snp": 24, "ucode": 217} | MILAN_ZERO,
        None,
        None,
        "CN=cc-us-east-2.amazonaws.com",
    ),
    "oak-genoa-v5-vcek.der": (
        SignerKind.VCEK,
        0,
        "Genoa",
        {"bl": 10, "tee": 0, "snp": 25, "ucode": 84} | MILAN_ZERO,
        64,
        "d2421d976f95ce0ba849b7cc5c789122",
        None,
    ),
    "oak-turin-v5-vcek.der": (
        SignerKind.VCEK,
        1,
        "Turin",
        {"fmc": 0, "bl": 1, "tee": 0, "snp": 2, "ucode": 71} | TURIN_ZERO,
        8,
        "3b42092f69c656d3",
        None,
    ),
    "virtee-turin-vcek-noreport.der": (
        SignerKind.VCEK,
        1,
        "Turin",
        {"fmc": 0, "bl": 0, "tee": 0, "snp": 0, "ucode": 9} | TURIN_ZERO,
        8,
        "1e550a8ee5cf9f4d",
        None,
    ),
    "NEG-trustee-fake-vcek-raw-hwid.der": (
        SignerKind.VCEK,
        0,
        "Milan-B0",
        {"bl": 3, "tee": 0, "snp": 10, "ucode": 169} | MILAN_ZERO,
        64,
        bytes(range(16)).hex(),
        None,
    ),
    "NEG-trustee-fake-vcek-der-hwid.der": (
        SignerKind.VCEK,
        0,
        "Milan-B0",
        {"bl": 0, "tee": 0, "snp": 0, "ucode": 30} | MILAN_ZERO,
        64,
        bytes(range(16)).hex(),
        None,
    ),
}

#: Certificate -> the real report it signed (its REPORTED_TCB / CHIP_ID must match).
PAIRS = {
    "gsg-milan-v2-debug-vcek.der": "gsg-milan-v2-debug-report.bin",
    "virtee-milan-v2-vcek.der": "virtee-milan-v2-report.bin",
    "trustee-milan-v2-idblock-provisional-vcek.der": "trustee-milan-v2-idblock-provisional-report.bin",
    "azure-milan-v3-vcek.der": "azure-milan-v3-report.bin",
    "aws-milan-v3-vlek-vmpl1-vlek.der": "aws-milan-v3-vlek-vmpl1-report.bin",
    "oak-genoa-v5-vcek.der": "oak-genoa-v5-report.bin",
    "oak-turin-v5-vcek.der": "oak-turin-v5-report.bin",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_real_certificate_parses_to_its_exact_extension_values(name: str) -> None:
    signer, struct_version, product_name, spls, hwid_len, hwid_prefix, csp_id = EXPECTED[name]
    endorsement = load_endorsement((REAL / name).read_bytes())
    assert endorsement.signer_kind is signer
    assert endorsement.struct_version == struct_version
    assert endorsement.product_name == product_name
    assert endorsement.product_line is ProductLine(product_name.split("-")[0])
    assert dict(endorsement.spls) == spls
    assert endorsement.csp_id == csp_id
    if hwid_len is None:
        assert endorsement.hwid is None
    else:
        assert endorsement.hwid is not None
        assert len(endorsement.hwid) == hwid_len
        assert hwid_prefix is not None
        assert endorsement.hwid.hex().startswith(hwid_prefix)
    assert isinstance(endorsement.public_key.curve, ec.SECP384R1)
    assert endorsement.der == (REAL / name).read_bytes()


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_certificate_spls_and_hwid_agree_with_the_real_report(name: str) -> None:
    endorsement = load_endorsement((REAL / name).read_bytes())
    report = parse_report((REAL / PAIRS[name]).read_bytes())
    assert endorsement.product_line is not None
    assert dict(endorsement.spls) == report.tcb("reported", endorsement.product_line).components()
    if endorsement.hwid is not None:
        assert report.chip_id == endorsement.hwid.ljust(64, b"\0")


def test_both_hwid_encodings_decode_to_the_same_64_bytes() -> None:
    raw = load_endorsement((REAL / "NEG-trustee-fake-vcek-raw-hwid.der").read_bytes())
    wrapped = load_endorsement((REAL / "NEG-trustee-fake-vcek-der-hwid.der").read_bytes())
    raw_ext = raw.certificate.extensions.get_extension_for_oid(x509.ObjectIdentifier(OID_HWID))
    wrapped_ext = wrapped.certificate.extensions.get_extension_for_oid(
        x509.ObjectIdentifier(OID_HWID)
    )
    assert isinstance(raw_ext.value, x509.UnrecognizedExtension)
    assert isinstance(wrapped_ext.value, x509.UnrecognizedExtension)
    assert len(raw_ext.value.value) == 64  # stored raw
    assert wrapped_ext.value.value[:2] == b"\x04\x40"  # stored as OCTET STRING
    assert raw.hwid == wrapped.hwid == bytes(range(64))


def test_ucode_spl_219_is_a_der_integer_with_a_leading_zero() -> None:
    endorsement = load_endorsement((REAL / "azure-milan-v3-vcek.der").read_bytes())
    ext = endorsement.certificate.extensions.get_extension_for_oid(
        x509.ObjectIdentifier(SPL_OIDS["ucode"])
    )
    assert isinstance(ext.value, x509.UnrecognizedExtension)
    assert ext.value.value == bytes.fromhex("020200db")
    assert endorsement.spls["ucode"] == 219


def test_turin_vcek_has_fmc_and_no_spl4_and_an_8_byte_hwid() -> None:
    endorsement = load_endorsement((REAL / "virtee-turin-vcek-noreport.der").read_bytes())
    assert endorsement.struct_version == 1
    assert "fmc" in endorsement.spls
    assert "spl4" not in endorsement.spls
    assert endorsement.hwid == bytes.fromhex("1e550a8ee5cf9f4d")


def test_pem_and_bundles_load_the_leaf_first(simulated_amd: SimulatedAmd) -> None:
    der_bytes = (REAL / "oak-genoa-v5-vcek.der").read_bytes()
    pem = x509.load_der_x509_certificate(der_bytes).public_bytes(serialization.Encoding.PEM)
    assert load_endorsement(pem).der == der_bytes
    ark = (Path(__file__).parents[3] / "attestation/endorsement/roots/genoa/ark.pem").read_bytes()
    bundle = pem + ark
    assert load_endorsement(bundle).der == der_bytes
    certificates = load_certificates(bundle)
    assert len(certificates) == 2
    assert certificates[1].subject.rfc4514_string().startswith("CN=ARK-Genoa")
    chain = simulated_amd.cert_chain_pem(ProductLine.TURIN).encode()
    assert [load_endorsement(chain).signer_kind, len(load_certificates(chain))] == [
        SignerKind.VCEK,
        3,
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"\x30\x03\x02\x01\x00", "neither PEM nor valid DER"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "PEM cannot be parsed"),
    ],
)
def test_garbage_is_malformed(data: bytes, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        load_endorsement(data)


def test_a_root_certificate_is_not_an_endorsement() -> None:
    ark = (Path(__file__).parents[3] / "attestation/endorsement/roots/milan/ark.pem").read_bytes()
    with pytest.raises(
        MalformedError, match=r"CN 'ARK-Milan' is neither 'SEV-VCEK' nor 'SEV-VLEK'"
    ):
        load_endorsement(ark)


def _resigned_with_extension(
    simulated_amd: SimulatedAmd, oid: str, value: bytes
) -> x509.Certificate:
    """A simulated VCEK whose extension ``oid`` is replaced by ``value`` (or added)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    leaf = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    builder = (
        x509.CertificateBuilder()
        .subject_name(leaf.subject)
        .issuer_name(leaf.issuer)
        .public_key(leaf.public_key())
        .serial_number(1)
        .not_valid_before(leaf.not_valid_before_utc)
        .not_valid_after(leaf.not_valid_after_utc)
    )
    for extension in leaf.extensions:
        if extension.oid.dotted_string != oid:
            builder = builder.add_extension(extension.value, critical=extension.critical)
    builder = builder.add_extension(
        x509.UnrecognizedExtension(x509.ObjectIdentifier(oid), value), critical=False
    )
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
    return builder.sign(simulated_amd.ask_key, hashes.SHA384(), rsa_padding=pss)


@pytest.mark.parametrize(
    ("oid", "value", "message"),
    [
        (SPL_OIDS["snp"], b"\x02\x02\x00\x05", "non-minimal INTEGER"),
        (SPL_OIDS["snp"], b"\x02\x01\xff", "negative INTEGER"),
        (SPL_OIDS["snp"], b"\x02\x02\x01\x00", "snpSPL .* = 256 exceeds 255"),
        (SPL_OIDS["snp"], b"\x16\x01\x05", "expected DER tag 0x02"),
        (SPL_OIDS["snp"], b"\x02\x01\x05\x00", "1 trailing bytes"),
        (SPL_OIDS["bl"], b"\x02\x05\x01", "claims 5 bytes"),
        ("1.3.6.1.4.1.3704.1.2", b"\x16\x05Venus", "productName 'Venus' names no known"),
        ("1.3.6.1.4.1.3704.1.2", b"\x16\x02\xc3\xa9", "non-ASCII"),
        ("1.3.6.1.4.1.3704.1.4", bytes(63), "63 bytes, expected 8 or 64"),
        ("1.3.6.1.4.1.3704.1.4", b"\x04\x05" + bytes(5), "wrapped hwID is 5 bytes"),
        ("1.3.6.1.4.1.3704.1.6", b"\x05\x00", "unknown AMD extension 1.3.6.1.4.1.3704.1.6"),
    ],
)
def test_bad_extension_values_are_malformed(
    simulated_amd: SimulatedAmd, oid: str, value: bytes, message: str
) -> None:
    certificate = _resigned_with_extension(simulated_amd, oid, value)
    with pytest.raises(MalformedError, match=message):
        endorsement_from_certificate(certificate)


def test_a_non_p384_key_is_malformed(simulated_amd: SimulatedAmd) -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    leaf = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    other = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(leaf.subject)
        .issuer_name(leaf.issuer)
        .public_key(other.public_key())
        .serial_number(1)
        .not_valid_before(leaf.not_valid_before_utc)
        .not_valid_after(leaf.not_valid_after_utc)
    )
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
    certificate = builder.sign(simulated_amd.ask_key, hashes.SHA384(), rsa_padding=pss)
    with pytest.raises(MalformedError, match=r"must be ECDSA P-384.* on secp256r1"):
        endorsement_from_certificate(certificate)


@given(st.integers(min_value=0, max_value=2**64))
def test_der_integer_round_trips(value: int) -> None:
    encoded = der.encode_non_negative_integer(value)
    element = der.read_single(encoded, what="x", tag=der.TAG_INTEGER)
    assert der.decode_non_negative_integer(element.content, what="x") == value


@given(st.binary(max_size=80))
def test_der_reader_never_raises_anything_but_malformed(data: bytes) -> None:
    try:
        element = der.read_single(data, what="fuzz")
        if element.tag == der.TAG_INTEGER:
            der.decode_non_negative_integer(element.content, what="fuzz")
        if element.tag == der.TAG_OID:
            der.decode_oid(element.content, what="fuzz")
    except MalformedError:
        pass


def test_oid_decoding_of_known_identifiers() -> None:
    assert der.decode_oid(bytes.fromhex("2b060104019c78010308"), what="oid") == (
        "1.3.6.1.4.1.3704.1.3.8"
    )
    assert der.decode_oid(bytes.fromhex("608648016503040202"), what="oid") == (
        "2.16.840.1.101.3.4.2.2"
    )
    with pytest.raises(MalformedError, match="non-minimal OBJECT IDENTIFIER"):
        der.decode_oid(bytes.fromhex("2b8001"), what="oid")
