"""Envelope mode: binding (7) under both REPORT_DATA encodings, expectations (8), simulatedRoots,
the platform label, and the CLI's envelope contract. Envelopes are built here from the
attestation package alone (simulated signer + models), so every field can be set exactly."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from attestation import cli
from attestation.abi.product import ProductLine
from attestation.abi.report import AttestationReport, parse_report
from attestation.contracts import MAX_ENVELOPE_BYTES, MAX_ENVELOPE_JSON_DEPTH
from attestation.endorsement.trust import AmdRole, TrustStore, fingerprint
from attestation.envelope import verification
from attestation.envelope.binding import report_data_for, result_digest
from attestation.envelope.expected import ExpectedValues, load_expected
from attestation.envelope.model import (
    API_VERSION,
    ENVELOPE_KIND,
    REPORT_DATA_ENCODINGS,
    Binding,
    Envelope,
    Evidence,
    ReportDataEncoding,
    ShardPosition,
    Workload,
)
from attestation.envelope.verification import JUDGED_CHECK, platform_of_chain, verify_envelope
from attestation.errors import FailureClass, MalformedError
from attestation.simulated_amd import SimulatedAmd
from attestation.verify.checks import VerificationResult

REAL = Path(__file__).parents[2] / "assets" / "real"
REAL_NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
RESULT: dict[str, Any] = {"metrics": {"A1-1": {"recall_points": "91.500"}}, "marks": {"M1": "met"}}
RUN_ID = "run-1"
TENANT = "acme"
CORPUS = "sha256:" + "a" * 64
#: The evaluation digest of make_binding().
EVALUATION = "sha256:" + "b" * 64
EXPECTATION_CHECKS = [
    "expectation.run-id",
    "expectation.corpus-checksum",
    "expectation.tenant",
    "expectation.workload",
    "expectation.result-digest",
    "expectation.evaluation-digest",
    "expectation.image-digest",
    "expectation.nonce",
    "expectation.shard",
]


def sim_now() -> dt.datetime:
    """Simulated certificates are issued at the real current time (valid from a day before)."""
    return dt.datetime.now(dt.UTC)


def make_binding(**changes: Any) -> Binding:
    fields: dict[str, Any] = {
        "run_id": RUN_ID,
        "tenant": TENANT,
        "corpus_checksum": CORPUS,
        "evaluation_digest": EVALUATION,
        "workload": Workload(
            name="attested-replay", version="0.1.0", code_digest="sha256:" + "c" * 64
        ),
        "result_digest": result_digest(RESULT),
    }
    fields.update(changes)
    return Binding(**fields)


def sim_envelope(
    sim: SimulatedAmd,
    *,
    encoding: ReportDataEncoding = "sha512",
    signed_encoding: ReportDataEncoding | None = None,
    binding: Binding | None = None,
    with_ark: bool = True,
) -> dict[str, Any]:
    """A genuine simulated envelope as JSON; ``signed_encoding`` lets the report carry
    REPORT_DATA of another encoding than the one the envelope declares."""
    binding = binding or make_binding()
    report = sim.sign_report(
        report_data=report_data_for(binding, signed_encoding or encoding),
        product_line=ProductLine.GENOA,
    )
    chain = sim.endorsement_pem(report)
    if not with_ark:
        chain = "".join(
            c.public_bytes(serialization.Encoding.PEM).decode()
            for c in x509.load_pem_x509_certificates(chain.encode())[:2]
        )
    parsed = parse_report(report)
    envelope = Envelope(
        api_version=API_VERSION,
        kind=ENVELOPE_KIND,
        run_id=binding.run_id,
        tenant=binding.tenant,
        binding=binding,
        report_data=parsed.report_data.hex(),
        measurement=parsed.measurement.hex(),
        host_data=parsed.host_data.hex(),
        platform="simulated",
        evidence=Evidence(
            report=base64.b64encode(report).decode(),
            provider="simulated",
            cert_chain=chain,
            report_data_encoding=encoding,
        ),
        result=RESULT,
    )
    return envelope.to_json_dict()


def expected(**document: Any) -> ExpectedValues:
    """Expected values through the real parser (camelCase keys)."""
    base: dict[str, Any] = {"runId": RUN_ID, "corpusChecksum": CORPUS}
    base.update(document)
    return load_expected(json.dumps(base).encode())


def pinned(sim: SimulatedAmd, **document: Any) -> ExpectedValues:
    """The file a tenant writes for sim_envelope(): the simulated root and, as
    ``expected --corpus`` pins it, the evaluation digest."""
    return expected(
        **{"simulatedRoots": [sim.root_fingerprint], "evaluationDigest": EVALUATION, **document}
    )


def verify(
    envelope: dict[str, Any] | bytes, values: ExpectedValues, **kw: Any
) -> VerificationResult:
    data = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
    return verify_envelope(data, values, now=kw.pop("now", None) or sim_now(), **kw)


def by_name(result: VerificationResult) -> dict[str, Any]:
    return {check.name: check for check in result.checks}


@pytest.fixture
def sim(simulated_amd: SimulatedAmd) -> SimulatedAmd:
    return simulated_amd


# -- binding under both REPORT_DATA encodings --------------------------------------------


@pytest.mark.parametrize("encoding", REPORT_DATA_ENCODINGS)
def test_genuine_envelope_verifies_under_each_encoding(
    sim: SimulatedAmd, encoding: ReportDataEncoding
) -> None:
    result = verify(sim_envelope(sim, encoding=encoding), pinned(sim, tenant=TENANT))
    assert result.exit_code == 0
    assert by_name(result)["binding.report-data"].detail == (
        f"REPORT_DATA = {encoding} of the canonical binding"
    )
    assert all(check.ok is True for check in result.checks)


def test_sha256_hex_report_data_is_the_ascii_hex_digest(sim: SimulatedAmd) -> None:
    envelope = sim_envelope(sim, encoding="sha256-hex")
    report = parse_report(base64.b64decode(envelope["evidence"]["report"]))
    digest = make_binding().canonical_bytes()
    assert report.report_data == hashlib.sha256(digest).hexdigest().encode("ascii")


@pytest.mark.parametrize(
    ("declared", "signed"), [("sha512", "sha256-hex"), ("sha256-hex", "sha512")]
)
def test_declared_encoding_must_be_the_signed_one(
    sim: SimulatedAmd, declared: ReportDataEncoding, signed: ReportDataEncoding
) -> None:
    envelope = sim_envelope(sim, encoding=declared, signed_encoding=signed)
    result = verify(envelope, pinned(sim))
    assert result.exit_code == 7
    assert [c.name for c in result.failed_checks] == ["binding.report-data"]
    assert f"is not the {declared} binding of this envelope" in result.failed_checks[0].detail


@pytest.mark.parametrize("encoding", REPORT_DATA_ENCODINGS)
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("runId", "run-2"),
        ("tenant", "globex"),
        ("corpusChecksum", "sha256:" + "d" * 64),
        ("evaluationDigest", "sha256:" + "e" * 64),
        ("resultDigest", "sha256:" + "f" * 64),
        ("nonce", "added"),
    ],
)
def test_a_changed_binding_fails_and_expectations_never_run(
    sim: SimulatedAmd, encoding: ReportDataEncoding, key: str, value: str
) -> None:
    """The tenant expects exactly the forged values: the binding must still stop it (7)."""
    envelope = sim_envelope(sim, encoding=encoding)
    envelope["binding"][key] = value
    if key in ("runId", "tenant"):  # keep the convenience copies consistent with the forgery
        envelope[key] = value
    forged = {k: v for k, v in envelope["binding"].items() if k in ("runId", "corpusChecksum")}
    result = verify(envelope, pinned(sim, **forged))
    assert result.exit_code == 7
    assert result.failure_class is FailureClass.BINDING
    checks = by_name(result)
    assert checks["binding.report-data"].ok is False
    for name in EXPECTATION_CHECKS:
        assert checks[name].ok is None, name
        assert checks[name].detail == "not run: the binding does not hold"


def test_expectations_do_not_run_when_only_the_result_digest_fails(sim: SimulatedAmd) -> None:
    envelope = sim_envelope(sim)
    envelope["result"]["marks"]["M1"] = "missed"
    result = verify(envelope, pinned(sim))
    assert result.exit_code == 7
    assert [c.name for c in result.failed_checks] == ["binding.result-digest"]
    assert all(by_name(result)[name].ok is None for name in EXPECTATION_CHECKS)


@pytest.mark.parametrize(
    ("key", "value", "claim"),
    [
        ("reportData", "00" * 64, "reportData says"),
        ("measurement", "ab" * 48, "measurement says"),
        ("hostData", "cd" * 32, "hostData says"),
        ("runId", "run-2", "runId says 'run-2'"),
        ("tenant", "globex", "tenant says 'globex'"),
        ("platform", "sev-snp", "platform says 'sev-snp' but the evidence says 'simulated'"),
    ],
)
def test_convenience_fields_must_equal_the_evidence(
    sim: SimulatedAmd, key: str, value: str, claim: str
) -> None:
    envelope = sim_envelope(sim)
    envelope[key] = value
    result = verify(envelope, pinned(sim))
    assert result.exit_code == 7
    assert [c.name for c in result.failed_checks] == ["binding.envelope-fields"]
    assert claim in result.failed_checks[0].detail


def test_envelope_without_result_binds_only_the_digest(sim: SimulatedAmd) -> None:
    envelope = sim_envelope(sim)
    del envelope["result"]
    assert verify(envelope, pinned(sim)).exit_code == 0
    wrong = pinned(sim, resultDigest="sha256:" + "9" * 64)
    result = verify(envelope, wrong)
    assert result.exit_code == 8
    assert [c.name for c in result.failed_checks] == ["expectation.result-digest"]


@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("runId", "run-9", "expectation.run-id"),
        ("corpusChecksum", "sha256:" + "0" * 64, "expectation.corpus-checksum"),
        ("tenant", "globex", "expectation.tenant"),
        ("workloadDigest", "sha256:" + "0" * 64, "expectation.workload"),
        ("resultDigest", "sha256:" + "0" * 64, "expectation.result-digest"),
        ("evaluationDigest", "sha256:" + "0" * 64, "expectation.evaluation-digest"),
        # The binding of sim_envelope has no imageDigest: pinning one must fail, not pass.
        ("imageDigest", "sha256:" + "0" * 64, "expectation.image-digest"),
    ],
)
def test_each_expectation_fails_with_class_8(
    sim: SimulatedAmd, key: str, value: str, check: str
) -> None:
    result = verify(sim_envelope(sim), pinned(sim, **{key: value}))
    assert result.exit_code == 8
    assert [c.name for c in result.failed_checks] == [check]


def test_workload_digest_expectation_is_the_digest_of_the_workload_object(
    sim: SimulatedAmd,
) -> None:
    digest = make_binding().workload.digest
    assert verify(sim_envelope(sim), pinned(sim, workloadDigest=digest)).exit_code == 0


# -- simulatedRoots ---------------------------------------------------------------------


def test_simulated_evidence_needs_its_root_listed(sim: SimulatedAmd) -> None:
    result = verify(sim_envelope(sim), expected())
    assert result.exit_code == 2
    detail = by_name(result)["endorsement.chain"].detail
    assert "simulatedRoots" in detail
    assert all(by_name(result)[name].ok is None for name in EXPECTATION_CHECKS)


def test_listing_another_root_does_not_trust_this_one(sim: SimulatedAmd) -> None:
    result = verify(sim_envelope(sim), expected(simulatedRoots=["sha256:" + "7" * 64]))
    assert result.exit_code == 2


def test_a_listed_root_must_be_carried_in_the_envelope(sim: SimulatedAmd) -> None:
    result = verify(sim_envelope(sim, with_ark=False), pinned(sim))
    assert result.exit_code == 2


def test_listing_an_amd_certificate_as_simulated_is_ignored(sim: SimulatedAmd) -> None:
    """An AMD ARK appended to the chain and listed as simulated does not become a root."""
    amd_ark = TrustStore.amd().amd_certificates()[ProductLine.GENOA, AmdRole.ARK]
    envelope = sim_envelope(sim, with_ark=False)
    envelope["evidence"]["certChain"] += amd_ark.public_bytes(serialization.Encoding.PEM).decode()
    result = verify(envelope, expected(simulatedRoots=[fingerprint(amd_ark)]))
    assert result.exit_code == 2


# -- the platform label ------------------------------------------------------------------


def real_chain(report: str, cert: str, line: ProductLine) -> tuple[bytes, str]:
    """A real report and its VCEK with AMD's ASK and ARK, as an envelope's certChain."""
    vcek = x509.load_der_x509_certificate((REAL / cert).read_bytes())
    store = TrustStore.amd().amd_certificates()
    pem = "".join(
        c.public_bytes(serialization.Encoding.PEM).decode()
        for c in (vcek, store[line, AmdRole.ASK], store[line, AmdRole.ARK])
    )
    return (REAL / report).read_bytes(), pem


def test_platform_of_an_amd_chain_is_sev_snp(sim: SimulatedAmd) -> None:
    _, pem = real_chain("oak-genoa-v5-report.bin", "oak-genoa-v5-vcek.der", ProductLine.GENOA)
    certificates = tuple(x509.load_pem_x509_certificates(pem.encode()))
    assert platform_of_chain(certificates, now=REAL_NOW) == "sev-snp"
    assert platform_of_chain(certificates[:1], now=REAL_NOW) == "sev-snp"  # pinned ASK is used
    # Outside the VCEK's validity it is not an AMD chain at that time.
    assert platform_of_chain(certificates, now=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)) == (
        "simulated"
    )
    sim_chain = x509.load_pem_x509_certificates(sim_envelope(sim)["evidence"]["certChain"].encode())
    assert platform_of_chain(sim_chain, now=sim_now()) == "simulated"
    assert platform_of_chain((), now=sim_now()) == "simulated"


@pytest.mark.parametrize(("claim", "fields_ok"), [("sev-snp", True), ("simulated", False)])
def test_real_evidence_must_be_labelled_sev_snp(claim: str, fields_ok: bool) -> None:
    """A real AMD report in an envelope: authentic (checks 1-6 pass), its REPORT_DATA is not
    this binding's (7), and the label check accepts only ``sev-snp``."""
    envelope, parsed = real_envelope(claim)
    # The launch digest is pinned (a hardware expected file must pin it), so the workload
    # stage passes and the verdict is the binding's.
    result = verify(envelope, expected(measurements=[parsed.measurement.hex()]), now=REAL_NOW)
    assert result.exit_code == 7
    checks = by_name(result)
    assert checks["report.signature"].ok is True
    assert checks["workload.measurement"].ok is True
    assert checks["binding.report-data"].ok is False
    assert checks["binding.envelope-fields"].ok is fields_ok
    if not fields_ok:
        assert "platform says 'simulated' but the evidence says 'sev-snp'" in (
            checks["binding.envelope-fields"].detail
        )


