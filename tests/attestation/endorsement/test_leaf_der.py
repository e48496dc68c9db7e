"""leaf_der (the one-pass reading of a VCEK/VLEK's DER) against cryptography's own decoding.

A DER endorsement in AMD's shape is read by :mod:`attestation.endorsement.leaf_der`; anything
else is decoded part by part through ``cryptography``. Both must reach the same endorsement
or the same error, for real certificates, byte-mutated real certificates and generated ones.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attestation.endorsement import certificate as certificate_module
from attestation.endorsement import der, leaf_der
from attestation.endorsement.certificate import (
    OID_HWID,
    OID_PRODUCT_NAME,
    OID_STRUCT_VERSION,
    PARSE_ERRORS,
    SPL_OIDS,
    Endorsement,
    load_endorsement_chain,
)
from attestation.errors import MalformedError

REAL = Path(__file__).parents[2] / "assets" / "real"
REAL_DER = {path.name: path.read_bytes() for path in sorted(REAL.glob("*.der"))}
AMD_OIDS = (OID_STRUCT_VERSION, OID_PRODUCT_NAME, *SPL_OIDS.values(), OID_HWID)
KNOWN = certificate_module._KNOWN_AMD_OID_TLVS
# One throwaway key signs generated certificates (loading never checks the signature).
_SIGNER = ec.generate_private_key(ec.SECP384R1())
_LEAF_KEY = ec.generate_private_key(ec.SECP384R1()).public_key()


@pytest.fixture(autouse=True)
def _serial_zero_is_fine() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Parsed a serial number which wasn't positive")
        yield


def _slow(data: bytes, monkeypatch: pytest.MonkeyPatch) -> Endorsement | str:
    """The endorsement (or error message) with leaf_der declining everything."""
    with monkeypatch.context() as patch:
        patch.setattr(leaf_der, "read_leaf", lambda _data, _known: None)
        return _outcome(data)


def _outcome(data: bytes) -> Endorsement | str:
    try:
        endorsement, rest = load_endorsement_chain(data)
    except MalformedError as exc:
        return str(exc)
    assert rest == ()
    return endorsement


def _comparable(outcome: Endorsement | str) -> object:
    if isinstance(outcome, str):
        return outcome
    return (
        outcome.der,
        outcome.issuer,
        outcome.critical_extensions,
        outcome.basic_constraints_ca,
        outcome.signer_kind,
        outcome.struct_version,
        outcome.product_name,
        outcome.product_line,
        dict(outcome.spls),
        outcome.hwid,
        outcome.csp_id,
        outcome.public_key.public_numbers(),
    )


def _same_as_cryptography(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _comparable(_outcome(data)) == _comparable(_slow(data, monkeypatch))


def _read_by_cryptography(data: bytes, parts: leaf_der.LeafParts) -> None:
    """Each part leaf_der read is what cryptography decodes from the same certificate."""
    certificate = x509.load_der_x509_certificate(data)
    # Extensions: leaf_der's are all of them, as cryptography decodes them.
    assert {
        e.oid.dotted_string: (e.critical, e.value.value)
        for e in certificate.extensions
        if isinstance(e.value, x509.UnrecognizedExtension)
    } == {oid: (False, value) for oid, value in parts.extensions.items()}
    assert len(certificate.extensions) == len(parts.extensions)
    # Names: where cryptography decodes one (else both paths refuse it, through cryptography),
    # it re-encodes to the bytes leaf_der found.
    for name, found in (("issuer", parts.issuer), ("subject", parts.subject)):
        try:
            decoded = getattr(certificate, name)
        except PARSE_ERRORS:
            continue
        assert decoded.public_bytes() == found
    # The signed parts: the TBS bytes cryptography verifies signatures over, the signature
    # BIT STRING (its unused-bits octet, then the value), and both algorithm identifiers.
    signed = parts.signed
    assert signed.tbs == certificate.tbs_certificate_bytes
    assert signed.signature[1:] == certificate.signature
    outer = der.read_single(data, what="c", tag=der.TAG_SEQUENCE)
    tbs, algorithm, signature = der.read_all(outer.content, what="c")
    assert (signed.algorithm, signed.signature) == (algorithm.content, signature.content)
    inner = der.read_all(tbs.content, what="c")[2]
    assert signed.tbs_algorithm == inner.content


@pytest.mark.parametrize("name", sorted(REAL_DER))
def test_every_real_certificate_is_read_as_cryptography_reads_it(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = REAL_DER[name]
    parts = leaf_der.read_leaf(data, KNOWN)
    assert parts is not None  # every real VCEK/VLEK is in AMD's shape
    _read_by_cryptography(data, parts)
    _same_as_cryptography(data, monkeypatch)


def test_the_fast_reading_is_used_for_a_real_der_vcek(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = leaf_der.read_leaf

    def spy(data: bytes, known: dict[bytes, str]) -> leaf_der.LeafParts | None:
        calls.append(data)
        return real(data, known)

    monkeypatch.setattr(leaf_der, "read_leaf", spy)
    data = REAL_DER["azure-milan-v3-vcek.der"]
    endorsement, _ = load_endorsement_chain(data)
    assert calls == [data]
    assert endorsement.issuer.rfc4514_string().startswith("CN=SEV-Milan,")
    assert (endorsement.critical_extensions, endorsement.basic_constraints_ca) == ((), None)


@settings(max_examples=300)
@given(
    st.sampled_from(sorted(REAL_DER)),
    st.data(),
    st.sampled_from(["replace", "delete", "insert"]),
    st.integers(min_value=0, max_value=255),
)
def test_mutated_real_certificates_reach_the_same_outcome(
    name: str, data: st.DataObject, how: str, byte: int
) -> None:
    original = REAL_DER[name]
    at = data.draw(st.integers(min_value=0, max_value=len(original) - 1))
    if how == "replace":
        mutated = original[:at] + bytes([byte]) + original[at + 1 :]
    elif how == "delete":
        mutated = original[:at] + original[at + 1 :]
    else:
        mutated = original[:at] + bytes([byte]) + original[at:]
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same_as_cryptography(mutated, monkeypatch)
    try:
        x509.load_der_x509_certificate(mutated)
    except PARSE_ERRORS:
        return  # the reader reads only what cryptography loaded
    parts = leaf_der.read_leaf(mutated, KNOWN)
    if parts is not None:  # it may decline; what it reads, it reads as cryptography does
        _read_by_cryptography(mutated, parts)


_DER_VALUES = st.one_of(
    st.integers(min_value=0, max_value=300).map(der.encode_non_negative_integer),
    st.sampled_from(
        [
            b"\x02\x02\x00\x05",  # non-minimal
            b"\x02\x01\xff",  # negative
            b"\x02\x01\x80",  # negative, at the edge of the one-byte fast path
            b"\x02\x02\x00\x80",  # 128, at the edge of the two-byte fast path
            b"\x02\x02\x00\x7f",  # non-minimal, at the same edge
            b"\x02\x00",  # empty
            b"\x02\x01\x05\x00",  # trailing byte
            b"\x16\x05Milan",
            b"\x16\x05Genoa",
            b"\x16\x08Milan-B0",
            b"\x16\x05Venus",
            b"\x16\x02\xc3\xa9",
            bytes(64),
            bytes(8),
            b"\x04\x40" + bytes(64),
            b"\x04\x05" + bytes(5),
        ]
    ),
    st.binary(max_size=70),
)


@st.composite
def _certificates(draw: st.DrawFn) -> bytes:
    common_name = draw(st.sampled_from(["SEV-VCEK", "SEV-VLEK", "SEV-Milan"]))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, "SEV-Milan"),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Advanced Micro Devices"),
                ]
            )
        )
        .public_key(_LEAF_KEY)
        .serial_number(draw(st.integers(min_value=1, max_value=2**64)))
        .not_valid_before(dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
        .not_valid_after(dt.datetime(2031, 1, 1, tzinfo=dt.UTC))
    )
    for oid in draw(st.lists(st.sampled_from(AMD_OIDS), unique=True, min_size=1)):
        value = draw(_DER_VALUES)
        extension = x509.UnrecognizedExtension(x509.ObjectIdentifier(oid), value)
        builder = builder.add_extension(extension, critical=draw(st.booleans()))
    if draw(st.booleans()):
        constraints = x509.BasicConstraints(ca=draw(st.booleans()), path_length=None)
        builder = builder.add_extension(constraints, critical=draw(st.booleans()))
    if draw(st.booleans()):
        unknown = x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.3704.1.6"), b"")
        builder = builder.add_extension(unknown, critical=draw(st.booleans()))
    certificate = builder.sign(_SIGNER, hashes.SHA384())
    return certificate.public_bytes(serialization.Encoding.DER)


@settings(max_examples=300)
@given(_certificates())
def test_generated_certificates_reach_the_same_outcome(data: bytes) -> None:
    certificate = x509.load_der_x509_certificate(data)
    amd_only = all(
        e.oid.dotted_string in AMD_OIDS and not e.critical for e in certificate.extensions
    )
    parts = leaf_der.read_leaf(data, KNOWN)
    # Read exactly when every extension is a non-critical AMD one, and then as cryptography.
    assert (parts is not None) == amd_only
    if parts is not None:
        _read_by_cryptography(data, parts)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same_as_cryptography(data, monkeypatch)


def test_a_duplicate_extension_is_declined_and_refused_as_cryptography_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The OID of structVersion (.1.1) rewritten to the one of productName (.1.2): two copies.
    data = REAL_DER["azure-milan-v3-vcek.der"]
    struct_version = der.encode_oid(OID_STRUCT_VERSION)
    duplicate = data.replace(struct_version, der.encode_oid(OID_PRODUCT_NAME), 1)
    assert duplicate != data
    assert leaf_der.read_leaf(duplicate, KNOWN) is None
    outcome = _outcome(duplicate)
    assert outcome == "certificate 1 of 1: extensions cannot be decoded: " + str(
        _duplicate_error(duplicate)
    )
    _same_as_cryptography(duplicate, monkeypatch)


def _duplicate_error(data: bytes) -> Exception:
    with pytest.raises(x509.DuplicateExtension) as caught:
        list(x509.load_der_x509_certificate(data).extensions)
    return caught.value


def test_an_undecodable_subject_is_refused_with_the_same_message_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "SEV-VCEK" as a UTF8String with an invalid byte: the DER loads, the name cannot decode.
    data = REAL_DER["azure-milan-v3-vcek.der"]
    broken = data.replace(b"\x0c\x08SEV-VCEK", b"\x0c\x08\xffEV-VCEK", 1)
    assert broken != data
    assert leaf_der.read_leaf(broken, KNOWN) is not None
    outcome = _outcome(broken)
    assert isinstance(outcome, str)
    assert outcome.startswith("certificate 1 of 1: subject cannot be decoded: ")
    assert outcome == _slow(broken, monkeypatch)


def test_a_subject_cn_other_than_vcek_or_vlek_is_refused_after_a_name_memo_hit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = REAL_DER["azure-milan-v3-vcek.der"]
    other = data.replace(b"\x0c\x08SEV-VCEK", b"\x0c\x08SEV-ABCD", 1)
    for _ in range(2):  # the second time the subject's Name comes from the memo
        assert _outcome(other) == (
            "certificate subject CN 'SEV-ABCD' is neither 'SEV-VCEK' nor 'SEV-VLEK'"
        )
    _same_as_cryptography(other, monkeypatch)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (b"\x30\x00", "no TBS"),
        (REAL_DER["azure-milan-v3-vcek.der"] + b"\x00", "trailing byte"),
        (REAL_DER["azure-milan-v3-vcek.der"][:-1], "truncated"),
        (b"\x30\x84\x00\x00\x00\x05" + bytes(5), "non-minimal long length"),
        (b"\x30\x80" + bytes(4), "indefinite length"),
    ],
)
def test_the_reader_declines_what_is_not_amd_shaped(data: bytes, why: str) -> None:
    assert leaf_der.read_leaf(data, KNOWN) is None, why


def test_encode_oid_is_the_inverse_of_decode_oid() -> None:
    for oid in (*AMD_OIDS, "2.5.29.19", "1.2.840.113549.1.1.10", "2.999.3"):
        encoded = der.encode_oid(oid)
        element = der.read_single(encoded, what="oid", tag=der.TAG_OID)
        assert der.decode_oid(element.content, what="oid") == oid
    assert der.encode_oid("2.5.29.19") == bytes.fromhex("0603551d13")
    with pytest.raises(ValueError, match="not an OBJECT IDENTIFIER"):
        der.encode_oid("1.40")


def _integer_by_the_full_decoder(raw: bytes) -> int | str:
    what = f"certificate extension snpSPL ({SPL_OIDS['snp']})"
    try:
        element = der.read_single(raw, what=what, tag=der.TAG_INTEGER)
        return der.decode_non_negative_integer(element.content, what=what)
    except MalformedError as exc:
        return str(exc)


@settings(max_examples=500)
@given(
    st.one_of(
        st.binary(max_size=5),
        st.tuples(
            st.sampled_from([b"\x02\x01", b"\x02\x02\x00", b"\x02\x02\x01"]),
            st.binary(min_size=1, max_size=1),
        ).map(b"".join),
    )
)
@example(bytes.fromhex("020100"))
@example(bytes.fromhex("02017f"))
@example(bytes.fromhex("020180"))
@example(bytes.fromhex("0201ff"))
@example(bytes.fromhex("0202007f"))
@example(bytes.fromhex("02020080"))
@example(bytes.fromhex("020200ff"))
@example(bytes.fromhex("02020100"))
@example(bytes.fromhex("0202ff80"))
@example(bytes.fromhex("0203000080"))
@example(bytes.fromhex("0200"))
@example(bytes.fromhex("02"))
def test_the_integer_fast_paths_agree_with_the_full_decoder(raw: bytes) -> None:
    try:
        fast: int | str | None = certificate_module._optional_integer(
            {SPL_OIDS["snp"]: raw}, SPL_OIDS["snp"], "snpSPL"
        )
    except MalformedError as exc:
        fast = str(exc)
    assert fast == _integer_by_the_full_decoder(raw)
