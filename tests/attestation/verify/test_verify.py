"""The raw-report pipeline: check order, endorsement consistency, simulated roots, bit flips."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import (
    LAYOUT,
    REPORT_SIZE,
    SIGNED_REGION_END,
    AttestationReport,
    parse_report,
)
from attestation.endorsement.certificate import Endorsement, load_endorsement
from attestation.endorsement.chain import VerifiedChain
from attestation.endorsement.trust import TrustStore
from attestation.errors import FailureClass, MalformedError
from attestation.exit_codes import EXIT_CODES
from attestation.simulated_amd import SimulatedAmd, sign_with_key
from attestation.verify.policy import CRYPTO_ONLY, Policy
from attestation.verify.verifier import (
    Verifier,
    endorsement_checks,
    verify_endorsement,
    verify_report,
)

REAL = Path(__file__).parents[2] / "assets" / "real"
NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
#: Simulated certificates are issued at the real current time (valid from a day before).
SIM_NOW = dt.datetime.now(dt.UTC)
AMD = TrustStore.amd()
CHIP_A = bytes(range(1, 65))
CHIP_B = bytes(range(101, 165))


def real(name: str) -> bytes:
    return (REAL / name).read_bytes()


def code(name: str) -> int:
    return EXIT_CODES[FailureClass(name)]


@pytest.fixture
def sim(simulated_amd: SimulatedAmd) -> SimulatedAmd:
    """The session's simulated PKI (tests/conftest.py); it issues certificates at real time."""
    return simulated_amd


@pytest.fixture
def pinned(sim: SimulatedAmd) -> TrustStore:
    return AMD.with_simulated_root(sim.ark_certificate)


def chain(sim: SimulatedAmd, leaf: x509.Certificate, via: SignerKind) -> list[x509.Certificate]:
    return [leaf, sim.intermediate(via)]


def names(checks: Sequence[object]) -> list[str]:
    return [getattr(c, "name") for c in checks]  # noqa: B009 - Sequence[object] for brevity


# -- real vectors ------------------------------------------------------------------------


def test_real_report_passes_every_check_in_order() -> None:
    result = verify_report(
        real("oak-turin-v5-report.bin"),
        real("oak-turin-v5-vcek.der"),
        policy=Policy(),
        trust=AMD,
        now=NOW,
    )
    assert result.ok
    assert result.exit_code == 0
    assert result.failure_class is None
    assert names(result.checks) == [
        "report.parse",
        "endorsement.parse",
        "endorsement.chain",
        "report.signature",
        "endorsement.signer-kind",
        "endorsement.product-line",
        "endorsement.struct-version",
        "endorsement.tcb",
        "endorsement.chip-id",
        "policy.debug",
        "policy.migration-agent",
        "policy.vmpl",
        "policy.provisional-firmware",
        "policy.minimum-tcb",
        "policy.minimum-firmware",
        "policy.products",
        "policy.signers",
        "policy.platform-info",
        "workload.measurement",
        "workload.host-data",
        "workload.id-key-digest",
        "workload.author-key-digest",
    ]
    classes = [c.failure_class for c in result.checks]
    assert classes == sorted(classes, key=lambda c: EXIT_CODES[c])
    chip = next(c for c in result.checks if c.name == "endorsement.chip-id")
    assert chip.detail == "hwID 3b42092f69c656d3 matches CHIP_ID"


def test_aws_vlek_with_masked_chip_id_passes_the_endorsement_checks() -> None:
    result = verify_report(
        real("aws-milan-v3-vlek-vmpl1-report.bin"),
        real("aws-milan-v3-vlek-vmpl1-vlek.der"),
        policy=CRYPTO_ONLY,
        trust=AMD,
        now=dt.datetime(2025, 6, 1, tzinfo=dt.UTC),
    )
    assert result.exit_code == 0
    chip = next(c for c in result.checks if c.name == "endorsement.chip-id")
    assert chip.detail == "VLEK: no hwID, CHIP_ID is not bound (by design)"


def test_another_product_lines_genuine_certificate_fails_at_the_signature() -> None:
    # The Milan VCEK chains to AMD's Milan root, but its key did not sign the Turin report:
    # the signature stage (3) comes before the product-line consistency stage (4).
    result = verify_report(
        real("oak-turin-v5-report.bin"),
        real("azure-milan-v3-vcek.der"),
        policy=CRYPTO_ONLY,
        trust=AMD,
        now=NOW,
    )
    assert result.exit_code == 3
    assert [c.name for c in result.failed_checks] == ["report.signature"]
    later = [c for c in result.checks if c.ok is None]
    assert names(later)[0] == "endorsement.signer-kind"
    assert all(c.detail == "not run: the report is not authentic" for c in later)


