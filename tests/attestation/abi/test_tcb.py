"""TCB_VERSION layouts: Milan/Genoa vs Turin, round trip and component-wise order."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.product import ProductLine
from attestation.abi.report import parse_report
from attestation.abi.tcb import TcbVersion
from attestation.endorsement.certificate import load_endorsement

REAL = Path(__file__).parents[2] / "assets" / "real"


def test_turin_layout_decodes_the_documented_example() -> None:
    raw = int.from_bytes(bytes([0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x47]), "little")
    tcb = TcbVersion.decode(raw, ProductLine.TURIN)
    assert (tcb.fmc, tcb.bl, tcb.tee, tcb.snp, tcb.ucode) == (0, 1, 0, 2, 0x47)
    assert tcb.spl4 is None
    assert tcb.encode() == raw


def test_the_same_bytes_mean_something_else_on_milan() -> None:
    raw = int.from_bytes(bytes([0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x47]), "little")
    tcb = TcbVersion.decode(raw, ProductLine.MILAN)
    assert (tcb.bl, tcb.tee, tcb.snp, tcb.ucode) == (0, 1, 0, 0x47)
    assert (tcb.spl4, tcb.spl5, tcb.spl6, tcb.spl7) == (0, 2, 0, 0)
    assert tcb.fmc is None


@pytest.mark.parametrize("product", [ProductLine.MILAN, ProductLine.GENOA])
def test_milan_genoa_layout(product: ProductLine) -> None:
    raw = int.from_bytes(bytes([3, 0, 0, 0, 0, 0, 8, 115]), "little")
    tcb = TcbVersion.decode(raw, product)
    assert tcb.components() == {
        "bl": 3,
        "tee": 0,
        "spl4": 0,
        "spl5": 0,
        "spl6": 0,
        "spl7": 0,
        "snp": 8,
        "ucode": 115,
    }


@pytest.mark.parametrize(
    ("report", "cert", "product"),
    [
        ("azure-milan-v3-report.bin", "azure-milan-v3-vcek.der", ProductLine.MILAN),
        ("virtee-milan-v2-report.bin", "virtee-milan-v2-vcek.der", ProductLine.MILAN),
        (
            "aws-milan-v3-vlek-vmpl1-report.bin",
            "aws-milan-v3-vlek-vmpl1-vlek.der",
            ProductLine.MILAN,
        ),
        ("oak-genoa-v5-report.bin", "oak-genoa-v5-vcek.der", ProductLine.GENOA),
        ("oak-turin-v5-report.bin", "oak-turin-v5-vcek.der", ProductLine.TURIN),
    ],
)
def test_real_certificate_spls_equal_reported_tcb(
    report: str, cert: str, product: ProductLine
) -> None:
    parsed = parse_report((REAL / report).read_bytes())
    endorsement = load_endorsement((REAL / cert).read_bytes())
    assert parsed.tcb("reported", product).components() == dict(endorsement.spls)


@given(raw=st.integers(0, (1 << 64) - 1), product=st.sampled_from(list(ProductLine)))
def test_decode_encode_round_trip(raw: int, product: ProductLine) -> None:
    assert TcbVersion.decode(raw, product).encode() == raw


tcbs = st.builds(
    lambda values: TcbVersion.decode(int.from_bytes(bytes(values), "little"), ProductLine.GENOA),
    st.lists(st.integers(0, 3), min_size=8, max_size=8),
)


@given(a=tcbs, b=tcbs, c=tcbs)
def test_dominates_is_a_partial_order(a: TcbVersion, b: TcbVersion, c: TcbVersion) -> None:
    assert a.dominates(a)
    if a.dominates(b) and b.dominates(a):
        assert a.security_components() == b.security_components()
    if a.dominates(b) and b.dominates(c):
        assert a.dominates(c)


def test_dominates_is_component_wise_not_integer_order() -> None:
    low_ucode = TcbVersion(ProductLine.MILAN, bl=9, tee=0, snp=9, ucode=1, spl4=0)
    high_ucode = TcbVersion(ProductLine.MILAN, bl=1, tee=0, snp=1, ucode=200, spl4=0)
    assert low_ucode.encode() < high_ucode.encode()
    assert not high_ucode.dominates(low_ucode)
    assert not low_ucode.dominates(high_ucode)


def test_layout_specific_fields_are_enforced() -> None:
    with pytest.raises(ValueError, match="Turin TCB has fmc"):
        TcbVersion(ProductLine.TURIN, bl=0, tee=0, snp=0, ucode=0)
    with pytest.raises(ValueError, match="Milan TCB has spl4"):
        TcbVersion(ProductLine.MILAN, bl=0, tee=0, snp=0, ucode=0, fmc=1)
    with pytest.raises(ValueError, match="must be a byte"):
        TcbVersion(ProductLine.MILAN, bl=256, tee=0, snp=0, ucode=0, spl4=0)
    with pytest.raises(ValueError, match="different product lines"):
        TcbVersion.decode(0, ProductLine.MILAN).dominates(TcbVersion.decode(0, ProductLine.GENOA))
