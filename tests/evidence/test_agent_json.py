"""The agent's JSON evidence shape <-> raw reports, on every real report we have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.abi.report import LAYOUT, REPORT_SIZE, SIGNATURE_COMPONENT_SIZE
from runner.evidence.agent_json import (
    FIELDS,
    OFF_SIGNATURE_R,
    OFF_SIGNATURE_S,
    AgentCertEntry,
    AgentJsonError,
    evidence_to_agent_json,
    parse_agent_evidence,
    report_from_agent_json,
    report_to_agent_json,
)

REAL = Path(__file__).parent.parent / "assets" / "real"
REAL_REPORTS = sorted(REAL.glob("*-report.bin"))


def test_there_are_real_reports() -> None:
    assert len(REAL_REPORTS) == 8


@pytest.mark.parametrize("path", REAL_REPORTS, ids=lambda p: p.name)
def test_real_report_round_trips_through_agent_json(path: Path) -> None:
    raw = path.read_bytes()
    text = evidence_to_agent_json(raw, None)
    evidence = parse_agent_evidence(text)
    assert evidence.report == raw
    assert evidence.cert_chain is None
    # and via the plain dict, after a JSON round trip of its own
    assert report_from_agent_json(json.loads(json.dumps(report_to_agent_json(raw)))) == raw


def test_agent_json_keys_are_in_virtee_order() -> None:
    raw = (REAL / "oak-genoa-v5-report.bin").read_bytes()
    assert list(report_to_agent_json(raw)) == [
        "version", "guest_svn", "policy", "family_id", "image_id", "vmpl", "sig_algo",
        "current_tcb", "plat_info", "key_info", "report_data", "measurement", "host_data",
        "id_key_digest", "author_key_digest", "report_id", "report_id_ma", "reported_tcb",
        "cpuid_fam_id", "cpuid_mod_id", "cpuid_step", "chip_id", "committed_tcb", "current",
        "committed", "launch_tcb", "launch_mit_vector", "current_mit_vector", "signature",
    ]  # fmt: skip


def test_turin_tcb_has_fmc_and_milan_does_not() -> None:
    turin = report_to_agent_json((REAL / "oak-turin-v5-report.bin").read_bytes())
    # REPORTED_TCB 0001000200000047: fmc 0, bl 1, tee 0, snp 2, ucode 0x47
    assert turin["reported_tcb"] == {"fmc": 0, "bootloader": 1, "tee": 0, "snp": 2, "microcode": 71}
    milan = report_to_agent_json((REAL / "virtee-milan-v2-report.bin").read_bytes())
    # 0300000000000873: bl 3, tee 0, snp 8, ucode 0x73
    assert milan["reported_tcb"] == {
        "fmc": None,
        "bootloader": 3,
        "tee": 0,
        "snp": 8,
        "microcode": 115,
    }
    assert milan["cpuid_fam_id"] is None
    assert milan["launch_mit_vector"] is None
    genoa = report_to_agent_json((REAL / "oak-genoa-v5-report.bin").read_bytes())
    assert (genoa["cpuid_fam_id"], genoa["cpuid_mod_id"], genoa["cpuid_step"]) == (0x19, 0x11, 1)
    assert genoa["launch_mit_vector"] == 1
    # 0x1E8: build 0x2B, minor 0x37, major 1 (firmware 1.55.43)
    assert genoa["current"] == {"major": 1, "minor": 55, "build": 43}
    assert genoa["committed"] == {"major": 1, "minor": 55, "build": 43}


def test_firmware_version_bytes_are_build_minor_major() -> None:
    raw = bytearray((REAL / "oak-genoa-v5-report.bin").read_bytes())
    raw[0x1E8:0x1EB] = bytes([7, 8, 9])
    assert report_to_agent_json(bytes(raw))["current"] == {"major": 9, "minor": 8, "build": 7}


def _report_strategy() -> st.SearchStrategy[bytes]:
    """Random v5 Genoa-shaped reports with zero reserved bytes."""

    def build(payload: bytes, legacy_tcbs: bool) -> bytes:
        raw = bytearray(REPORT_SIZE)
        cursor = 0
        for spec in FIELDS:
            raw[spec.offset : spec.offset + spec.size] = payload[cursor : cursor + spec.size]
            cursor += spec.size
        raw[0:4] = (5).to_bytes(4, "little")
        raw[0x188] = 0x19 if legacy_tcbs else 0x1A
        for spec in FIELDS:
            if spec.kind == "tcb":
                used = (0, 1, 6, 7) if legacy_tcbs else (0, 1, 2, 3, 7)
                for i in range(8):
                    if i not in used:
                        raw[spec.offset + i] = 0
            if spec.kind == "version":
                raw[spec.offset + 3] = 0
        raw[OFF_SIGNATURE_R : OFF_SIGNATURE_S + 72] = payload[cursor : cursor + 144]
        return bytes(raw)

    total = sum(f.size for f in FIELDS) + 144
    return st.builds(build, st.binary(min_size=total, max_size=total), st.booleans())


@given(_report_strategy())
def test_any_report_round_trips(raw: bytes) -> None:
    assert parse_agent_evidence(evidence_to_agent_json(raw, [])).report == raw


def test_reserved_non_zero_bytes_are_refused() -> None:
    raw = bytearray((REAL / "oak-genoa-v5-report.bin").read_bytes())
    raw[0x4C] = 1
    with pytest.raises(AgentJsonError, match="0x04C is reserved"):
        report_to_agent_json(bytes(raw))


def _doc() -> dict[str, object]:
    return {
        "attestation_report": report_to_agent_json((REAL / "oak-genoa-v5-report.bin").read_bytes()),
        "cert_chain": None,
    }


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["attestation_report"].pop("measurement"), "lacks measurement"),
        (lambda d: d["attestation_report"].update(extra=1), "unknown keys extra"),
        (lambda d: d["attestation_report"].update(measurement=[0] * 47), "must have 48 elements"),
        (lambda d: d["attestation_report"].update(vmpl="0"), "vmpl must be an integer"),
        (lambda d: d["attestation_report"].update(vmpl=True), "vmpl must be an integer"),
        (lambda d: d["attestation_report"].update(policy=1 << 64), "fit in 64"),
        (lambda d: d["attestation_report"]["report_data"].__setitem__(3, 256), r"report_data\[3\]"),
        (lambda d: d["attestation_report"]["reported_tcb"].update(fmc=1), "fmc is set"),
        (lambda d: d["attestation_report"]["signature"].pop("s"), "signature lacks s"),
        (lambda d: d.update(cert_chain={}), "cert_chain must be an array"),
        (lambda d: d.update(cert_chain=[{"cert_type": "XYZ", "data": []}]), "not a known"),
        (lambda d: d.update(cert_chain=[{"cert_type": {"OTHER": "nope"}, "data": []}]), "UUID"),
        (lambda d: d.update(other=1), "unknown keys other"),
        (lambda d: d.pop("attestation_report"), "lacks attestation_report"),
    ],
)
def test_malformed_agent_json_names_the_problem(mutate: object, message: str) -> None:
    doc = _doc()
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(AgentJsonError, match=message):
        parse_agent_evidence(json.dumps(doc))


def test_not_json_is_refused() -> None:
    with pytest.raises(AgentJsonError, match="not JSON"):
        parse_agent_evidence(b"\xff\xfe")
    with pytest.raises(AgentJsonError, match="must be a JSON object"):
        parse_agent_evidence("[1]")


def test_cert_chain_entries_are_ordered_signer_first_and_non_certificates_dropped() -> None:
    doc = _doc()
    doc["cert_chain"] = [
        {"cert_type": "ARK", "data": [3]},
        {"cert_type": "CRL", "data": [9]},
        {"cert_type": {"OTHER": "00000000-0000-0000-0000-000000000001"}, "data": [8]},
        {"cert_type": "ASK", "data": [2]},
        {"cert_type": "Empty", "data": []},
        {"cert_type": "VCEK", "data": [1]},
    ]
    evidence = parse_agent_evidence(json.dumps(doc))
    assert evidence.certificates == (b"\x01", b"\x02", b"\x03")
    assert evidence.cert_chain is not None
    assert evidence.cert_chain[2] == AgentCertEntry(
        "OTHER:00000000-0000-0000-0000-000000000001", b"\x08"
    )
    # and the emulator-side serialiser writes the OTHER form back
    text = evidence_to_agent_json(evidence.report, list(evidence.cert_chain))
    assert json.loads(text)["cert_chain"][2]["cert_type"] == {
        "OTHER": "00000000-0000-0000-0000-000000000001"
    }


def test_the_agent_fields_carry_exactly_the_report_layouts_non_reserved_bytes() -> None:
    """The converter has no byte layout of its own: its fields tile the one report LAYOUT."""
    carried = bytearray(REPORT_SIZE)
    for spec in FIELDS:
        for index in range(spec.offset, spec.offset + spec.size):
            carried[index] += 1
    for index in range(OFF_SIGNATURE_R, OFF_SIGNATURE_S + SIGNATURE_COMPONENT_SIZE):
        carried[index] += 1
    for layout_spec in LAYOUT:
        wanted = 0 if layout_spec.reserved else 1
        covered = set(carried[layout_spec.offset : layout_spec.end])
        assert covered == {wanted}, layout_spec.describe()