def real_envelope(claim: str = "sev-snp") -> tuple[dict[str, Any], AttestationReport]:
    """An envelope around a real AMD report (genuine evidence; its REPORT_DATA is not this
    envelope's binding) and the parsed report."""
    report, pem = real_chain("oak-genoa-v5-report.bin", "oak-genoa-v5-vcek.der", ProductLine.GENOA)
    parsed = parse_report(report)
    binding = make_binding()
    envelope = {
        "apiVersion": API_VERSION,
        "kind": ENVELOPE_KIND,
        "runId": RUN_ID,
        "tenant": TENANT,
        "binding": binding.to_json_dict(),
        "reportData": parsed.report_data.hex(),
        "measurement": parsed.measurement.hex(),
        "hostData": parsed.host_data.hex(),
        "platform": claim,
        "evidence": {
            "report": base64.b64encode(report).decode(),
            "provider": "sev-guest",
            "certChain": pem,
        },
        "result": RESULT,
    }
    return envelope, parsed


# -- the stock-guest attack: genuine HOST_DATA, the operator's own MEASUREMENT -------------------


def test_hardware_evidence_against_a_host_data_only_file_fails_workload_identity() -> None:
    """An operator boots Kata's stock guest with the genuine HOST_DATA and no init-data: the
    report is genuine AMD evidence with the pinned HOST_DATA and the operator's MEASUREMENT.
    A file that pins hostData alone is refused (exit 6) before anything else is believed."""
    envelope, parsed = real_envelope()
    result = verify(envelope, expected(hostData=[parsed.host_data.hex()]), now=REAL_NOW)
    assert result.exit_code == 6
    checks = by_name(result)
    assert checks["workload.host-data"].ok is True  # the genuine value: no help on its own
    measurement = checks["workload.measurement"]
    assert measurement.ok is False
    assert measurement.detail.startswith(
        f"MEASUREMENT {parsed.measurement.hex()} is not pinned (measurements absent) on AMD "
        "hardware: any guest could have produced this report"
    )
    assert "`attested-replay measure`" in measurement.detail
    assert "`attested-replay expected --measurement`" in measurement.detail


