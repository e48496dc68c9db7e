"""Reference values: `attested-replay measure` and `attested-replay init-data`.

`measure` is checked two ways: it reproduces the launch digests that sev-snp-measure 0.0.13
publishes in its own ``tests/test_guest.py`` for its fixture ``ovmf_AmdSev_suffix.bin``
(provenance: tests/evidence/fixtures/README.md), and it agrees with the sev-snp-measure CLI on
a synthetic OVMF image built here (kernel, initrd and command-line plumbing).
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import uuid
from pathlib import Path

import pytest
from sevsnpmeasure import guest

from attestation.verify.policy import Policy
from runner.cli import main
from runner.errors import UsageError
from runner.reference.measure import MeasureInputs
from tests.tools import installed_tool

IMAGE = "registry.example/replay/runner@sha256:" + "ab" * 32
FIXTURE_OVMF = Path(__file__).parent / "fixtures" / "ovmf_AmdSev_suffix.bin"

FOOTER_GUID = "96b582de-1fb2-45f7-baea-a366c55a082d"
HASH_TABLE_GUID = "7255371f-3a3b-4b04-927b-1da6efa8d454"
RESET_BLOCK_GUID = "00f771de-1a7e-4fcb-890e-68c77e2fb44e"
METADATA_GUID = "dc886566-984a-4798-a75e-5585a7bf67cc"
#: (gpa, size, type): SEC memory, secrets page, CPUID page, kernel hashes page, SEC memory.
SECTIONS = (
    (0x800000, 0x9000, 1),
    (0x80D000, 0x1000, 2),
    (0x80E000, 0x1000, 3),
    (0x80F000, 0x1000, 0x10),
    (0x810000, 0x10000, 1),
)


def _entry(guid: str, data: bytes) -> bytes:
    """An OVMF footer-table entry: data, then u16 size (data + 18), then the GUID (LE form)."""
    return data + struct.pack("<H", len(data) + 18) + uuid.UUID(guid).bytes_le


def build_test_ovmf(path: Path) -> Path:
    """A 4 KiB OVMF image with an SEV metadata block and a GUIDed footer table (the layout
    sev-snp-measure's ovmf.py parses: table ends 32 bytes before the end of the image)."""
    size = 4096
    image = bytearray(b"\xf4" * size)  # hlt
    metadata = b"ASEV" + struct.pack("<III", 16 + 12 * len(SECTIONS), 1, len(SECTIONS))
    metadata += b"".join(struct.pack("<III", *section) for section in SECTIONS)
    metadata_offset = 1024
    image[metadata_offset : metadata_offset + len(metadata)] = metadata
    table = (
        _entry(RESET_BLOCK_GUID, struct.pack("<I", 0xFFFFF000))
        + _entry(HASH_TABLE_GUID, struct.pack("<II", 0x80FC00, 0x400))
        + _entry(METADATA_GUID, struct.pack("<I", size - metadata_offset))
    )
    footer = struct.pack("<H", len(table) + 18) + uuid.UUID(FOOTER_GUID).bytes_le
    end = size - 32
    image[end - len(footer) - len(table) : end] = table + footer
    path.write_bytes(bytes(image))
    return path


@pytest.fixture
def boot_files(tmp_path: Path) -> dict[str, Path]:
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"kernel image" * 100)
    initrd = tmp_path / "initrd"
    initrd.write_bytes(b"initrd" * 50)
    return {"ovmf": build_test_ovmf(tmp_path / "AMDSEV.fd"), "kernel": kernel, "initrd": initrd}


def _ours(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["measure", *args]) == 0
    return capsys.readouterr().out.strip()