def test_malformed_inputs_stop_before_the_chain() -> None:
    result = verify_report(b"\x00" * 10, b"garbage", policy=Policy(), trust=AMD, now=NOW)
    assert result.exit_code == 1
    assert names(result.failed_checks) == ["report.parse", "endorsement.parse"]
    assert result.report is None
    assert all(c.ok is None for c in result.checks[2:])


def test_verifier_validates_each_distinct_chain_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from attestation.endorsement import chain as chain_module

    calls: list[bytes] = []
    real_verify_chain = chain_module.verify_chain

    def counting(endorsement: Endorsement, *args: object, **kwargs: object) -> VerifiedChain:
        calls.append(endorsement.der)
        return real_verify_chain(endorsement, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("attestation.verify.verifier.verify_chain", counting)
    verifier = Verifier(AMD, policy=CRYPTO_ONLY)
    cert = real("azure-milan-v3-vcek.der")
    for name in ("azure-milan-v3-report.bin", "azure-milan-v3-resigned-report.bin") * 3:
        assert verifier.verify(real(name), cert, now=NOW).exit_code == 0
    assert len(calls) == 1
    assert verifier.verify(
        real("oak-genoa-v5-report.bin"), real("oak-genoa-v5-vcek.der"), now=NOW
    ).ok
    assert len(calls) == 2
    later = NOW + dt.timedelta(days=1)
    assert verifier.verify(real("azure-milan-v3-report.bin"), cert, now=later).ok
    assert len(calls) == 3


# -- exhaustive and property bit flips -----------------------------------------------------


def flip(data: bytes, bit: int) -> bytes:
    index, shift = divmod(bit, 8)
    return data[:index] + bytes([data[index] ^ 1 << shift]) + data[index + 1 :]


RESERVED_BYTES = {i for s in LAYOUT if s.reserved for i in range(s.offset, s.end)}


def test_every_single_bit_flip_of_a_real_report_fails() -> None:
    """All 9472 bits: the signed region and R/S (caught by parse or signature), the tail (MBZ)."""
    data = real("azure-milan-v3-report.bin")
    verifier = Verifier(AMD, policy=CRYPTO_ONLY)
    cert = load_endorsement(real("azure-milan-v3-vcek.der"))
    assert verifier.verify(data, cert, now=NOW).exit_code == 0
    r_s_end = SIGNED_REGION_END + 2 * 72
    outcomes: dict[int, int] = {}
    for bit in range(REPORT_SIZE * 8):
        flipped = flip(data, bit)
        result = verifier.verify(flipped, cert, now=NOW)
        outcomes[bit] = result.exit_code
        # A flip the parser rejects is malformed (1); every flip that still parses is caught
        # by the signature (3).
        try:
            parse_report(flipped)
        except MalformedError:
            assert result.exit_code == 1, bit
        else:
            assert result.exit_code == 3, bit
        if bit // 8 in RESERVED_BYTES:
            assert result.exit_code == 1, bit
    assert len(outcomes) == 0x4A0 * 8 == 9472
    assert set(outcomes.values()) == {1, 3}
    # R and S are never parsed for meaning: all their flips reach the signature check.
    assert all(outcomes[bit] == 3 for bit in range(SIGNED_REGION_END * 8, r_s_end * 8))
    # The 368-byte tail after S must be zero.
    assert all(outcomes[bit] == 1 for bit in range(r_s_end * 8, REPORT_SIZE * 8))


FLIP_PAIRS = [
    ("gsg-milan-v2-debug-report.bin", "gsg-milan-v2-debug-vcek.der", NOW),
    ("virtee-milan-v2-report.bin", "virtee-milan-v2-vcek.der", NOW),
    (
        "trustee-milan-v2-idblock-provisional-report.bin",
        "trustee-milan-v2-idblock-provisional-vcek.der",
        NOW,
    ),
    ("azure-milan-v3-resigned-report.bin", "azure-milan-v3-vcek.der", NOW),
    (
        "aws-milan-v3-vlek-vmpl1-report.bin",
        "aws-milan-v3-vlek-vmpl1-vlek.der",
        dt.datetime(2025, 6, 1, tzinfo=dt.UTC),
    ),
    ("oak-genoa-v5-report.bin", "oak-genoa-v5-vcek.der", NOW),
    ("oak-turin-v5-report.bin", "oak-turin-v5-vcek.der", NOW),
]
FLIP_VERIFIER = Verifier(AMD, policy=CRYPTO_ONLY)


@settings(max_examples=300)
@given(pair=st.sampled_from(FLIP_PAIRS), bit=st.integers(0, (SIGNED_REGION_END + 144) * 8 - 1))
def test_bit_flips_of_other_real_reports_fail(pair: tuple[str, str, dt.datetime], bit: int) -> None:
    report, cert, now = pair
    data = real(report)
    assert FLIP_VERIFIER.verify(data, real(cert), now=now).exit_code == 0
    flipped = flip(data, bit)
    try:  # the same oracle as the exhaustive test above: parser rejects -> 1, else signature -> 3
        parse_report(flipped)
    except MalformedError:
        expected = 1
    else:
        expected = 3
    assert FLIP_VERIFIER.verify(flipped, real(cert), now=now).exit_code == expected


# -- simulated evidence ----------------------------------------------------------------


def test_simulated_evidence_verifies_only_with_its_root_pinned(
    sim: SimulatedAmd, pinned: TrustStore
) -> None:
    report = sim.sign_report(report_data=b"\x11" * 64, product_line=ProductLine.GENOA)
    bundle = sim.endorsement_pem(report).encode()
    rejected = verify_report(report, bundle, policy=Policy(), trust=AMD, now=SIM_NOW)
    assert rejected.exit_code == 2
    assert names(rejected.failed_checks) == ["endorsement.chain"]
    accepted = verify_report(report, bundle, policy=Policy(), trust=pinned, now=SIM_NOW)
    assert accepted.exit_code == 0, accepted.failed_checks


def test_pinning_another_root_does_not_trust_this_simulated_chain(sim: SimulatedAmd) -> None:
    other_key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ARK-Other-Simulated")])
    other_root = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(other_key.public_key())
        .serial_number(1)
        .not_valid_before(SIM_NOW - dt.timedelta(days=1))
        .not_valid_after(SIM_NOW + dt.timedelta(days=1))
        .sign(other_key, hashes.SHA384())
    )
    report = sim.sign_report(report_data=bytes(64))
    bundle = sim.endorsement_pem(report).encode()
    trust = AMD.with_simulated_root(other_root)
    result = verify_report(report, bundle, policy=Policy(), trust=trust, now=SIM_NOW)
    assert result.exit_code == 2
    assert names(result.failed_checks) == ["endorsement.chain"]


