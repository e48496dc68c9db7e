"""The verification policy: loading, defaults, each key, and every violation listed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import AttestationReport, GuestPolicy, PlatformInfo, parse_report
from attestation.contracts import MAX_POLICY_BYTES
from attestation.errors import FailureClass, MalformedError
from attestation.verify.checks import Check
from attestation.verify.policy import (
    CRYPTO_ONLY,
    Policy,
    TcbMinimum,
    evaluate_policy,
    load_policy,
)

REAL = Path(__file__).parents[2] / "assets" / "real"
PLATFORM = FailureClass.PLATFORM_POLICY
WORKLOAD = FailureClass.WORKLOAD_IDENTITY


def real(name: str) -> AttestationReport:
    return parse_report((REAL / name).read_bytes())


def evaluate(
    report: AttestationReport,
    policy: Policy,
    product: ProductLine = ProductLine.MILAN,
    signer: SignerKind = SignerKind.VCEK,
) -> dict[str, Check]:
    checks = evaluate_policy(report, policy, product=product, signer=signer)
    assert len({c.name for c in checks}) == len(checks)
    return {c.name: c for c in checks}


def failed(checks: dict[str, Check]) -> list[str]:
    return [name for name, check in checks.items() if check.ok is False]


AZURE = "azure-milan-v3-report.bin"


def test_empty_policy_is_the_secure_default() -> None:
    policy = load_policy(b"{}")
    assert policy == Policy()
    assert policy.allow_debug is False
    assert policy.allow_migration_agent is False
    assert policy.allowed_vmpl == (0,)
    assert policy.allow_provisional_firmware is False
    assert policy.allowed_signers == (SignerKind.VCEK, SignerKind.VLEK)
    assert policy.allowed_products is None
    assert policy.measurements is None
    assert policy.reject_unknown_platform_info is False
    assert policy.to_json_dict() == {
        "allowDebug": False,
        "allowMigrationAgent": False,
        "allowedVmpl": [0],
        "allowProvisionalFirmware": False,
        "allowedSigners": ["vcek", "vlek"],
        "rejectUnknownPlatformInfo": False,
        "acceptAnyMeasurement": False,
    }


def test_a_full_policy_loads_and_round_trips_through_json() -> None:
    document = {
        "allowDebug": True,
        "allowMigrationAgent": True,
        "allowedVmpl": [0, 1],
        "allowProvisionalFirmware": True,
        "minimumTcb": {"Milan": {"snp": 24}, "Turin": {"fmc": 0, "snp": 2}},
        "minimumFirmware": "1.55.21",
        "allowedProducts": ["Milan", "Turin"],
        "allowedSigners": ["vcek"],
        "measurements": ["AB" * 48],
        "hostData": ["00" * 32],
        "idKeyDigests": ["11" * 48],
        "authorKeyDigests": ["22" * 48],
        "rejectUnknownPlatformInfo": True,
    }
    policy = load_policy(json.dumps(document).encode())
    assert policy.measurements == ("ab" * 48,)
    assert policy.minimum_tcb == {
        ProductLine.MILAN: TcbMinimum(snp=24),
        ProductLine.TURIN: TcbMinimum(fmc=0, snp=2),
    }
    again = load_policy(json.dumps(policy.to_json_dict()).encode())
    assert again == policy


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"[]", "must be a JSON object"),
        (b"{", "not valid JSON"),
        (b"\xff", "not UTF-8"),
        (b'{"allowDebugg": true}', "allowDebugg: Extra inputs are not permitted"),
        (b'{"allow_debug": true}', "allow_debug: Extra inputs are not permitted"),
        (b'{"allowDebug": "yes"}', "allowDebug: Input should be a valid boolean"),
        (b'{"allowDebug": 1}', "allowDebug: Input should be a valid boolean"),
        (b'{"allowedVmpl": ["0"]}', "allowedVmpl.0: Input should be a valid integer"),
        (b'{"allowedVmpl": [true]}', "allowedVmpl.0: Input should be a valid integer"),
        (b'{"minimumTcb": {"snp": "8"}}', "minimumTcb"),
        (b'{"allowedVmpl": [4]}', "allowedVmpl.0"),
        (b'{"measurements": ["abcd"]}', "measurements.0"),
        (b'{"hostData": ["' + b"zz" * 32 + b'"]}', "hostData.0"),
        (b'{"minimumFirmware": "1.55"}', "minimumFirmware"),
        (b'{"minimumFirmware": "1.256.0"}', "each part 0..255"),
        (b'{"minimumTcb": {"snp": 256}}', "minimumTcb"),
        (b'{"minimumTcb": {"Rome": {"snp": 1}}}', "minimumTcb"),
        (b'{"allowedProducts": ["Naples"]}', "allowedProducts.0"),
        (b'{"allowedSigners": ["ask"]}', "allowedSigners.0"),
    ],
)
def test_bad_policies_are_malformed_with_the_offending_key(document: bytes, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        load_policy(document)


def test_oversized_policy_is_refused_naming_the_limit() -> None:
    with pytest.raises(MalformedError, match=f"over the {MAX_POLICY_BYTES}-byte limit"):
        load_policy(b" " * (MAX_POLICY_BYTES + 1))


@given(st.dictionaries(st.text(max_size=20), st.booleans(), max_size=3))
def test_unknown_keys_are_always_rejected(document: dict[str, bool]) -> None:
    known = set(Policy().to_json_dict()) | {
        "minimumTcb",
        "minimumFirmware",
        "allowedProducts",
        "measurements",
        "hostData",
        "idKeyDigests",
        "authorKeyDigests",
    }
    data = json.dumps(document).encode()
    if set(document) <= known:
        load_policy(data)
    else:
        with pytest.raises(MalformedError, match="Extra inputs are not permitted"):
            load_policy(data)


def test_secure_default_passes_a_clean_report() -> None:
    checks = evaluate(real(AZURE), Policy())
    assert failed(checks) == []
    assert checks["workload.measurement"].detail == "MEASUREMENT not checked (measurements absent)"
    assert [c.failure_class for c in checks.values()].count(WORKLOAD) == 4


def test_debug() -> None:
    report = real("gsg-milan-v2-debug-report.bin")
    assert failed(evaluate(report, Policy())) == ["policy.debug"]
    assert failed(evaluate(report, Policy(allow_debug=True))) == []


def test_migration_agent() -> None:
    report = dataclasses.replace(real(AZURE), policy=GuestPolicy(migrate_ma=True))
    checks = evaluate(report, Policy())
    assert failed(checks) == ["policy.migration-agent"]
    assert checks["policy.migration-agent"].failure_class is PLATFORM
    assert failed(evaluate(report, Policy(allow_migration_agent=True))) == []


def test_vmpl() -> None:
    report = dataclasses.replace(real(AZURE), vmpl=2)
    checks = evaluate(report, Policy())
    assert failed(checks) == ["policy.vmpl"]
    assert checks["policy.vmpl"].detail == "VMPL 2 not in allowedVmpl [0]"
    assert failed(evaluate(report, Policy(allowed_vmpl=(2,)))) == []


def test_provisional_firmware_tcb() -> None:
    report = real("trustee-milan-v2-idblock-provisional-report.bin")
    assert report.committed_tcb != report.current_tcb
    assert failed(evaluate(report, Policy())) == ["policy.provisional-firmware"]
    assert failed(evaluate(report, Policy(allow_provisional_firmware=True))) == []


def test_provisional_firmware_version_differs() -> None:
    report = dataclasses.replace(real(AZURE), current_build=real(AZURE).current_build + 1)
    checks = evaluate(report, Policy())
    assert failed(checks) == ["policy.provisional-firmware"]
    assert "firmware 1.55.29" in checks["policy.provisional-firmware"].detail
    assert failed(evaluate(report, Policy(allow_provisional_firmware=True))) == []


def test_committed_newer_than_current_fails_even_when_provisional_is_allowed() -> None:
    base = real(AZURE)
    report = dataclasses.replace(base, committed_build=base.current_build + 1)
    checks = evaluate(report, Policy(allow_provisional_firmware=True))
    assert failed(checks) == ["policy.provisional-firmware"]
    assert "committed is newer than current" in checks["policy.provisional-firmware"].detail


def test_minimum_tcb_flat_lists_every_component_below() -> None:
    report = real(AZURE)
    reported = report.tcb("reported")
    policy = Policy(
        minimum_tcb=TcbMinimum(bl=reported.bl + 1, snp=reported.snp + 1, ucode=reported.ucode)
    )
    checks = evaluate(report, policy)
    assert failed(checks) == ["policy.minimum-tcb"]
    assert checks["policy.minimum-tcb"].detail == (
        f"REPORTED_TCB below minimum: bl {reported.bl} < {reported.bl + 1}, "
        f"snp {reported.snp} < {reported.snp + 1}"
    )
    equal = TcbMinimum(bl=reported.bl, tee=reported.tee, snp=reported.snp, ucode=reported.ucode)
    assert failed(evaluate(report, Policy(minimum_tcb=equal))) == []


def test_minimum_tcb_fmc_applies_only_to_turin() -> None:
    turin = real("oak-turin-v5-report.bin")
    assert failed(evaluate(turin, Policy(minimum_tcb=TcbMinimum(fmc=1)), ProductLine.TURIN)) == [
        "policy.minimum-tcb"
    ]
    assert failed(evaluate(real(AZURE), Policy(minimum_tcb=TcbMinimum(fmc=1)))) == []


def test_minimum_tcb_per_product_line_fails_closed_for_unlisted_products() -> None:
    report = real("oak-genoa-v5-report.bin")
    policy = Policy(minimum_tcb={ProductLine.MILAN: TcbMinimum(snp=0)})
    checks = evaluate(report, policy, ProductLine.GENOA)
    assert failed(checks) == ["policy.minimum-tcb"]
    assert (
        checks["policy.minimum-tcb"].detail == "minimumTcb lists no minimum for product line Genoa"
    )
    snp = report.tcb("reported").snp
    ok = Policy(minimum_tcb={ProductLine.GENOA: TcbMinimum(snp=snp)})
    assert failed(evaluate(report, ok, ProductLine.GENOA)) == []
    high = Policy(minimum_tcb={ProductLine.GENOA: TcbMinimum(snp=snp + 1)})
    assert failed(evaluate(report, high, ProductLine.GENOA)) == ["policy.minimum-tcb"]


def test_minimum_firmware_checks_current_and_committed() -> None:
    report = real("trustee-milan-v2-idblock-provisional-report.bin")  # firmware 1.52.4
    assert (
        failed(evaluate(report, CRYPTO_ONLY.model_copy(update={"minimum_firmware": "1.52.4"})))
        == []
    )
    checks = evaluate(report, CRYPTO_ONLY.model_copy(update={"minimum_firmware": "1.52.5"}))
    assert failed(checks) == ["policy.minimum-firmware"]
    assert checks["policy.minimum-firmware"].detail == (
        "firmware below 1.52.5: current 1.52.4, committed 1.52.4"
    )
    assert failed(
        evaluate(report, CRYPTO_ONLY.model_copy(update={"minimum_firmware": "2.0.0"}))
    ) == ["policy.minimum-firmware"]


def test_allowed_products() -> None:
    report = real(AZURE)
    assert failed(evaluate(report, Policy(allowed_products=(ProductLine.TURIN,)))) == [
        "policy.products"
    ]
    assert failed(evaluate(report, Policy(allowed_products=(ProductLine.MILAN,)))) == []


def test_allowed_signers() -> None:
    report = real(AZURE)
    policy = Policy(allowed_signers=(SignerKind.VCEK,))
    assert failed(evaluate(report, policy, signer=SignerKind.VLEK)) == ["policy.signers"]
    assert failed(evaluate(report, policy, signer=SignerKind.VCEK)) == []


def test_unknown_platform_info_bits_are_reported_not_fatal_by_default() -> None:
    report = real("oak-turin-v5-report.bin")
    checks = evaluate(report, Policy(), ProductLine.TURIN)
    assert checks["policy.platform-info"].ok is True
    assert checks["policy.platform-info"].detail == (
        "PLATFORM_INFO 0x67: unknown bits [6] (reported, not rejected)"
    )
    strict = evaluate(report, Policy(reject_unknown_platform_info=True), ProductLine.TURIN)
    assert failed(strict) == ["policy.platform-info"]
    high = dataclasses.replace(real(AZURE), platform_info=PlatformInfo.from_raw(0x25 | 1 << 40))
    assert "unknown bits [40]" in evaluate(high, Policy())["policy.platform-info"].detail


@pytest.mark.parametrize(
    ("key", "field", "check"),
    [
        ("measurements", "measurement", "workload.measurement"),
        ("host_data", "host_data", "workload.host-data"),
        ("id_key_digests", "id_key_digest", "workload.id-key-digest"),
        ("author_key_digests", "author_key_digest", "workload.author-key-digest"),
    ],
)
def test_workload_identity_keys(key: str, field: str, check: str) -> None:
    report = real("trustee-milan-v2-idblock-provisional-report.bin")
    value: bytes = getattr(report, field)
    other = bytes(len(value)) if any(value) else b"\x01" * len(value)
    good = CRYPTO_ONLY.model_copy(update={key: (other.hex(), value.hex())})
    assert failed(evaluate(report, good)) == []
    bad = CRYPTO_ONLY.model_copy(update={key: (other.hex(),)})
    checks = evaluate(report, bad)
    assert failed(checks) == [check]
    assert checks[check].failure_class is WORKLOAD
    assert value.hex() in checks[check].detail


def test_every_violation_is_listed_not_only_the_first() -> None:
    report = real("aws-milan-v3-vlek-vmpl1-report.bin")
    policy = Policy(
        minimum_tcb=TcbMinimum(snp=255),
        minimum_firmware="9.9.9",
        allowed_products=(ProductLine.GENOA,),
        allowed_signers=(SignerKind.VCEK,),
        measurements=("00" * 48,),
        host_data=("11" * 32,),
        id_key_digests=("22" * 48,),
        author_key_digests=("33" * 48,),
        reject_unknown_platform_info=True,
    )
    report = dataclasses.replace(
        report,
        policy=GuestPolicy(debug=True, migrate_ma=True),
        platform_info=PlatformInfo.from_raw(0x40),
    )
    checks = evaluate(report, policy, signer=SignerKind.VLEK)
    assert failed(checks) == [
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
    classes = [checks[name].failure_class for name in failed(checks)]
    assert classes == [PLATFORM] * 9 + [WORKLOAD] * 4


def test_on_hardware_a_workload_pin_without_measurements_fails() -> None:
    """HOST_DATA (or an ID key) pinned without MEASUREMENT proves nothing on hardware: any guest
    can be booted with that HOST_DATA. Raw mode and envelope mode refuse it alike."""
    report = real("trustee-milan-v2-idblock-provisional-report.bin")
    host_data_only = CRYPTO_ONLY.model_copy(
        update={"host_data": (report.host_data.hex(),), "accept_any_measurement": False}
    )

    def measurement_check(policy: Policy, **where: bool) -> Check:
        checks = evaluate_policy(
            report, policy, product=ProductLine.MILAN, signer=SignerKind.VCEK, **where
        )
        return {c.name: c for c in checks}["workload.measurement"]

    refused = measurement_check(host_data_only, hardware=True)
    assert (refused.ok, refused.failure_class) == (False, WORKLOAD)
    assert refused.detail.startswith(
        f"MEASUREMENT {report.measurement.hex()} is not pinned (measurements absent) on AMD "
        "hardware"
    )
    # Simulated evidence: as before; nothing pinned in raw mode: a diagnostic, not checked.
    assert measurement_check(host_data_only, hardware=False).ok is True
    assert measurement_check(Policy(), hardware=True).ok is True
    # A verdict about a workload (an envelope) needs MEASUREMENT on hardware even alone.
    assert measurement_check(Policy(), hardware=True, workload_claim=True).ok is False
    opted_out = host_data_only.model_copy(update={"accept_any_measurement": True})
    assert measurement_check(opted_out, hardware=True, workload_claim=True).detail == (
        "MEASUREMENT not checked (acceptAnyMeasurement: any guest firmware, kernel, initrd and "
        "command line accepted)"
    )
    pinned = host_data_only.model_copy(update={"measurements": (report.measurement.hex(),)})
    assert measurement_check(pinned, hardware=True, workload_claim=True).ok is True