def test_hardware_evidence_against_a_file_pinning_nothing_fails_workload_identity() -> None:
    envelope, _ = real_envelope()
    result = verify(envelope, expected(), now=REAL_NOW)
    assert result.exit_code == 6
    assert result.failed_checks[0].name == "workload.measurement"


def test_the_operators_own_measurement_is_not_the_tenants() -> None:
    envelope, parsed = real_envelope()
    tenants = "ab" * 48
    pins = expected(hostData=[parsed.host_data.hex()], measurements=[tenants])
    result = verify(envelope, pins, now=REAL_NOW)
    assert result.exit_code == 6
    assert by_name(result)["workload.measurement"].detail == (
        f"MEASUREMENT {parsed.measurement.hex()} not in measurements"
    )


def test_several_allowed_measurements_any_one_matches() -> None:
    envelope, parsed = real_envelope()
    pins = expected(measurements=["ab" * 48, parsed.measurement.hex()])
    assert by_name(verify(envelope, pins, now=REAL_NOW))["workload.measurement"].ok is True


def test_accept_any_measurement_is_explicit_and_named_in_the_verdict() -> None:
    envelope, parsed = real_envelope()
    pins = expected(hostData=[parsed.host_data.hex()], acceptAnyMeasurement=True)
    result = verify(envelope, pins, now=REAL_NOW)
    assert result.exit_code == 7  # past the workload stage; this envelope's binding is not real
    assert by_name(result)["workload.measurement"].detail == (
        "MEASUREMENT not checked (acceptAnyMeasurement: any guest firmware, kernel, initrd and "
        "command line accepted)"
    )
    with pytest.raises(MalformedError, match="acceptAnyMeasurement"):
        expected(acceptAnyMeasurement="yes")


