"""Reference values: `attested-replay measure` and `attested-replay init-data`.

Published sev-snp-measure vectors (tests/test_guest.py in its repository) need the fixture
``tests/fixtures/ovmf_AmdSev_suffix.bin``, which is not shipped in the PyPI sdist or wheel,
so these tests cross-check our command against sev-snp-measure's own CLI on a synthetic
OVMF image built here in the documented footer-table format (see build_test_ovmf).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import shutil
import struct
import subprocess
import tomllib
import uuid
from pathlib import Path

import pytest

from attestation.policy import Policy
from runner.cli import main
from runner.errors import UsageError
from runner.reference.initdata import image_policy_json, render_initdata
from runner.reference.measure import MeasureInputs

IMAGE = "registry.example/replay/runner@sha256:" + "ab" * 32

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
    exe = shutil.which("sev-snp-measure")
    assert exe is not None
    out = subprocess.run(  # noqa: S603 (fixed executable, test inputs)
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
def test_measure_matches_sev_snp_measure_cli(  # noqa: PLR0913
    boot_files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    vcpus: int,
    features: str,
    with_initrd: bool,  # noqa: FBT001
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
    snippet = json.loads(_ours(capsys, f"--ovmf={boot_files['ovmf']}", "--vcpus=1", "--emit-expected"))
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
    assert main(["measure", "--ovmf", str(tmp_path / "missing.fd"), "--vcpus", "1"]) == 1
    assert "no such file" in capsys.readouterr().err


# ----------------------------------------------------------------------------- init-data


def test_initdata_document_and_digests(tmp_path: Path) -> None:
    initdata = render_initdata(image=IMAGE)
    doc = tomllib.loads(initdata.toml.decode())
    assert doc["version"] == "0.1.0"
    assert doc["algorithm"] == "sha256"
    assert set(doc["data"]) == {"aa.toml", "cdh.toml", "policy.rego"}
    cdh = tomllib.loads(doc["data"]["cdh.toml"])
    policy = json.loads(cdh["image"]["image_security_policy"])
    assert policy == {
        "default": [{"type": "reject"}],
        "transports": {"docker": {IMAGE: [{"type": "insecureAcceptAnything"}]}},
    }
    assert "default ExecProcessRequest := false" in doc["data"]["policy.rego"]
    assert "default SetPolicyRequest := false" in doc["data"]["policy.rego"]
    assert initdata.host_data == hashlib.sha256(initdata.toml).digest()
    annotation = base64.b64decode(initdata.annotation_value)
    assert gzip.decompress(annotation) == initdata.toml
    assert annotation[4:8] == b"\0\0\0\0"  # gzip MTIME 0: reproducible
    assert render_initdata(image=IMAGE).annotation_value == initdata.annotation_value


@pytest.mark.parametrize("algorithm", ["sha384", "sha512"])
def test_initdata_host_data_is_truncated(algorithm: str) -> None:
    initdata = render_initdata(image=IMAGE, algorithm=algorithm)  # type: ignore[arg-type]
    assert initdata.host_data == hashlib.new(algorithm, initdata.toml).digest()[:32]


def test_initdata_custom_files_round_trip_exactly() -> None:
    tricky = "package agent_policy\n# quote ''' and \"\"\" and a\ttab\ndefault X := true\n"
    aa = "[token_configs.kbs]\nurl = 'http://kbs:8080'\n"
    initdata = render_initdata(image=IMAGE, policy_rego=tricky, aa_toml=aa)
    doc = tomllib.loads(initdata.toml.decode())
    assert doc["data"]["policy.rego"] == tricky
    assert doc["data"]["aa.toml"] == aa


@pytest.mark.parametrize(
    "image", ["registry.example/replay:latest", "replay@sha256:" + "ab" * 32, IMAGE.upper()]
)
def test_initdata_needs_a_pinned_image(image: str) -> None:
    with pytest.raises(UsageError, match="must be pinned by digest"):
        render_initdata(image=image)


def test_initdata_custom_cdh_must_pin_image() -> None:
    with pytest.raises(UsageError, match="does not mention the pinned image"):
        render_initdata(image=IMAGE, cdh_toml="[image]\n")


def test_initdata_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "initdata.toml"
    assert main(["init-data", "--image", IMAGE, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    host_data = hashlib.sha256(out.read_bytes()).hexdigest()
    assert lines[1] == f"HOST_DATA  {host_data}"
    prefix = "annotation io.katacontainers.config.hypervisor.cc_init_data: "
    assert lines[2].startswith(prefix)
    assert gzip.decompress(base64.b64decode(lines[2].removeprefix(prefix))) == out.read_bytes()
    assert main(["init-data", "--image", IMAGE, "--out", str(out), "--emit-expected"]) == 0
    snippet = json.loads(capsys.readouterr().out)
    assert snippet == {"hostData": [host_data]}
    assert Policy.model_validate(snippet).host_data == (host_data,)


def test_image_policy_json_is_stable() -> None:
    assert image_policy_json(IMAGE) == image_policy_json(IMAGE)
    assert json.loads(image_policy_json(IMAGE))["default"] == [{"type": "reject"}]
