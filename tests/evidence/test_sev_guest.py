"""sev-guest provider: the ctypes ABI and the ioctl flow against an injected kernel."""

from __future__ import annotations

import ctypes
import errno
import hashlib
from pathlib import Path

import pytest

from attestation.simulated_amd import SimulatedAmd
from runner.errors import EvidenceError, EvidenceUnavailableError
from runner.evidence.certtable import GUID_ARK, GUID_ASK, GUID_VCEK
from runner.evidence.common import ReportDataMismatchError
from runner.evidence.sev_guest import (
    SNP_GET_DERIVED_KEY,
    SNP_GET_EXT_REPORT,
    SNP_GET_REPORT,
    SevGuestProvider,
    SnpExtReportReq,
    SnpGuestRequestIoctl,
    SnpReportReq,
    SnpReportResp,
    describe_errors,
)
from tests.evidence.emulators import IoctlEmulator, assert_chain_signs


def _ioc(direction: int, kind: str, number: int, size: int) -> int:
    """Linux _IOC encoding: dir << 30 | size << 16 | type << 8 | nr."""
    return direction << 30 | size << 16 | ord(kind) << 8 | number


def test_struct_sizes_and_offsets_match_the_uapi_header() -> None:
    assert ctypes.sizeof(SnpReportReq) == 96
    assert SnpReportReq.user_data.offset == 0
    assert SnpReportReq.vmpl.offset == 64
    assert SnpReportReq.rsvd.offset == 68
    assert ctypes.sizeof(SnpExtReportReq) == 112
    assert SnpExtReportReq.certs_address.offset == 96
    assert SnpExtReportReq.certs_len.offset == 104
    assert ctypes.sizeof(SnpReportResp) == 4000
    assert ctypes.sizeof(SnpGuestRequestIoctl) == 32
    assert SnpGuestRequestIoctl.msg_version.offset == 0
    assert SnpGuestRequestIoctl.req_data.offset == 8
    assert SnpGuestRequestIoctl.resp_data.offset == 16
    assert SnpGuestRequestIoctl.exitinfo2.offset == 24


def test_ioctl_numbers() -> None:
    read_write = 3
    assert _ioc(read_write, "S", 0, 32) == SNP_GET_REPORT == 0xC0205300
    assert _ioc(read_write, "S", 1, 32) == SNP_GET_DERIVED_KEY == 0xC0205301
    assert _ioc(read_write, "S", 2, 32) == SNP_GET_EXT_REPORT == 0xC0205302


def test_exitinfo2_split() -> None:
    arg = SnpGuestRequestIoctl(exitinfo2=(2 << 32) | 0x16)
    assert (arg.fw_error, arg.vmm_error) == (0x16, 2)
    assert describe_errors(0x16, 2) == "fw_error=0x16 (INVALID_PARAM), vmm_error=0x2 (BUSY)"
    assert describe_errors(0x27, 0) == "fw_error=0x27 (INVALID_KEY), vmm_error=0x0 (none)"


@pytest.fixture
def device(tmp_path: Path) -> Path:
    path = tmp_path / "sev-guest"
    path.write_bytes(b"")  # the emulator replaces the driver; open(2) needs a file
    return path


def test_ext_report_with_certificates(device: Path, sim_amd: SimulatedAmd, binding: bytes) -> None:
    kernel = IoctlEmulator(sim_amd)
    evidence = SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert evidence.provider == "sev-guest"
    assert evidence.report[0x50:0x90] == hashlib.sha512(binding).digest()
    assert_chain_signs(evidence.report, evidence.cert_chain, sim_amd)
    # the 3-certificate table needs 2 pages: the first call learns the size
    assert kernel.calls == [(SNP_GET_EXT_REPORT, 4096), (SNP_GET_EXT_REPORT, 8192)]