def test_simulated_evidence_needs_no_measurement_pin(sim: SimulatedAmd) -> None:
    envelope = sim_envelope(sim)
    pins = expected(
        simulatedRoots=[sim.root_fingerprint], hostData=[envelope["hostData"]], tenant=TENANT
    )
    result = verify(envelope, pins)
    assert by_name(result)["workload.measurement"].detail == (
        "MEASUREMENT not checked (measurements absent)"
    )


# -- malformed envelopes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e.update(extra=1), "envelope is invalid: extra: Extra inputs are not permitted"),
        (lambda e: e.pop("binding"), "envelope is invalid: binding: Field required"),
        (lambda e: e.update(apiVersion="attested-replay.dev/v2"), "apiVersion: Input should be"),
        (lambda e: e["evidence"].update(report="not base64!"), "evidence.report"),
        (lambda e: e["evidence"].update(reportDataEncoding="sha1"), "reportDataEncoding"),
        (lambda e: e["binding"].update(run_id="x"), "binding.run_id: Extra inputs"),
    ],
    ids=["unknown-key", "missing-binding", "api-version", "report-not-base64", "encoding", "snake"],
)
def test_schema_violations_are_malformed_naming_the_field(
    sim: SimulatedAmd,
    mutate: Any,
    message: str,
) -> None:
    envelope = copy.deepcopy(sim_envelope(sim))
    mutate(envelope)
    result = verify(envelope, pinned(sim))
    assert result.exit_code == 1
    assert result.checks[0].name == "envelope.parse"
    assert message in result.checks[0].detail
    assert all(check.ok is None for check in result.checks[1:])