@pytest.mark.parametrize(
    ("not_before", "not_after", "word"),
    [
        (SIM_NOW - dt.timedelta(days=400), SIM_NOW - dt.timedelta(days=1), "expired"),
        (SIM_NOW + dt.timedelta(days=1), SIM_NOW + dt.timedelta(days=400), "not yet valid"),
    ],
    ids=["expired", "not-yet-valid"],
)
def test_certificate_validity_is_checked_at_now(
    sim: SimulatedAmd,
    pinned: TrustStore,
    not_before: dt.datetime,
    not_after: dt.datetime,
    word: str,
) -> None:
    report = sim.sign_report(report_data=bytes(64), chip_id=CHIP_A)
    leaf = sim.issue_endorsement(
        product_line=ProductLine.MILAN, chip_id=CHIP_A, not_before=not_before, not_after=not_after
    )
    result = verify_report(
        report, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 2
    assert word in result.failed_checks[0].detail


def test_a_vlek_issued_by_the_ask_is_untrusted(sim: SimulatedAmd, pinned: TrustStore) -> None:
    report = sim.sign_report(report_data=bytes(64), signer=SignerKind.VLEK)
    leaf = sim.issue_endorsement(
        product_line=ProductLine.MILAN, signer=SignerKind.VLEK, issued_by=SignerKind.VCEK
    )
    result = verify_report(
        report, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 2


def resign(
    sim: SimulatedAmd, report: AttestationReport, **key_args: object
) -> tuple[bytes, x509.Certificate]:
    """Sign ``report`` with the key of the certificate described by ``key_args``."""
    key = sim.endorsement_key(**key_args)  # type: ignore[arg-type]
    leaf = sim.issue_endorsement(**key_args)  # type: ignore[arg-type]
    return sign_with_key(report, key), leaf


def base(sim: SimulatedAmd, product: ProductLine = ProductLine.MILAN) -> AttestationReport:
    return parse_report(
        sim.sign_report(report_data=bytes(64), product_line=product, chip_id=CHIP_A)
    )


def mismatch(result_checks: Sequence[object]) -> list[str]:
    return names(result_checks)


def test_another_chips_certificate_fails_the_signature(
    sim: SimulatedAmd, pinned: TrustStore
) -> None:
    report = sim.sign_report(report_data=bytes(64), chip_id=CHIP_A)
    leaf = sim.issue_endorsement(product_line=ProductLine.MILAN, chip_id=CHIP_B)
    result = verify_report(
        report, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 3


def test_hwid_not_matching_chip_id_is_an_endorsement_mismatch(
    sim: SimulatedAmd, pinned: TrustStore
) -> None:
    report = base(sim)
    raw, leaf = resign(sim, report, product_line=ProductLine.MILAN, chip_id=CHIP_B)
    result = verify_report(
        raw, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 4
    assert names(result.failed_checks) == ["endorsement.chip-id"]
    assert result.failed_checks[0].detail == f"hwID {CHIP_B.hex()} != CHIP_ID {CHIP_A.hex()}"


def test_masked_chip_id_cannot_bind_a_vcek(sim: SimulatedAmd, pinned: TrustStore) -> None:
    report = dataclasses.replace(base(sim), chip_id=bytes(64))
    raw, leaf = resign(sim, report, product_line=ProductLine.MILAN, chip_id=CHIP_A)
    result = verify_report(
        raw, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 4
    assert "masked" in result.failed_checks[0].detail


def test_turin_chip_id_must_have_a_zero_tail(sim: SimulatedAmd, pinned: TrustStore) -> None:
    turin_chip = CHIP_A[:8] + bytes(56)
    good = parse_report(
        sim.sign_report(report_data=bytes(64), product_line=ProductLine.TURIN, chip_id=turin_chip)
    )
    raw_good, leaf = resign(sim, good, product_line=ProductLine.TURIN, chip_id=turin_chip)
    assert verify_report(
        raw_good, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    ).ok
    bad = dataclasses.replace(good, chip_id=turin_chip[:8] + b"\x01" + bytes(55))
    raw_bad, leaf = resign(sim, bad, product_line=ProductLine.TURIN, chip_id=turin_chip)
    result = verify_report(
        raw_bad, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 4
    assert names(result.failed_checks) == ["endorsement.chip-id"]


def test_certificate_tcb_must_equal_reported_tcb(sim: SimulatedAmd, pinned: TrustStore) -> None:
    report = base(sim)
    cert_tcb = report.tcb("reported")
    other = dataclasses.replace(cert_tcb, snp=cert_tcb.snp + 1)
    raw, leaf = resign(
        sim, report, product_line=ProductLine.MILAN, chip_id=CHIP_A, reported_tcb=other
    )
    result = verify_report(
        raw, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 4
    assert result.failed_checks[0].detail == (
        f"certificate TCB: snpSPL {cert_tcb.snp + 1} != REPORTED_TCB {cert_tcb.snp}"
    )


def test_another_product_line_certificate_is_an_endorsement_mismatch(
    sim: SimulatedAmd, pinned: TrustStore
) -> None:
    report = base(sim, ProductLine.GENOA)
    raw, leaf = resign(
        sim,
        report,
        product_line=ProductLine.MILAN,
        chip_id=CHIP_A,
        reported_tcb=report.reported_tcb,
    )
    result = verify_report(
        raw, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 4
    failed = result.failed_checks
    assert names(failed) == ["endorsement.product-line"]
    assert failed[0].detail == "report CPUID says Genoa but the certificate is for Milan"
    assert [c.ok for c in result.checks if c.name.startswith(("policy.", "workload."))] == []
    assert names(result.checks)[-2:] == ["policy", "workload"]


def test_other_signer_kind_is_an_endorsement_mismatch(
    sim: SimulatedAmd, pinned: TrustStore
) -> None:
    # SIGNING_KEY says VLEK but a VCEK's key signed the report.
    report = dataclasses.replace(base(sim), signing_key=1)
    raw, leaf = resign(sim, report, product_line=ProductLine.MILAN, chip_id=CHIP_A)
    result = verify_report(
        raw, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 4
    assert names(result.failed_checks) == ["endorsement.signer-kind"]
    assert result.failed_checks[0].detail == (
        "report SIGNING_KEY 1 (vlek) but the certificate is a VCEK"
    )


def test_unsigned_report_is_a_bad_signature(sim: SimulatedAmd, pinned: TrustStore) -> None:
    report = dataclasses.replace(base(sim), signing_key=7)
    raw, leaf = resign(sim, report, product_line=ProductLine.MILAN, chip_id=CHIP_A)
    result = verify_report(
        raw, chain(sim, leaf, SignerKind.VCEK), policy=Policy(), trust=pinned, now=SIM_NOW
    )
    assert result.exit_code == 3
    assert "unsigned" in result.failed_checks[0].detail


def test_struct_version_and_stray_spls_are_checked() -> None:
    report = parse_report(real("oak-genoa-v5-report.bin"))
    cert = load_endorsement(real("oak-genoa-v5-vcek.der"))
    assert all(c.ok for c in endorsement_checks(report, cert))
    wrong_struct = dataclasses.replace(cert, struct_version=1)
    checks = {c.name: c for c in endorsement_checks(report, wrong_struct)}
    assert checks["endorsement.struct-version"].ok is False
    assert checks["endorsement.struct-version"].detail == "structVersion 1 but Genoa needs 0"
    stray = dataclasses.replace(cert, spls={**cert.spls, "fmc": 0})
    checks = {c.name: c for c in endorsement_checks(report, stray)}
    assert checks["endorsement.tcb"].detail == (
        "certificate TCB: fmcSPL 0 has no place in a Genoa TCB"
    )
    missing = dataclasses.replace(cert, spls={k: v for k, v in cert.spls.items() if k != "ucode"})
    checks = {c.name: c for c in endorsement_checks(report, missing)}
    assert checks["endorsement.tcb"].detail == "certificate TCB: ucodeSPL missing"
    turin = parse_report(real("oak-turin-v5-report.bin"))
    turin_cert = load_endorsement(real("oak-turin-v5-vcek.der"))
    no_fmc = dataclasses.replace(
        turin_cert, spls={k: v for k, v in turin_cert.spls.items() if k != "fmc"}
    )
    checks = {c.name: c for c in endorsement_checks(turin, no_fmc)}
    assert checks["endorsement.tcb"].detail == "certificate TCB: fmcSPL missing"
    vlek_with_hwid = dataclasses.replace(cert, signer_kind=SignerKind.VLEK)
    checks = {c.name: c for c in endorsement_checks(report, vlek_with_hwid)}
    assert checks["endorsement.chip-id"].detail == "a VLEK must not carry a hwID"


def test_verifier_anchors_cannot_be_swapped_under_its_chain_memo(pinned: TrustStore) -> None:
    """Chain verdicts are memoized per Verifier: its trust store, policy and CRL are fixed."""
    verifier = Verifier(AMD, policy=CRYPTO_ONLY)
    for attribute, value in (("trust", pinned), ("policy", Policy()), ("crl", b"")):
        with pytest.raises(
            AttributeError, match=f"^property '{attribute}' of 'Verifier' object has no setter$"
        ):
            setattr(verifier, attribute, value)
    assert verifier.trust is AMD


def test_the_result_carries_the_chain_that_verified_and_its_platform(pinned: TrustStore) -> None:
    result = verify_report(
        real("oak-genoa-v5-report.bin"),
        real("oak-genoa-v5-vcek.der"),
        policy=Policy(),
        trust=AMD,
        now=NOW,
    )
    assert result.chain is not None
    assert result.chain.ark is AMD.ark(ProductLine.GENOA)
    assert result.chain.intermediate is AMD.intermediate(ProductLine.GENOA, SignerKind.VCEK)
    assert result.platform == "sev-snp"
    unverified = verify_report(
        real("azure-milan-v3-report.bin"),
        real("oak-genoa-v5-vcek.der"),
        policy=Policy(),
        trust=AMD,
        now=NOW,
    )
    assert (unverified.chain, unverified.platform) == (None, None)


def test_verify_endorsement_is_stages_1_to_4_only() -> None:
    """The verifier's public "does this certificate endorse this report" (what KDS uses)."""
    # A debug report: the secure-default policy refuses it, but its VCEK endorses it.
    report, vcek = real("gsg-milan-v2-debug-report.bin"), real("gsg-milan-v2-debug-vcek.der")
    assert verify_report(report, vcek, policy=Policy(), trust=AMD, now=NOW).exit_code == code(
        "platform-policy"
    )
    endorsed = verify_endorsement(report, vcek, trust=AMD, now=NOW)
    assert endorsed.ok
    assert endorsed.exit_code == 0
    assert {c.failure_class for c in endorsed.checks} == {
        FailureClass.MALFORMED,
        FailureClass.UNTRUSTED_CHAIN,
        FailureClass.BAD_SIGNATURE,
        FailureClass.ENDORSEMENT_MISMATCH,
    }
    assert endorsed.chain is not None
    assert endorsed.chain.ark is AMD.ark(ProductLine.MILAN)
    # Another chip's VCEK chains to AMD but did not sign this report.
    other = verify_endorsement(report, real("azure-milan-v3-vcek.der"), trust=AMD, now=NOW)
    assert other.failure_class is FailureClass.BAD_SIGNATURE
    assert [c.name for c in other.failed_checks] == ["report.signature"]
