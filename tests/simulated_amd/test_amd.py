"""The simulated AMD signer: real report layout, AMD-shaped certificates, stable keys."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import REPORT_SIZE, parse_report, serialize_report
from attestation.abi.tcb import TcbVersion
from attestation.endorsement.certificate import load_certificates, load_endorsement
from attestation.endorsement.chain import verify_chain
from attestation.endorsement.trust import TrustStore
from attestation.errors import MalformedError
from attestation.simulated_amd import SIMULATED_CHIP_ID, SimulatedAmd

REPORT_DATA = bytes(range(64))
MEASUREMENT = hashlib.sha384(b"workload").digest()
HOST_DATA = hashlib.sha256(b"init-data").digest()
CPUID = {
    ProductLine.MILAN: bytes([0x19, 0x01, 0x01]),
    ProductLine.GENOA: bytes([0x19, 0x11, 0x01]),
    ProductLine.TURIN: bytes([0x1A, 0x02, 0x00]),
}


def verify_signature(report: bytes, chain_pem: str) -> None:
    endorsement = load_endorsement(chain_pem.encode())
    r = int.from_bytes(report[0x2A0:0x2E8], "little")
    s = int.from_bytes(report[0x2E8:0x330], "little")
    endorsement.public_key.verify(
        encode_dss_signature(r, s), report[:0x2A0], ec.ECDSA(hashes.SHA384())
    )


@pytest.mark.parametrize("line", list(ProductLine))
@pytest.mark.parametrize("signer", list(SignerKind))
def test_signed_reports_have_the_real_layout_and_verify(
    simulated_amd: SimulatedAmd, line: ProductLine, signer: SignerKind
) -> None:
    report = simulated_amd.sign_report(
        report_data=REPORT_DATA,
        product_line=line,
        measurement=MEASUREMENT,
        host_data=HOST_DATA,
        policy=0x30000,
        vmpl=2,
        signer=signer,
    )
    assert len(report) == REPORT_SIZE
    assert report[0x000:0x004] == (5).to_bytes(4, "little")
    assert report[0x008:0x010] == (0x30000).to_bytes(8, "little")
    assert report[0x030:0x034] == (2).to_bytes(4, "little")
    assert report[0x034:0x038] == (1).to_bytes(4, "little")
    assert report[0x048:0x04C] == ({SignerKind.VCEK: 0, SignerKind.VLEK: 1}[signer] << 2).to_bytes(
        4, "little"
    )
    assert report[0x050:0x090] == REPORT_DATA
    assert report[0x090:0x0C0] == MEASUREMENT
    assert report[0x0C0:0x0E0] == HOST_DATA
    assert report[0x160:0x180] == b"\xff" * 32
    assert report[0x188:0x18B] == CPUID[line]
    reported = report[0x180:0x188]
    assert report[0x038:0x040] == reported  # CURRENT
    assert report[0x1E0:0x1E8] == reported  # COMMITTED
    assert report[0x1F0:0x1F8] == reported  # LAUNCH
    assert report[0x1E8:0x1EB] == report[0x1EC:0x1EF]  # firmware current == committed
    assert report[0x330:] == bytes(368)

    parsed = parse_report(report)
    assert serialize_report(parsed) == report
    assert parsed.product_line is line
    assert parsed.signer_kind is signer

    chain_pem = simulated_amd.endorsement_pem(report)
    verify_signature(report, chain_pem)
    endorsement = load_endorsement(chain_pem.encode())
    assert dict(endorsement.spls) == parsed.tcb("reported").components()
    assert endorsement.product_line is line
    assert endorsement.struct_version == (1 if line is ProductLine.TURIN else 0)
    if signer is SignerKind.VCEK:
        assert endorsement.csp_id is None
        assert endorsement.hwid is not None
        assert parsed.chip_id == endorsement.hwid.ljust(64, b"\0")
        assert len(endorsement.hwid) == (8 if line is ProductLine.TURIN else 64)
    else:
        assert endorsement.hwid is None
        assert endorsement.csp_id == "CN=simulated.csp.invalid"
        assert parsed.chip_id == bytes(64)
    pinned = TrustStore.amd().with_simulated_root(simulated_amd.ark_certificate)
    certificates = load_certificates(chain_pem.encode())
    assert verify_chain(
        endorsement,
        line,
        trust=pinned,
        now=dt.datetime.now(dt.UTC),
        intermediates=certificates[1:],
    ).simulated


@pytest.mark.parametrize("version", [2, 3, 5])
def test_every_report_version_round_trips(simulated_amd: SimulatedAmd, version: int) -> None:
    report = simulated_amd.sign_report(
        report_data=REPORT_DATA, product_line=ProductLine.GENOA, version=version
    )
    parsed = parse_report(report)
    assert parsed.version == version
    assert serialize_report(parsed) == report
    verify_signature(report, simulated_amd.endorsement_pem(report, product_line=ProductLine.GENOA))


def test_v2_reports_need_the_product_line_for_their_chain(simulated_amd: SimulatedAmd) -> None:
    report = simulated_amd.sign_report(report_data=REPORT_DATA, version=2)
    with pytest.raises(ValueError, match="version 2 report needs product_line"):
        simulated_amd.endorsement_pem(report)


def test_defaults_are_version_5_milan_with_a_realistic_tcb(simulated_amd: SimulatedAmd) -> None:
    parsed = parse_report(simulated_amd.sign_report(report_data=REPORT_DATA))
    assert parsed.version == 5
    assert parsed.product_line is ProductLine.MILAN
    assert parsed.tcb("reported") == TcbVersion(
        ProductLine.MILAN, bl=4, tee=0, snp=24, ucode=219, spl4=0
    )
    assert parsed.chip_id == SIMULATED_CHIP_ID
    assert not parsed.policy.debug
    assert parsed.vmpl == 0


def test_other_fields_and_a_chosen_tcb_are_honoured(simulated_amd: SimulatedAmd) -> None:
    tcb = TcbVersion(ProductLine.TURIN, bl=3, tee=1, snp=5, ucode=0x80, fmc=2)
    chip = bytes.fromhex("0102030405060708") + bytes(56)
    report = simulated_amd.sign_report(
        report_data=REPORT_DATA,
        product_line=ProductLine.TURIN,
        reported_tcb=tcb,
        chip_id=chip,
        guest_svn=7,
        platform_info=0x3,
        image_id=b"\x42" * 16,
    )
    parsed = parse_report(report)
    assert parsed.tcb("reported") == tcb
    assert parsed.chip_id == chip
    assert parsed.guest_svn == 7
    assert parsed.platform_info.raw == 0x3
    assert parsed.image_id == b"\x42" * 16
    chain = simulated_amd.endorsement_pem(report)
    verify_signature(report, chain)
    endorsement = load_endorsement(chain.encode())
    assert endorsement.hwid == bytes.fromhex("0102030405060708")
    assert dict(endorsement.spls) == {
        "fmc": 2,
        "bl": 3,
        "tee": 1,
        "snp": 5,
        "spl5": 0,
        "spl6": 0,
        "spl7": 0,
        "ucode": 0x80,
    }


def test_vcek_keys_are_a_function_of_line_chip_and_tcb(simulated_amd: SimulatedAmd) -> None:
    first = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    again = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    assert first.signature != again.signature  # re-minted, like KDS does
    assert first.public_key() == again.public_key()
    newer_tcb = TcbVersion(ProductLine.MILAN, bl=4, tee=0, snp=25, ucode=219, spl4=0)
    other_chip = b"\x01" * 64
    for different in (
        simulated_amd.issue_vcek(product_line=ProductLine.MILAN, reported_tcb=newer_tcb),
        simulated_amd.issue_vcek(product_line=ProductLine.MILAN, chip_id=other_chip),
        simulated_amd.issue_vcek(
            product_line=ProductLine.GENOA, reported_tcb=DEFAULT_MILAN_AS_GENOA
        ),
    ):
        assert different.public_key() != first.public_key()


DEFAULT_MILAN_AS_GENOA = TcbVersion(ProductLine.GENOA, bl=4, tee=0, snp=24, ucode=219, spl4=0)


def test_state_round_trip_keeps_the_root_and_the_vcek_keys(simulated_amd: SimulatedAmd) -> None:
    state = simulated_amd.to_state()
    assert set(state) == {
        "format",
        "ark.pem",
        "ark.key.pem",
        "ask.pem",
        "ask.key.pem",
        "asvk.pem",
        "asvk.key.pem",
        "vek-seed.hex",
    }
    restored = SimulatedAmd.from_state(state)
    assert restored.root_fingerprint == simulated_amd.root_fingerprint
    assert restored.ark_pem == simulated_amd.ark_pem
    assert (
        restored.issue_vcek(product_line=ProductLine.TURIN).public_key()
        == simulated_amd.issue_vcek(product_line=ProductLine.TURIN).public_key()
    )


def test_the_root_says_it_is_simulated(simulated_amd: SimulatedAmd) -> None:
    ark = simulated_amd.ark_certificate
    assert ark.subject == ark.issuer
    assert ark.subject.rfc4514_string() == (
        "CN=ARK-Simulated (NOT AMD),O=SIMULATED - not AMD,OU=attested-replay simulated PKI"
    )
    assert ark.public_key().key_size == 4096  # type: ignore[union-attr]
    leaf = simulated_amd.issue_vcek(product_line=ProductLine.MILAN)
    assert leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "SIMULATED - not AMD"
    )
    assert simulated_amd.root_fingerprint.startswith("sha256:")
    assert len(simulated_amd.root_fingerprint) == len("sha256:") + 64


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.pop("ask.pem"), "missing ask.pem"),
        (lambda s: s.update({"format": "v0"}), "'format' is 'v0'"),
        (lambda s: s.update({"vek-seed.hex": "zz"}), "'vek-seed.hex' is not hex"),
        (lambda s: s.update({"vek-seed.hex": "00"}), "'vek-seed.hex' is 1 bytes, expected 32"),
        (lambda s: s.update({"asvk.pem": "junk"}), "'asvk.pem' is not a PEM certificate"),
        (lambda s: s.update({"ark.key.pem": "junk"}), "'ark.key.pem' is not a PEM private key"),
        (
            lambda s: s.update({"ask.key.pem": s["asvk.key.pem"]}),
            "'ask.key.pem' does not match 'ask.pem'",
        ),
    ],
)
def test_corrupt_state_is_malformed(
    simulated_amd: SimulatedAmd, mutate: object, message: str
) -> None:
    state = simulated_amd.to_state()
    mutate(state)  # type: ignore[operator]
    with pytest.raises(MalformedError, match=message):
        SimulatedAmd.from_state(state)


def test_a_foreign_intermediate_in_state_is_malformed(simulated_amd: SimulatedAmd) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    ask = simulated_amd.ask_certificate
    # Same subject, issuer name and key as the real ASK, but signed by the ASK's own key.
    foreign = (
        x509.CertificateBuilder()
        .subject_name(ask.subject)
        .issuer_name(ask.issuer)
        .public_key(simulated_amd.ask_key.public_key())
        .serial_number(ask.serial_number)
        .not_valid_before(ask.not_valid_before_utc)
        .not_valid_after(ask.not_valid_after_utc)
        .sign(
            simulated_amd.ask_key,
            hashes.SHA384(),
            rsa_padding=padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48),
        )
    )
    state = simulated_amd.to_state()
    state["ask.pem"] = foreign.public_bytes(serialization.Encoding.PEM).decode()
    with pytest.raises(MalformedError, match=r"'ask\.pem' is not signed by 'ark\.pem'"):
        SimulatedAmd.from_state(state)


def test_crls_are_signed_by_the_simulated_ark(simulated_amd: SimulatedAmd) -> None:
    from cryptography import x509

    crl = x509.load_der_x509_crl(simulated_amd.crl(revoked_serials=[5, 6]))
    assert crl.issuer == simulated_amd.ark_certificate.subject
    assert crl.is_signature_valid(simulated_amd.ark_key.public_key())
    assert sorted(entry.serial_number for entry in crl) == [5, 6]


def test_from_keys_requires_rsa_4096(simulated_amd: SimulatedAmd) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(ValueError, match="ask key must be RSA-4096, got 1024 bits"):
        SimulatedAmd.from_keys(
            ark_key=simulated_amd.ark_key, ask_key=small, asvk_key=simulated_amd.asvk_key
        )


@settings(max_examples=25)
@given(
    report_data=st.binary(min_size=64, max_size=64),
    measurement=st.binary(min_size=48, max_size=48),
    host_data=st.binary(min_size=32, max_size=32),
    vmpl=st.integers(min_value=0, max_value=3),
    line=st.sampled_from(list(ProductLine)),
    signer=st.sampled_from(list(SignerKind)),
    version=st.sampled_from([3, 5]),
)
def test_any_chosen_fields_round_trip_and_verify(
    simulated_amd: SimulatedAmd,
    *,
    report_data: bytes,
    measurement: bytes,
    host_data: bytes,
    vmpl: int,
    line: ProductLine,
    signer: SignerKind,
    version: int,
) -> None:
    report = simulated_amd.sign_report(
        report_data=report_data,
        measurement=measurement,
        host_data=host_data,
        vmpl=vmpl,
        product_line=line,
        signer=signer,
        version=version,
    )
    parsed = parse_report(report)
    assert serialize_report(parsed) == report
    assert (parsed.report_data, parsed.measurement, parsed.host_data, parsed.vmpl) == (
        report_data,
        measurement,
        host_data,
        vmpl,
    )
    verify_signature(report, simulated_amd.endorsement_pem(report))