def test_a_duplicate_key_is_malformed_not_last_wins(sim: SimulatedAmd) -> None:
    """JSON readers disagree on which copy of a key wins; the verifier refuses the document."""
    text = json.dumps(sim_envelope(sim))
    forged = text.replace('"runId": "run-1"', '"runId": "run-2", "runId": "run-1"', 1)
    assert forged != text
    result = verify(forged.encode(), pinned(sim))
    assert result.exit_code == 1
    assert "key 'runId' appears more than once" in result.checks[0].detail


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_json_numbers_in_the_result_are_malformed(sim: SimulatedAmd, number: str) -> None:
    text = json.dumps(sim_envelope(sim)).replace('"met"', number, 1)
    result = verify(text.encode(), pinned(sim))
    assert result.exit_code == 1
    assert result.checks[0].detail.startswith("envelope is not valid JSON: ")


def test_oversized_envelope_is_refused_before_parsing(sim: SimulatedAmd) -> None:
    result = verify(b" " * (MAX_ENVELOPE_BYTES + 1), pinned(sim))
    assert result.exit_code == 1
    assert result.checks[0].detail == (
        f"envelope is {MAX_ENVELOPE_BYTES + 1} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit"
    )


@pytest.mark.parametrize(
    ("chain", "message"),
    [
        ("", "certificate input is empty"),
        ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "cannot be parsed"),
        ("é", "evidence.certChain"),
    ],
    ids=["empty", "bad-pem", "not-ascii"],
)
def test_unreadable_cert_chain_is_malformed(sim: SimulatedAmd, chain: str, message: str) -> None:
    envelope = sim_envelope(sim)
    envelope["evidence"]["certChain"] = chain
    result = verify(envelope, pinned(sim))
    assert result.exit_code == 1
    failed = result.failed_checks
    assert [c.name for c in failed] == ["envelope.cert-chain"]
    assert message in failed[0].detail
    assert all(check.ok is None for check in result.checks[2:])


