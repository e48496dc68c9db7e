"""az-snp-vtpm verification against the five real evidence sets: each verifies with the nonce
upstream expects, each of upstream's negative mutations fails with its class, and no single
changed byte of an HCL report or quote ever verifies."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attestation.abi.tpm import QuoteSignature, parse_quote
from attestation.endorsement.trust import TrustStore
from attestation.errors import FailureClass
from attestation.exit_codes import EXIT_CODES
from attestation.verify.az_vtpm import (
    INIT_DATA_PCR,
    VtpmEvidence,
    check_vtpm_evidence,
    pcr8_for_init_data,
)
from attestation.verify.checks import VerificationResult
from attestation.verify.policy import Policy
from attestation.verify.verifier import Verifier
from tests.azure_sets import NOW, SETS, EvidenceSet, load

#: The default policy, except for hcl-report.bin's provisional firmware (COMMITTED < CURRENT).
POLICY = Policy(allow_provisional_firmware=True)
VERIFIER_TRUST = TrustStore.amd()


def verify(
    evidence_set: EvidenceSet,
    *,
    evidence: VtpmEvidence | None = None,
    nonce: bytes | None = None,
    init_data: bytes | None = None,
    policy: Policy = POLICY,
) -> VerificationResult:
    return check_vtpm_evidence(
        evidence or evidence_set.evidence,
        evidence_set.endorsement,
        verifier=Verifier(VERIFIER_TRUST, policy=policy),
        nonce=evidence_set.nonce if nonce is None else nonce,
        now=NOW,
        init_data_digest=init_data,
    ).result()


def failed(result: VerificationResult) -> list[str]:
    return [check.name for check in result.failed_checks]


@pytest.mark.parametrize("name", SETS)
def test_every_real_set_verifies_with_upstreams_nonce(name: str) -> None:
    result = verify(load(name))
    assert result.exit_code == 0, result.summary()
    names = [check.name for check in result.checks]
    assert names[:2] == ["hcl.parse", "quote.parse"]
    assert names[-7:] == [
        "hcl.vmpl",
        "hcl.ak-binding",
        "quote.signature",
        "quote.pcr-digest",
        "quote.nonce",
        "hcl.user-data",
        "workload.init-data",
    ]
    assert "report.signature" in names
    assert "endorsement.chip-id" in names
    assert result.platform == "sev-snp"


def test_default_policy_refuses_provisional_firmware_of_hcl_report_bin() -> None:
    result = verify(load("hcl-report.bin"), policy=Policy())
    assert result.exit_code == EXIT_CODES[FailureClass.PLATFORM_POLICY]
    assert failed(result) == ["policy.provisional-firmware"]


def test_the_nonces_are_the_quoted_ones() -> None:
    v2 = load("evidence-v2.json")
    assert v2.nonce.hex().startswith("982f5c6e")
    assert v2.nonce.hex().endswith("f819ef")
    genoa = load("evidence-genoa.json")
    assert genoa.nonce.hex().startswith("0218488b")
    assert genoa.nonce.hex().endswith("950f")
    assert parse_quote(genoa.evidence.quote).extra_data == genoa.nonce


def _hcl(evidence_set: EvidenceSet, offset: int, change: int | None = None) -> VtpmEvidence:
    data = bytearray(evidence_set.evidence.hcl_report)
    data[offset] = 0 if change is None else (data[offset] + change) % 256
    return dataclasses.replace(evidence_set.evidence, hcl_report=bytes(data))


BIN = load("hcl-report.bin")


def test_upstream_snp_version_change_breaks_the_report_signature() -> None:
    # 0x1A6 = 0x20 + 0x186: REPORTED_TCB's SNP SPL (upstream: "SNP version mismatch"). The
    # report's signature covers it, so the report is no longer authentic.
    result = verify(BIN, evidence=_hcl(BIN, 0x1A6))
    assert result.exit_code == EXIT_CODES[FailureClass.BAD_SIGNATURE]
    assert failed(result) == ["report.signature"]


def test_upstream_variable_data_change_breaks_the_ak_binding() -> None:
    result = verify(BIN, evidence=_hcl(BIN, 0x6E0, change=1))
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    assert failed(result) == ["hcl.ak-binding"]
    assert result.checks[-1].ok is None  # nothing rests on an unbound AK


def test_upstream_broken_jwk_is_malformed() -> None:
    result = verify(BIN, evidence=_hcl(BIN, 0x540))
    assert result.exit_code == EXIT_CODES[FailureClass.MALFORMED]
    assert failed(result) == ["hcl.parse"]


def test_upstream_quote_signature_bit_flip_is_a_bad_signature() -> None:
    signature = bytearray(BIN.evidence.signature.signature)
    signature[0] ^= 1
    evidence = dataclasses.replace(BIN.evidence, signature=QuoteSignature(bytes(signature)))
    result = verify(BIN, evidence=evidence)
    assert result.exit_code == EXIT_CODES[FailureClass.BAD_SIGNATURE]
    assert failed(result) == ["quote.signature"]


def test_upstream_pcr_bit_flip_breaks_the_pcr_digest() -> None:
    pcrs = list(BIN.evidence.pcrs)
    pcrs[0] = bytes([pcrs[0][0] ^ 1]) + pcrs[0][1:]
    result = verify(BIN, evidence=dataclasses.replace(BIN.evidence, pcrs=tuple(pcrs)))
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    assert failed(result) == ["quote.pcr-digest"]


@pytest.mark.parametrize("name", SETS)
def test_upstream_reversed_nonce_is_binding(name: str) -> None:
    evidence_set = load(name)
    result = verify(evidence_set, nonce=evidence_set.nonce[::-1])
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    expected = ["quote.nonce", "hcl.user-data"] if name == "evidence-v2.json" else ["quote.nonce"]
    assert failed(result) == expected


def test_upstream_v2_user_data_must_start_with_the_nonce() -> None:
    v2 = load("evidence-v2.json")
    result = verify(v2, nonce=bytes.fromhex("123abc"))
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    assert failed(result) == ["quote.nonce", "hcl.user-data"]
    # v1 evidence does not carry the nonce in user-data: only the quote binds it.
    v1 = load("evidence-v1.json")
    assert failed(verify(v1, nonce=b"123abc")) == ["quote.nonce"]


# Upstream's init-data test value: PCR 8 of the Milan sets is zero, so it overrides PCR 8.
INIT_DATA = bytes.fromhex("8505e4e2b1ae5ac7d8bd6a3b0c5a17aa37c0ac85cd6f3ab0fbfb1a0fdd127781")


def test_init_data_pin_holds_for_pcr8_one_extend_from_zero() -> None:
    assert pcr8_for_init_data(INIT_DATA) == hashlib.sha256(bytes(32) + INIT_DATA).digest()
    genoa = load("evidence-genoa.json")
    pcr8 = genoa.evidence.pcrs[INIT_DATA_PCR]
    assert pcr8 != bytes(32)
    # Genoa's PCR 8 is not that of this digest: a pin fails with workload-identity.
    result = verify(genoa, init_data=INIT_DATA)
    assert result.exit_code == EXIT_CODES[FailureClass.WORKLOAD_IDENTITY]
    assert failed(result) == ["workload.init-data"]
    # The Milan sets' PCR 8 is zero: no init-data digest extends to it.
    milan = verify(load("evidence-v1.json"), init_data=INIT_DATA)
    assert failed(milan) == ["workload.init-data"]
    assert "PCR 8 is " + "00" * 32 in milan.failed_checks[0].detail


def test_unpinned_init_data_passes_and_says_so() -> None:
    result = verify(load("evidence-genoa.json"))
    assert result.checks[-1].detail == "no init-data pinned: PCR 8 is not checked"


def test_pcr8_changed_without_the_quote_breaks_the_digest_not_the_pin() -> None:
    evidence_set = load("evidence-v1.json")
    pcrs = list(evidence_set.evidence.pcrs)
    pcrs[INIT_DATA_PCR] = pcr8_for_init_data(INIT_DATA)  # upstream's override
    evidence = dataclasses.replace(evidence_set.evidence, pcrs=tuple(pcrs))
    result = verify(evidence_set, evidence=evidence, init_data=INIT_DATA)
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    assert failed(result) == ["quote.pcr-digest"]
    assert result.checks[-1].ok is None


def test_changed_vmpl_breaks_the_report_signature() -> None:
    # VMPL is inside the signed report: a changed VMPL breaks the signature first.
    result = verify(BIN, evidence=_hcl(BIN, 0x20 + 0x30, change=1))
    assert result.exit_code == EXIT_CODES[FailureClass.BAD_SIGNATURE]
    assert "report.signature" in failed(result)


def test_quote_and_pcr_count_must_agree() -> None:
    evidence = dataclasses.replace(BIN.evidence, pcrs=BIN.evidence.pcrs[:23])
    result = verify(BIN, evidence=evidence)
    assert result.exit_code == EXIT_CODES[FailureClass.MALFORMED]
    assert failed(result) == ["quote.parse"]
    assert "23 PCR values, the quote selects 24" in result.failed_checks[0].detail


def _sweep(evidence_set: EvidenceSet, field: str) -> None:
    verifier = Verifier(VERIFIER_TRUST, policy=POLICY)
    original: bytes = getattr(evidence_set.evidence, field)
    for offset in range(len(original)):
        data = bytearray(original)
        data[offset] ^= 1 << (offset % 8)
        evidence = (
            dataclasses.replace(evidence_set.evidence, hcl_report=bytes(data))
            if field == "hcl_report"
            else dataclasses.replace(evidence_set.evidence, quote=bytes(data))
        )
        result = check_vtpm_evidence(
            evidence,
            evidence_set.endorsement,
            verifier=verifier,
            nonce=evidence_set.nonce,
            now=NOW,
        ).result()
        assert result.exit_code != 0, f"{field} byte {offset:#x} changed and still verified"


@pytest.mark.parametrize("name", SETS)
def test_no_changed_byte_of_the_hcl_report_verifies(name: str) -> None:
    _sweep(load(name), "hcl_report")


@pytest.mark.parametrize("name", SETS)
def test_no_changed_byte_of_the_quote_verifies(name: str) -> None:
    _sweep(load(name), "quote")


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.integers(0, 2599), st.integers(0, 7))
def test_no_flipped_bit_of_the_v2_hcl_report_verifies(offset: int, bit: int) -> None:
    v2 = load("evidence-v2.json")
    data = bytearray(v2.evidence.hcl_report)
    data[offset] ^= 1 << bit
    result = verify(v2, evidence=dataclasses.replace(v2.evidence, hcl_report=bytes(data)))
    assert result.exit_code != 0
