"""Envelopes with az-snp-vtpm evidence: a simulated Azure VM's HCL report and vTPM quote verify
when the quote carries the binding's hash and the tenant pins the simulated root, and fail with
their class when the nonce, PCR 8, the AK or the pin is not what it must be."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from attestation.abi.hcl import parse_hcl_report
from attestation.abi.tpm import QuoteSignature, serialize_signature
from attestation.envelope.binding import report_data_for
from attestation.envelope.expected import load_expected
from attestation.envelope.model import (
    API_VERSION,
    ENVELOPE_KIND,
    Binding,
    Envelope,
    Evidence,
    VtpmQuote,
    parse_envelope,
)
from attestation.envelope.verification import verify_envelope
from attestation.errors import FailureClass
from attestation.exit_codes import EXIT_CODES
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd.vtpm import (
    SimulatedVtpmEvidence,
    hcl_report,
    new_attestation_key,
    simulated_vtpm_evidence,
)
from attestation.verify.checks import VerificationResult
from tests.attestation.envelope.test_envelope_verify import (
    CORPUS,
    EVALUATION,
    RUN_ID,
    make_binding,
    sim_envelope,
    sim_now,
)

INIT_DATA = hashlib.sha256(b'version = "0.1.0"\nalgorithm = "sha256"\n').digest()
AK = new_attestation_key()


def az_envelope(
    evidence: SimulatedVtpmEvidence, binding: Binding, *, report_data: bytes | None = None
) -> bytes:
    hcl = parse_hcl_report(evidence.hcl_report)
    envelope = Envelope(
        api_version=API_VERSION,
        kind=ENVELOPE_KIND,
        run_id=binding.run_id,
        tenant=binding.tenant,
        binding=binding,
        report_data=(report_data or report_data_for(binding)).hex(),
        measurement=hcl.snp_report.measurement.hex(),
        host_data=hcl.snp_report.host_data.hex(),
        platform="simulated",
        evidence=Evidence(
            report=base64.b64encode(evidence.hcl_report).decode(),
            provider="coco-aa",
            cert_chain=evidence.cert_chain_pem,
            kind="az-snp-vtpm",
            vtpm=VtpmQuote(
                quote=base64.b64encode(evidence.quote).decode(),
                signature=base64.b64encode(
                    serialize_signature(QuoteSignature(evidence.signature))
                ).decode(),
                pcrs=tuple(pcr.hex() for pcr in evidence.pcrs),
                format_version=evidence.format_version,
            ),
        ),
    )
    return json.dumps(envelope.to_json_dict()).encode()


def expected_for(sim: SimulatedAmd, **extra: Any) -> bytes:
    document = {
        "runId": RUN_ID,
        "corpusChecksum": CORPUS,
        "evaluationDigest": EVALUATION,
        "simulatedRoots": [sim.root_fingerprint],
        "initDataDigest": INIT_DATA.hex(),
        **extra,
    }
    return json.dumps(document).encode()


def verify(envelope: bytes, expected: bytes) -> VerificationResult:
    return verify_envelope(envelope, load_expected(expected), now=sim_now())


def failed(result: VerificationResult) -> list[str]:
    return [check.name for check in result.failed_checks]


@pytest.fixture(scope="module")
def binding() -> Binding:
    return make_binding()


@pytest.mark.parametrize("version", [1, 2])
def test_simulated_azure_envelope_verifies(
    simulated_amd: SimulatedAmd, binding: Binding, version: int
) -> None:
    evidence = simulated_vtpm_evidence(
        simulated_amd,
        nonce=report_data_for(binding),
        ak=AK,
        init_data_digest=INIT_DATA,
        format_version=version,
    )
    result = verify(az_envelope(evidence, binding), expected_for(simulated_amd))
    assert result.exit_code == 0, result.summary()
    names = [check.name for check in result.checks]
    assert names.index("quote.nonce") < names.index("binding.report-data")
    assert result.simulated
    init = next(check for check in result.checks if check.name == "workload.init-data")
    assert init.detail == f"PCR 8 = extend(0, {INIT_DATA.hex()})"


def test_the_envelope_round_trips_through_the_schema(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    evidence = simulated_vtpm_evidence(simulated_amd, nonce=report_data_for(binding), ak=AK)
    envelope = parse_envelope(az_envelope(evidence, binding))
    assert envelope.evidence.kind == "az-snp-vtpm"
    assert envelope.evidence.vtpm is not None
    assert len(envelope.evidence.vtpm.pcrs) == 24


def test_without_the_pinned_simulated_root_it_is_untrusted(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    evidence = simulated_vtpm_evidence(
        simulated_amd, nonce=report_data_for(binding), ak=AK, init_data_digest=INIT_DATA
    )
    expected = json.loads(expected_for(simulated_amd))
    del expected["simulatedRoots"]
    result = verify(az_envelope(evidence, binding), json.dumps(expected).encode())
    assert result.exit_code == EXIT_CODES[FailureClass.UNTRUSTED_CHAIN]
    assert failed(result) == ["endorsement.chain"]


def test_a_quote_over_another_nonce_is_binding(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    other = make_binding(run_id="run-2")
    evidence = simulated_vtpm_evidence(
        simulated_amd, nonce=report_data_for(other), ak=AK, init_data_digest=INIT_DATA
    )
    result = verify(az_envelope(evidence, binding), expected_for(simulated_amd))
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    assert failed(result) == ["quote.nonce", "binding.report-data", "binding.envelope-fields"]


def test_a_v2_user_data_of_another_nonce_is_binding(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    genuine = simulated_vtpm_evidence(
        simulated_amd, nonce=report_data_for(binding), ak=AK, format_version=2
    )
    # A v2 HCL report of another run's nonce, with this run's quote: user-data gives it away.
    stale = simulated_vtpm_evidence(
        simulated_amd,
        nonce=report_data_for(make_binding(run_id="run-2")),
        ak=AK,
        format_version=2,
    )
    mixed = dataclasses.replace(genuine, hcl_report=stale.hcl_report)
    result = verify(az_envelope(mixed, binding), expected_for(simulated_amd, initDataDigest=None))
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    assert failed(result) == ["hcl.user-data"]


def test_pcr8_of_other_init_data_is_workload_identity(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    evidence = simulated_vtpm_evidence(
        simulated_amd,
        nonce=report_data_for(binding),
        ak=AK,
        init_data_digest=hashlib.sha256(b"another agent policy").digest(),
    )
    result = verify(az_envelope(evidence, binding), expected_for(simulated_amd))
    assert result.exit_code == EXIT_CODES[FailureClass.WORKLOAD_IDENTITY]
    assert failed(result) == ["workload.init-data"]


def test_pcr8_changed_after_the_quote_is_binding(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    evidence = simulated_vtpm_evidence(simulated_amd, nonce=report_data_for(binding), ak=AK)
    pcrs = list(evidence.pcrs)
    pcrs[8] = hashlib.sha256(bytes(32) + INIT_DATA).digest()  # what the pin wants
    changed = dataclasses.replace(evidence, pcrs=tuple(pcrs))
    result = verify(az_envelope(changed, binding), expected_for(simulated_amd))
    assert result.exit_code == EXIT_CODES[FailureClass.BINDING]
    assert failed(result) == ["quote.pcr-digest"]


def test_a_quote_signed_by_another_ak_is_a_bad_signature(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    evidence = simulated_vtpm_evidence(
        simulated_amd, nonce=report_data_for(binding), ak=AK, init_data_digest=INIT_DATA
    )
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = dataclasses.replace(
        evidence, signature=other.sign(evidence.quote, padding.PKCS1v15(), hashes.SHA256())
    )
    result = verify(az_envelope(forged, binding), expected_for(simulated_amd))
    assert result.exit_code == EXIT_CODES[FailureClass.BAD_SIGNATURE]
    assert failed(result) == ["quote.signature"]


def test_a_vmpl_other_than_zero_is_platform_policy(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    evidence = simulated_vtpm_evidence(simulated_amd, nonce=report_data_for(binding), ak=AK)
    at_vmpl2 = dataclasses.replace(evidence, hcl_report=hcl_report(simulated_amd, AK, vmpl=2))
    result = verify(
        az_envelope(at_vmpl2, binding),
        expected_for(simulated_amd, initDataDigest=None, allowedVmpl=[0, 2]),
    )
    assert result.exit_code == EXIT_CODES[FailureClass.PLATFORM_POLICY]
    assert failed(result) == ["hcl.vmpl"]


def test_snp_evidence_pins_init_data_through_host_data(
    simulated_amd: SimulatedAmd, binding: Binding
) -> None:
    envelope = json.dumps(sim_envelope(simulated_amd, binding=binding)).encode()
    result = verify(envelope, expected_for(simulated_amd))
    assert result.exit_code == EXIT_CODES[FailureClass.WORKLOAD_IDENTITY]
    assert failed(result) == ["workload.init-data"]
    assert "HOST_DATA " + "00" * 32 in result.failed_checks[0].detail


def test_vtpm_without_its_kind_is_malformed(simulated_amd: SimulatedAmd, binding: Binding) -> None:
    assert "kind" not in json.loads(json.dumps(sim_envelope(simulated_amd)))["evidence"]
    evidence = simulated_vtpm_evidence(simulated_amd, nonce=report_data_for(binding), ak=AK)
    document = json.loads(az_envelope(evidence, binding))
    del document["evidence"]["kind"]
    result = verify(json.dumps(document).encode(), expected_for(simulated_amd))
    assert result.exit_code == EXIT_CODES[FailureClass.MALFORMED]
    assert "evidence.vtpm is present exactly when evidence.kind is az-snp-vtpm" in (
        result.failed_checks[0].detail
    )