def test_ext_report_small_table_fits_first_page(
    device: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    kernel = IoctlEmulator(sim_amd, certs=[(GUID_VCEK, b"v"), (GUID_ASK, b"a"), (GUID_ARK, b"r")])
    evidence = SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert evidence.cert_chain == (b"v", b"a", b"r")
    assert kernel.calls == [(SNP_GET_EXT_REPORT, 4096)]


def test_no_certificates_from_host(device: Path, sim_amd: SimulatedAmd, binding: bytes) -> None:
    kernel = IoctlEmulator(sim_amd, certs=[])
    assert SevGuestProvider(device, ioctl=kernel).obtain(binding).cert_chain == ()


@pytest.mark.parametrize("no_fw_call", [0xFFFF_FFFF_FFFF_FFFF, 0xFF])
def test_fallback_to_plain_report(
    device: Path, sim_amd: SimulatedAmd, binding: bytes, no_fw_call: int
) -> None:
    """The kernel refuses SNP_GET_EXT_REPORT before any firmware call, leaving
    SEV_RET_NO_FW_CALL in exitinfo2 (both spellings): falling back is safe then."""
    kernel = IoctlEmulator(sim_amd, ext_supported=False, no_fw_call_value=no_fw_call)
    evidence = SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert evidence.cert_chain == ()
    assert evidence.report[0x50:0x90] == hashlib.sha512(binding).digest()
    assert [c[0] for c in kernel.calls] == [SNP_GET_EXT_REPORT, SNP_GET_REPORT]


def test_no_fallback_after_a_firmware_error(
    device: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    """EINVAL that did reach the firmware (fw_error set) may have wiped the VMPCK: stop."""
    kernel = IoctlEmulator(sim_amd, fail_errno=errno.EINVAL, fw_error=0x16)
    with pytest.raises(EvidenceError) as info:
        SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert type(info.value) is EvidenceError
    assert str(info.value) == (
        "sev-guest: SNP_GET_EXT_REPORT failed with EINVAL: fw_error=0x16 (INVALID_PARAM), "
        "vmm_error=0x0 (none) (after a firmware error the kernel disables the VMPCK: "
        "restart the VM)"
    )
    assert [c[0] for c in kernel.calls] == [SNP_GET_EXT_REPORT]


def test_kernel_refusal_without_firmware_call_is_named(
    device: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    """EIO that never reached the firmware: no VMPCK warning, the sentinel is named."""
    kernel = IoctlEmulator(sim_amd, fail_errno=errno.EIO, fw_error=0xFFFFFFFF, vmm_error=0xFFFFFFFF)
    with pytest.raises(EvidenceError) as info:
        SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert type(info.value) is EvidenceError
    assert str(info.value) == (
        "sev-guest: SNP_GET_EXT_REPORT failed with EIO: "
        "no firmware call (exitinfo2=0xffffffffffffffff)"
    )
    assert len(kernel.calls) == 1


def test_firmware_error_is_named_and_not_retried(
    device: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    kernel = IoctlEmulator(sim_amd, fail_errno=errno.EIO, fw_error=0x16)
    with pytest.raises(EvidenceError) as info:
        SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert type(info.value) is EvidenceError
    assert str(info.value) == (
        "sev-guest: SNP_GET_EXT_REPORT failed with EIO: fw_error=0x16 (INVALID_PARAM), "
        "vmm_error=0x0 (none) (after a firmware error the kernel disables the VMPCK: "
        "restart the VM)"
    )
    assert len(kernel.calls) == 1


def test_vmm_busy_is_named(device: Path, sim_amd: SimulatedAmd, binding: bytes) -> None:
    kernel = IoctlEmulator(sim_amd, fail_errno=errno.EAGAIN, vmm_error=2)
    with pytest.raises(
        EvidenceError, match=r"vmm_error=0x2 \(BUSY\) \(the host is throttling"
    ) as caught:
        SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert type(caught.value) is EvidenceError


def test_bad_status_in_response(device: Path, sim_amd: SimulatedAmd, binding: bytes) -> None:
    kernel = IoctlEmulator(sim_amd, bad_status=0x27)
    with pytest.raises(EvidenceError, match=r"firmware status 0x27 \(INVALID_KEY\)") as caught:
        SevGuestProvider(device, ioctl=kernel).obtain(binding)
    assert type(caught.value) is EvidenceError


def test_missing_device_is_unavailable(tmp_path: Path, binding: bytes) -> None:
    with pytest.raises(EvidenceUnavailableError, match="does not exist") as caught:
        SevGuestProvider(tmp_path / "none").obtain(binding)
    assert type(caught.value) is EvidenceUnavailableError


def test_report_over_other_data_is_refused(
    device: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    def lying_kernel(fd: int, request: int, arg: SnpGuestRequestIoctl) -> None:
        # user_data is at offset 0 of both request structures: zero it before "signing"
        ctypes.memset(arg.req_data, 0, 64)
        IoctlEmulator(sim_amd, certs=[])(fd, request, arg)

    with pytest.raises(ReportDataMismatchError, match="is not what was requested") as caught:
        SevGuestProvider(device, ioctl=lying_kernel).obtain(binding)
    assert type(caught.value) is ReportDataMismatchError