def _theirs(*args: str) -> str:
    exe = installed_tool("sev-snp-measure")
    assert exe is not None
    out = subprocess.run(
        [exe, "--mode", "snp", "--output-format", "hex", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


APPEND = "console=hvc0 agent.guest_components_rest_api=attestation"


@pytest.mark.parametrize(
    ("vcpus", "features", "with_initrd"),
    [(1, "0x1", True), (3, "0x1", False), (2, "0x21", True)],
)
def test_measure_matches_sev_snp_measure_cli(
    boot_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    vcpus: int,
    features: str,
    with_initrd: bool,
) -> None:
    common = [
        f"--ovmf={boot_files['ovmf']}",
        f"--kernel={boot_files['kernel']}",
        f"--append={APPEND}",
        f"--vcpus={vcpus}",
        "--vcpu-type=EPYC-v4",
        f"--guest-features={features}",
    ]
    if with_initrd:
        common.append(f"--initrd={boot_files['initrd']}")
    ours = _ours(capsys, *common)
    assert len(ours) == 96
    assert ours == _theirs(*common)


def test_inputs_change_the_measurement(
    boot_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base = [f"--ovmf={boot_files['ovmf']}", f"--kernel={boot_files['kernel']}", "--vcpus=1"]
    plain = _ours(capsys, *base, "--append=console=hvc0")
    with_agent = _ours(capsys, *base, f"--append={APPEND}")
    two_vcpus = _ours(capsys, *base[:2], "--vcpus=2", f"--append={APPEND}")
    assert len({plain, with_agent, two_vcpus}) == 3


def test_emit_expected_is_a_valid_policy_key(
    boot_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hex_value = _ours(capsys, f"--ovmf={boot_files['ovmf']}", "--vcpus=1")
    snippet = json.loads(
        _ours(capsys, f"--ovmf={boot_files['ovmf']}", "--vcpus=1", "--emit-expected")
    )
    assert snippet == {"measurements": [hex_value]}
    assert Policy.model_validate(snippet).measurements == (hex_value,)


def test_measure_help_explains_cmdline_and_vcpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measure", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "agent.guest_components_rest_api=attestation" in text
    assert "default_vcpus plus the pod's CPU limits" in text


def test_measure_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="--initrd and --append need --kernel"):
        MeasureInputs(ovmf=tmp_path, vcpus=1, append="x")
    with pytest.raises(UsageError, match="at least 1"):
        MeasureInputs(ovmf=tmp_path, vcpus=0)
    missing = tmp_path / "missing.fd"
    assert main(["measure", "--ovmf", str(missing), "--vcpus", "1"]) == 9
    assert f"error: --ovmf {missing}: no such file" in capsys.readouterr().err


def test_fixture_is_the_published_one() -> None:
    data = FIXTURE_OVMF.read_bytes()
    assert hashlib.sha256(data).hexdigest() == (
        "8f765dfabc127fc0a938a0744a3103ec15864d7d794eb4c398aa976b6d6ab16c"
    )
    assert guest.calc_snp_ovmf_hash(str(FIXTURE_OVMF)).hex() == PUBLISHED_OVMF_HASH


#: sev-snp-measure 0.0.13, tests/test_guest.py: OVMF hash of the fixture, and launch digests
#: (test name, vCPUs, guest features, command line or None for no kernel, VMM, expected).
PUBLISHED_OVMF_HASH = "086e2e9149ebf45abdc3445fba5b2da8270bdbb04094d7a2c37faaa4b24af3aa16aff8c374c2a55c467a50da6d466b74"
PUBLISHED = [
    ("test_snp_default", 1, "0x21", "console=ttyS0 loglevel=7", "QEMU",
     "803f691094946e42068aaa3a8f9e26a5c89f36f7b73ecfb28c653360fe4b3aba7e534442e7e1e17895dfe778d0228977"),
    ("test_snp_guest_feature_snp_only", 1, "0x1", "console=ttyS0 loglevel=7", "QEMU",
     "6d287813eb5222d770f75005c664e34c204f385ce832cc2ce7d0d6f354454362f390ef83a92046c042e706363b4b08fa"),
    ("test_snp_without_kernel_default", 1, "0x21", None, "QEMU",
     "e1e1ca029dd7973ab9513295be68198472dcd4fc834bd9af9b63f6e8a1674dbf281a9278a4a2ebe0eed9f22adbcd0e2b"),
    ("test_snp_without_kernel_feature_snp_only", 1, "0x1", None, "QEMU",
     "19358ba9a7615534a9a1e2f0dfc29384dcd4dcb7062ff9c6013b26869a5fc6ecabe033c48dd6f6db5d6d76e7c5df632d"),
    ("test_snp_with_multiple_vcpus_default", 4, "0x21", "", "QEMU",
     "4953b1fb416fa874980e8442b3706d345926d5f38879134e00813c5d7abcbe78eafe7b422907be0b4698e2414a631942"),
    ("test_snp_with_multiple_vcpus_feature_snp_only", 4, "0x1", "", "QEMU",
     "5061fffb019493a903613d56d54b94912a1a2f9e4502385f5c194616753720a92441310ba6c4933de877c36e23046ad5"),
    ("test_snp_ec2_default", 1, "0x21", "", "ec2",
     "0ce9ccc06bab55eebe8abc234f3df6514883977a68a591b71052498ab52b2f1aa415db338033946ef93aa8278c0d67fb"),
    ("test_snp_ec2_feature_snp_only", 1, "0x1", "", "ec2",
     "0883bd0eeb716e65b7b977a321c278d1e51b33b5c655fab985443bbcc65c086b9c15e8a0bd8811050dec7e24964e5056"),
    ("test_snp_gce_default", 1, "0x1", "", "gce",
     "5da7106cf14cf46b1725ebab123eb9e53bd46a1e9f400cd0c08e7827b04b688ea8b4e403c8404efed4397ea5d5d0722e"),
    ("test_snp_gce_with_multiple_vcpus_default", 4, "0x1", "", "gce",
     "5c5debf100fc339f90276e761ee1f1658d08922c3b20e2a2e6c7a6c3370b2452a15a00eae11886a93d6fd1e7ab81e29d"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "vcpus", "features", "append", "vmm", "expected"),
    PUBLISHED,
    ids=[p[0] for p in PUBLISHED],
)
def test_measure_reproduces_published_sev_snp_measure_vectors(  # noqa: PLR0917
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    vcpus: int,
    features: str,
    append: str | None,
    vmm: str,
    expected: str,
) -> None:
    args = [f"--ovmf={FIXTURE_OVMF}", f"--vcpus={vcpus}", f"--guest-features={features}"]
    args.append(f"--vmm-type={vmm}")
    if append is not None:  # upstream passes /dev/null as kernel and initrd: empty files
        empty = tmp_path / "empty"
        empty.write_bytes(b"")
        args += [f"--kernel={empty}", f"--initrd={empty}", f"--append={append}"]
    assert _ours(capsys, *args) == expected, name


def test_measure_with_precomputed_ovmf_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sev-snp-measure test_snp_ovmf_hash_gen_default: --ovmf-hash gives the same digest."""
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    digest = _ours(
        capsys,
        f"--ovmf={FIXTURE_OVMF}",
        f"--ovmf-hash={PUBLISHED_OVMF_HASH}",
        f"--kernel={empty}",
        f"--initrd={empty}",
        "--append=",
        "--vcpus=1",
        "--guest-features=0x21",
    )
    assert digest == (
        "329c8ce0972ae52343b64d34a434a86f245dfd74f5ed7aae15d22efc78fb9683632b9b50e4e1d7fa41179ef98a7ef198"
    )