# -- shards are parts of a run, never a whole one ------------------------------------------


def shard_envelope_without_result(sim: SimulatedAmd, index: int, count: int) -> dict[str, Any]:
    """A shard envelope that carries only its binding (its result is fetched separately)."""
    envelope = sim_envelope(
        sim, binding=make_binding(shard=ShardPosition(index=index, count=count))
    )
    del envelope["result"]
    return envelope


def test_a_shard_alone_is_not_a_whole_run(sim: SimulatedAmd) -> None:
    result = verify(shard_envelope_without_result(sim, 1, 3), pinned(sim))
    assert result.exit_code == 8
    assert [c.name for c in result.failed_checks] == ["expectation.shard"]
    assert result.failed_checks[0].detail == (
        "the envelope is shard 1 of 3 of a sharded run, not a whole run: verify the merged "
        "envelope of all its shards"
    )


def test_a_shard_envelope_whose_result_is_no_shard_result_fails_its_binding(
    sim: SimulatedAmd,
) -> None:
    """A shard's bound result must be a shard result of its position: checked when the shard
    is verified alone, not only when it is merged."""
    envelope = sim_envelope(sim, binding=make_binding(shard=ShardPosition(index=1, count=3)))
    result = verify(envelope, pinned(sim), shard=ShardPosition(index=1, count=3))
    assert result.exit_code == 7
    assert [c.name for c in result.failed_checks] == ["binding.shard-result"]
    assert result.failed_checks[0].detail.startswith(
        "shard 1 of 3: not a shard result: format: Field required"
    )


def test_a_shard_verifies_as_the_shard_asked_for(sim: SimulatedAmd) -> None:
    envelope = shard_envelope_without_result(sim, 1, 3)
    assert verify(envelope, pinned(sim), shard=ShardPosition(index=1, count=3)).exit_code == 0
    result = verify(envelope, pinned(sim), shard=ShardPosition(index=2, count=3))
    assert result.exit_code == 8
    assert result.failed_checks[0].detail == ("the envelope is shard 1 of 3, expected shard 2 of 3")
    whole = verify(sim_envelope(sim), pinned(sim), shard=ShardPosition(index=0, count=1))
    assert whole.failed_checks[0].detail == "the envelope is a whole run, not shard 0 of 1"


def test_the_shard_position_is_bound(sim: SimulatedAmd) -> None:
    envelope = sim_envelope(sim, binding=make_binding(shard=ShardPosition(index=1, count=3)))
    envelope["binding"]["shard"]["index"] = 2
    result = verify(envelope, pinned(sim), shard=ShardPosition(index=2, count=3))
    assert result.exit_code == 7
    assert [c.name for c in result.failed_checks] == ["binding.report-data"]


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        ({"index": 3, "count": 3}, "shard index 3 is not below the shard count 3"),
        ({"index": 0, "count": 257}, "less than or equal to 256"),
        ({"index": "0", "count": 2}, "Input should be a valid integer"),
    ],
)
def test_impossible_shard_positions_are_malformed(
    sim: SimulatedAmd, shard: dict[str, Any], message: str
) -> None:
    envelope = sim_envelope(sim)
    envelope["binding"]["shard"] = shard
    result = verify(envelope, pinned(sim))
    assert result.exit_code == 1
    assert message in result.failed_checks[0].detail


@pytest.mark.parametrize(("count", "code"), [(1, 0), (2, 8)])
def test_a_pinned_shard_count_applies_to_unsharded_runs(
    sim: SimulatedAmd, count: int, code: int
) -> None:
    result = verify(sim_envelope(sim), pinned(sim, shardCount=count))
    assert result.exit_code == code
    if code:
        assert result.failed_checks[0].detail == (
            "the envelope is an unsharded run; the tenant expected 2 shards"
        )


# -- the CLI in envelope mode ------------------------------------------------------------


def write_pair(tmp_path: Path, envelope: dict[str, Any], values: dict[str, Any]) -> list[str]:
    (tmp_path / "e.json").write_text(json.dumps(envelope))
    (tmp_path / "x.json").write_text(json.dumps(values))
    return ["--envelope", str(tmp_path / "e.json"), "--expected", str(tmp_path / "x.json")]


