"""The report signature: ECDSA P-384/SHA-384 over 0x000-0x29F, R/S little-endian."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.product import ProductLine
from attestation.abi.report import (
    SIGNING_KEY_NONE,
    parse_report,
    serialize_report,
    unsigned_template,
)
from attestation.abi.signature import (
    rs_from_der,
    sign_report_bytes,
    signature_der,
    verify_report_signature,
)
from attestation.endorsement.certificate import load_endorsement
from attestation.errors import BadSignatureError

REAL = Path(__file__).parents[2] / "assets" / "real"
PAIRS = [
    ("gsg-milan-v2-debug-report.bin", "gsg-milan-v2-debug-vcek.der"),
    ("virtee-milan-v2-report.bin", "virtee-milan-v2-vcek.der"),
    (
        "trustee-milan-v2-idblock-provisional-report.bin",
        "trustee-milan-v2-idblock-provisional-vcek.der",
    ),
    ("azure-milan-v3-report.bin", "azure-milan-v3-vcek.der"),
    ("azure-milan-v3-resigned-report.bin", "azure-milan-v3-vcek.der"),
    ("aws-milan-v3-vlek-vmpl1-report.bin", "aws-milan-v3-vlek-vmpl1-vlek.der"),
    ("oak-genoa-v5-report.bin", "oak-genoa-v5-vcek.der"),
    ("oak-turin-v5-report.bin", "oak-turin-v5-vcek.der"),
]
KEY = ec.generate_private_key(ec.SECP384R1())


@pytest.mark.parametrize(("report", "cert"), PAIRS, ids=[p[0] for p in PAIRS])
def test_every_real_report_verifies_with_its_certificate(report: str, cert: str) -> None:
    data = (REAL / report).read_bytes()
    key = load_endorsement((REAL / cert).read_bytes()).public_key
    verify_report_signature(parse_report(data), key)
    verify_report_signature(parse_report(data), key, data[:0x2A0])


def test_a_real_report_does_not_verify_with_another_chips_key() -> None:
    report = parse_report((REAL / "oak-turin-v5-report.bin").read_bytes())
    other = load_endorsement((REAL / "azure-milan-v3-vcek.der").read_bytes()).public_key
    with pytest.raises(BadSignatureError, match="does not verify"):
        verify_report_signature(report, other)


def test_simulated_signature_round_trip() -> None:
    report = sign_report_bytes(unsigned_template(ProductLine.GENOA), KEY)
    verify_report_signature(parse_report(serialize_report(report)), KEY.public_key())
    tampered = dataclasses.replace(report, vmpl=1)
    with pytest.raises(BadSignatureError, match="does not verify"):
        verify_report_signature(tampered, KEY.public_key())


def test_all_zero_signature_is_unsigned() -> None:
    with pytest.raises(BadSignatureError, match="unsigned"):
        verify_report_signature(unsigned_template(ProductLine.MILAN), KEY.public_key())


def test_signing_key_7_is_unsigned_even_with_a_valid_signature() -> None:
    body = dataclasses.replace(unsigned_template(ProductLine.MILAN), signing_key=SIGNING_KEY_NONE)
    signed = sign_report_bytes(body, KEY)
    with pytest.raises(BadSignatureError, match="unsigned"):
        verify_report_signature(signed, KEY.public_key())


def test_a_key_on_another_curve_is_rejected() -> None:
    report = sign_report_bytes(unsigned_template(ProductLine.MILAN), KEY)
    p256 = ec.generate_private_key(ec.SECP256R1()).public_key()
    with pytest.raises(BadSignatureError, match="not P-384"):
        verify_report_signature(report, p256)


@given(r=st.integers(1, (1 << 384) - 1), s=st.integers(1, (1 << 384) - 1))
def test_rs_little_endian_der_round_trip(r: int, s: int) -> None:
    report = unsigned_template(ProductLine.MILAN).with_signature(r, s)
    der = signature_der(report)
    assert der == encode_dss_signature(r, s)
    assert rs_from_der(der) == (r, s)
    assert parse_report(serialize_report(report)).signature_rs == (r, s)