def test_cli_json_document_in_envelope_mode(
    sim: SimulatedAmd, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = {
        "runId": RUN_ID,
        "corpusChecksum": CORPUS,
        "evaluationDigest": EVALUATION,
        "simulatedRoots": [sim.root_fingerprint],
    }
    argv = write_pair(tmp_path, sim_envelope(sim), values)
    assert cli.main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {
        "verified", "simulated", "exitCode", "failureClass", "checks", "report"
    }  # fmt: skip
    assert (document["verified"], document["exitCode"], document["failureClass"]) == (True, 0, None)
    assert document["simulated"] is True
    names = [check["name"] for check in document["checks"]]
    assert names[:4] == [
        "envelope.parse",
        "envelope.cert-chain",
        "report.parse",
        "endorsement.parse",
    ]
    assert names[-(3 + len(EXPECTATION_CHECKS)) :] == [
        "binding.report-data",
        "binding.envelope-fields",
        "binding.result-digest",
        *EXPECTATION_CHECKS,
    ]
    assert document["report"]["productLine"] == "Genoa"


def test_cli_text_verdict_of_a_forged_binding(
    sim: SimulatedAmd, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = sim_envelope(sim)
    envelope["binding"]["corpusChecksum"] = "sha256:" + "0" * 64
    values = {
        "runId": RUN_ID,
        "corpusChecksum": CORPUS,
        "evaluationDigest": EVALUATION,
        "simulatedRoots": [sim.root_fingerprint],
    }
    assert cli.main(write_pair(tmp_path, envelope, values)) == 7
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "NOT VERIFIED: binding (exit 7)"
    assert lines[1].startswith("  FAILED binding.report-data [binding]: REPORT_DATA ")
    assert len(lines) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "p.json"], "--policy does not apply to --envelope"),
        (["--endorsement", "c.pem"], "--endorsement does not apply to --envelope"),
        (["--simulated-root", "r.pem"], "--simulated-root does not apply to --envelope"),
    ],
)
def test_cli_raw_mode_options_are_usage_errors_in_envelope_mode(
    sim: SimulatedAmd,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    argv = write_pair(tmp_path, sim_envelope(sim), {"runId": RUN_ID, "corpusChecksum": CORPUS})
    assert cli.main([*argv, *extra]) == 9
    assert message in capsys.readouterr().err


def test_cli_mode_pairing_is_enforced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--envelope", str(tmp_path / "e.json")]) == 9
    assert "--envelope needs --expected" in capsys.readouterr().err
    report = str(REAL / "azure-milan-v3-report.bin")
    vcek = str(REAL / "azure-milan-v3-vcek.der")
    argv = ["--report", report, "--endorsement", vcek, "--expected", str(tmp_path / "x.json")]
    assert cli.main(argv) == 9
    assert "--expected applies only to --envelope" in capsys.readouterr().err
    assert cli.main(["--report", report, "--envelope", str(tmp_path / "e.json")]) == 9


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{", "expected-values file is not valid JSON"),
        (b"[]", "expected-values file must be a JSON object"),
        (b'{"runId": "run-1"}', "corpusChecksum: Field required"),
        (b'{"runId": "run-1", "runId": "run-2", "corpusChecksum": "x"}', "appears more than once"),
        (b'{"runId": "r", "corpusChecksum": "sha256:' + b"A" * 64 + b'"}', "corpusChecksum"),
    ],
)
def test_cli_malformed_expected_values_exit_1_naming_the_problem(
    sim: SimulatedAmd,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    message: str,
) -> None:
    argv = write_pair(tmp_path, sim_envelope(sim), {})
    (tmp_path / "x.json").write_bytes(content)
    assert cli.main(argv) == 1
    assert message in capsys.readouterr().err


def test_docs_name_every_check(sim: SimulatedAmd) -> None:
    """docs/verification.md documents each check an envelope verification lists (raw ones too)."""
    docs = (Path(__file__).parents[3] / "docs" / "verification.md").read_text()
    result = verify(sim_envelope(sim), pinned(sim))
    assert result.exit_code == 0
    names = [check.name for check in result.checks]
    assert len(names) == 36  # 2 envelope + 22 raw-report + 3 binding + 9 expectation
    assert [name for name in names if f"`{name}`" not in docs] == []


# -- nesting: bounded before parsing, and every envelope gets a verdict ----------------------


def deep_envelope_bytes(sim: SimulatedAmd, depth: int) -> bytes:
    """A genuine envelope whose result nests ``depth`` objects deep: the binding signs the
    digest of its canonical form (``{"a":`` * depth, written as text: one key per object is
    already in canonical order), as an operator running an older version could have logged."""
    canonical = '{"a":' * depth + "1" + "}" * depth
    digest = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    envelope = sim_envelope(sim, binding=make_binding(result_digest=digest))
    envelope["result"] = "DEEP-RESULT"
    return json.dumps(envelope).replace('"DEEP-RESULT"', canonical).encode()


@pytest.mark.parametrize("depth", [MAX_ENVELOPE_JSON_DEPTH, 900])
def test_an_envelope_nested_deeper_than_the_limit_is_malformed(
    sim: SimulatedAmd, depth: int
) -> None:
    """The result adds ``depth`` levels to the envelope's own one: the limit's depth is already
    one over it. 900 levels used to reach the canonicalizer's recursion limit (exit 9)."""
    result = verify(deep_envelope_bytes(sim, depth), pinned(sim))
    assert result.exit_code == 1
    assert result.checks[0].name == "envelope.parse"
    assert result.checks[0].detail == (
        f"envelope nests arrays and objects deeper than {MAX_ENVELOPE_JSON_DEPTH} levels "
        "(refused before parsing)"
    )
    assert all(check.ok is None for check in result.checks[1:])


def test_an_envelope_at_the_depth_limit_verifies(sim: SimulatedAmd) -> None:
    """The envelope object itself is level 1: a result of limit - 1 levels is the deepest."""
    result = verify(deep_envelope_bytes(sim, MAX_ENVELOPE_JSON_DEPTH - 1), pinned(sim))
    assert result.exit_code == 0


def test_cli_exits_1_for_a_900_deep_envelope(
    sim: SimulatedAmd, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "e.json").write_bytes(deep_envelope_bytes(sim, 900))
    values = {"runId": RUN_ID, "corpusChecksum": CORPUS, "simulatedRoots": [sim.root_fingerprint]}
    (tmp_path / "x.json").write_text(json.dumps(values))
    argv = ["--envelope", str(tmp_path / "e.json"), "--expected", str(tmp_path / "x.json")]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == "NOT VERIFIED: malformed (exit 1)"
    assert "Traceback" not in captured.err


def test_an_unexpected_exception_is_a_malformed_verdict(
    sim: SimulatedAmd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug or an input no bound foresaw is NOT VERIFIED (class 1), never a traceback."""

    def broken(*_: object) -> str:
        raise KeyError("surprise")

    monkeypatch.setattr(verification, "report_data_for", broken)
    result = verify(sim_envelope(sim), pinned(sim))
    assert result.exit_code == 1
    assert [(c.name, c.ok, c.detail) for c in result.checks] == [
        (JUDGED_CHECK, False, "the verifier could not judge this envelope: KeyError: 'surprise'")
    ]


def test_a_memory_error_is_not_a_verdict(
    sim: SimulatedAmd, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted(*_: object) -> str:
        raise MemoryError

    monkeypatch.setattr(verification, "report_data_for", exhausted)
    with pytest.raises(MemoryError):
        verify(sim_envelope(sim), pinned(sim))


# -- the evaluation digest is pinned by default ------------------------------------------------


def test_a_file_pinning_no_evaluation_digest_is_refused(sim: SimulatedAmd) -> None:
    """Edited predictions or lowered marks give another evaluation digest: a file that pins
    none would accept them, so it is refused (exit 8), naming what pins it."""
    result = verify(sim_envelope(sim), expected(simulatedRoots=[sim.root_fingerprint]))
    assert result.exit_code == 8
    assert [c.name for c in result.failed_checks] == ["expectation.evaluation-digest"]
    assert result.failed_checks[0].detail == (
        f"evaluationDigest {EVALUATION} is not pinned: the predictions (runs.jsonl), marks and "
        "plan this run scored could be any the operator chose; `attested-replay expected "
        "--corpus DIR|ARCHIVE` pins the digest of the approved corpus' plan, marks and run "
        "records (acceptAnyEvaluation: true gives this up)"
    )


def test_accept_any_evaluation_is_explicit_and_named_in_the_verdict(sim: SimulatedAmd) -> None:
    pins = expected(simulatedRoots=[sim.root_fingerprint], acceptAnyEvaluation=True)
    result = verify(sim_envelope(sim), pins)
    assert result.exit_code == 0
    assert by_name(result)["expectation.evaluation-digest"].detail == (
        f"evaluationDigest {EVALUATION} not pinned (acceptAnyEvaluation: the predictions, marks "
        "and plan this run scored are the operator's)"
    )
    with pytest.raises(MalformedError, match="acceptAnyEvaluation"):
        expected(acceptAnyEvaluation=1)
