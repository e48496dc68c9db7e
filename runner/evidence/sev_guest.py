"""Evidence from the ``/dev/sev-guest`` ioctls (``include/uapi/linux/sev-guest.h``).

``SNP_GET_EXT_REPORT`` returns the report plus the host's certificate table; kernels or hosts
without extended-report support make us fall back to ``SNP_GET_REPORT``. The ioctl call is a
parameter so tests can inject a function that plays the kernel's part at the syscall boundary.

Careful: an error from the AMD secure processor makes the kernel wipe the VM's VMPCK, after
which every request fails. We therefore never retry after a firmware error, and fall back to
``SNP_GET_REPORT`` only when the kernel says no firmware call was made.

``exitinfo2`` when the ioctl fails before reaching the firmware: the kernel preloads it with
``SEV_RET_NO_FW_CALL`` and copies it back whenever it is non-zero, so user space sees
``0xff`` (kernels before the ``fw_error``/``vmm_error`` split) or all ones (later kernels).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final

from attestation.abi.report import REPORT_SIZE
from attestation.envelope.binding import report_data_from_canonical
from runner.errors import EvidenceError, EvidenceUnavailableError
from runner.evidence.base import Evidence
from runner.evidence.certtable import CertTableError, chain_from_table, parse_cert_table
from runner.evidence.common import check_report

DEFAULT_DEVICE: Final = Path("/dev/sev-guest")

SNP_GET_REPORT: Final = 0xC0205300
SNP_GET_DERIVED_KEY: Final = 0xC0205301
SNP_GET_EXT_REPORT: Final = 0xC0205302

PAGE_SIZE: Final = 4096
#: SEV_FW_BLOB_MAX_SIZE in the kernel: the largest certificate buffer it accepts.
MAX_CERTS_LEN: Final = 4 * PAGE_SIZE
MSG_VERSION: Final = 1
RESP_BUFFER_SIZE: Final = 4000
#: MSG_REPORT_RSP header: status u32, report_size u32, 24 reserved bytes; report follows.
RESP_HEADER: Final = struct.Struct("<II24x")
RESP_REPORT_OFFSET: Final = 0x20

#: ``exitinfo2`` values meaning "the request never reached the firmware" (see module doc).
NO_FW_CALL_EXITINFO2: Final = frozenset({0xFF, 0xFFFF_FFFF_FFFF_FFFF})
#: errno values meaning "this kernel/host does not do extended reports" (fall back).
_UNSUPPORTED_ERRNOS: Final = frozenset({errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS})

VMM_ERR_INVALID_LEN: Final = 1
VMM_ERR_BUSY: Final = 2
VMM_ERROR_NAMES: Final = {VMM_ERR_INVALID_LEN: "INVALID_LEN", VMM_ERR_BUSY: "BUSY"}

#: SEV firmware status codes (``include/uapi/linux/psp-sev.h`` ``sev_ret_code``).
FW_ERROR_NAMES: Final = {
    0x00: "SUCCESS",
    0x01: "INVALID_PLATFORM_STATE",
    0x02: "INVALID_GUEST_STATE",
    0x03: "INVALID_CONFIG",
    0x04: "INVALID_LEN",
    0x05: "ALREADY_OWNED",
    0x06: "INVALID_CERTIFICATE",
    0x07: "POLICY_FAILURE",
    0x08: "INACTIVE",
    0x09: "INVALID_ADDRESS",
    0x0A: "BAD_SIGNATURE",
    0x0B: "BAD_MEASUREMENT",
    0x0C: "ASID_OWNED",
    0x0D: "INVALID_ASID",
    0x0E: "WBINVD_REQUIRED",
    0x0F: "DFFLUSH_REQUIRED",
    0x10: "INVALID_GUEST",
    0x11: "INVALID_COMMAND",
    0x12: "ACTIVE",
    0x13: "HWSEV_RET_PLATFORM",
    0x14: "HWSEV_RET_UNSAFE",
    0x15: "UNSUPPORTED",
    0x16: "INVALID_PARAM",
    0x17: "RESOURCE_LIMIT",
    0x18: "SECURE_DATA_INVALID",
    0x19: "INVALID_PAGE_SIZE",
    0x1A: "INVALID_PAGE_STATE",
    0x1B: "INVALID_MDATA_ENTRY",
    0x1C: "INVALID_PAGE_OWNER",
    0x1D: "INVALID_PAGE_AEAD_OFLOW",
    0x20: "RMP_INIT_REQUIRED",
    0x21: "BAD_SVN",
    0x22: "BAD_VERSION",
    0x23: "SHUTDOWN_REQUIRED",
    0x24: "UPDATE_FAILED",
    0x25: "RESTORE_REQUIRED",
    0x26: "RMP_INITIALIZATION_FAILED",
    0x27: "INVALID_KEY",
    0xFFFFFFFF: "NO_FW_CALL",
}


class SnpReportReq(ctypes.Structure):
    """``struct snp_report_req`` (96 bytes)."""

    _fields_ = (
        ("user_data", ctypes.c_uint8 * 64),
        ("vmpl", ctypes.c_uint32),
        ("rsvd", ctypes.c_uint8 * 28),
    )


class SnpExtReportReq(ctypes.Structure):
    """``struct snp_ext_report_req`` (112 bytes: 108 plus tail padding to 8)."""

    _fields_ = (
        ("data", SnpReportReq),
        ("certs_address", ctypes.c_uint64),
        ("certs_len", ctypes.c_uint32),
    )


class SnpReportResp(ctypes.Structure):
    """``struct snp_report_resp`` (4000 bytes)."""

    _fields_ = (("data", ctypes.c_uint8 * RESP_BUFFER_SIZE),)


class SnpGuestRequestIoctl(ctypes.Structure):
    """``struct snp_guest_request_ioctl`` (32 bytes); ``exitinfo2`` = fw_error | vmm_error << 32."""

    _fields_ = (
        ("msg_version", ctypes.c_uint8),
        ("req_data", ctypes.c_uint64),
        ("resp_data", ctypes.c_uint64),
        ("exitinfo2", ctypes.c_uint64),
    )

    @property
    def fw_error(self) -> int:
        return int(self.exitinfo2) & 0xFFFFFFFF

    @property
    def vmm_error(self) -> int:
        return int(self.exitinfo2) >> 32


#: ``ioctl(fd, request, arg)``: returns normally or raises ``OSError`` with the errno.
IoctlFunction = Callable[[int, int, SnpGuestRequestIoctl], None]


def _real_ioctl(fd: int, request: int, arg: SnpGuestRequestIoctl) -> None:
    fcntl.ioctl(fd, request, arg, True)  # noqa: FBT003 (mutate_flag is positional-only)


def _guest_request(
    req: SnpReportReq | SnpExtReportReq, resp: SnpReportResp
) -> SnpGuestRequestIoctl:
    """The ioctl argument pointing at ``req`` and ``resp`` (both must outlive the call)."""
    return SnpGuestRequestIoctl(
        msg_version=MSG_VERSION,
        req_data=ctypes.addressof(req),
        resp_data=ctypes.addressof(resp),
    )


def reached_firmware(arg: SnpGuestRequestIoctl) -> bool:
    """False when ``exitinfo2`` says the failed request never got to the secure processor."""
    return int(arg.exitinfo2) not in NO_FW_CALL_EXITINFO2 and int(arg.exitinfo2) != 0


def describe_errors(fw_error: int, vmm_error: int) -> str:
    """``fw_error=0x16 (INVALID_PARAM), vmm_error=0x1 (INVALID_LEN)`` style text."""
    if (vmm_error << 32 | fw_error) in NO_FW_CALL_EXITINFO2:
        return f"no firmware call (exitinfo2=0x{vmm_error << 32 | fw_error:x})"
    fw_name = FW_ERROR_NAMES.get(fw_error, "unknown")
    vmm_name = VMM_ERROR_NAMES.get(vmm_error, "none" if vmm_error == 0 else "unknown")
    return f"fw_error=0x{fw_error:x} ({fw_name}), vmm_error=0x{vmm_error:x} ({vmm_name})"


class SevGuestProvider:
    """SEV-SNP evidence through ``/dev/sev-guest``; REPORT_DATA = SHA-512 of the binding."""

    name = "sev-guest"

    def __init__(
        self,
        device: Path = DEFAULT_DEVICE,
        *,
        vmpl: int = 0,
        ioctl: IoctlFunction = _real_ioctl,
    ) -> None:
        if not 0 <= vmpl <= 3:
            raise ValueError("vmpl must be 0..3")
        self.device = device
        self.vmpl = vmpl
        self.ioctl = ioctl

    def check_available(self) -> None:
        if not self.device.exists():
            raise self._missing()

    def _missing(self) -> EvidenceUnavailableError:
        return EvidenceUnavailableError(
            f"sev-guest: {self.device} does not exist (not an SEV-SNP guest, or the "
            "device is not passed into this container)"
        )

    def obtain(self, canonical_binding: bytes) -> Evidence:
        report_data = report_data_from_canonical(canonical_binding, "sha512")
        try:
            fd = os.open(self.device, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise self._missing() from exc
        except OSError as exc:
            raise EvidenceUnavailableError(f"sev-guest: cannot open {self.device}: {exc}") from exc
        try:
            ext = self._ext_report(fd, report_data)
            report, chain = ext if ext is not None else (self._plain_report(fd, report_data), ())
        finally:
            os.close(fd)
        return Evidence(
            report=check_report(report, report_data, provider=self.name),
            cert_chain=chain,
            provider=self.name,
            report_data_encoding="sha512",
        )

    def _report_req(self, report_data: bytes) -> SnpReportReq:
        req = SnpReportReq()
        ctypes.memmove(req.user_data, report_data, len(report_data))
        req.vmpl = self.vmpl
        return req

    def _ext_report(self, fd: int, report_data: bytes) -> tuple[bytes, tuple[bytes, ...]] | None:
        """Report plus certificates, or ``None`` if extended reports are not supported."""
        certs_len = PAGE_SIZE
        for _ in range(2):  # the first try may only learn the size the host needs
            certs = ctypes.create_string_buffer(certs_len)
            req = SnpExtReportReq(
                data=self._report_req(report_data),
                certs_address=ctypes.addressof(certs),
                certs_len=certs_len,
            )
            resp = SnpReportResp()
            arg = _guest_request(req, resp)
            try:
                self.ioctl(fd, SNP_GET_EXT_REPORT, arg)
            except OSError as exc:
                if exc.errno == errno.EIO and arg.vmm_error == VMM_ERR_INVALID_LEN:
                    needed = int(req.certs_len)
                    if needed <= certs_len or needed % PAGE_SIZE or needed > MAX_CERTS_LEN:
                        raise EvidenceError(
                            f"sev-guest: the host asks for a {needed}-byte certificate buffer "
                            f"(must be a multiple of {PAGE_SIZE} up to {MAX_CERTS_LEN})"
                        ) from exc
                    certs_len = needed
                    continue
                if exc.errno in _UNSUPPORTED_ERRNOS and not reached_firmware(arg):
                    return None
                raise self._ioctl_error("SNP_GET_EXT_REPORT", exc, arg) from exc
            report = self._report_from_response(resp)
            try:
                table = parse_cert_table(certs.raw[: int(req.certs_len)] if req.certs_len else b"")
            except CertTableError as exc:
                raise EvidenceError(f"sev-guest: certificate table: {exc}") from exc
            return report, chain_from_table(table)
        raise EvidenceError("sev-guest: the host kept changing the certificate buffer size")

    def _plain_report(self, fd: int, report_data: bytes) -> bytes:
        req = self._report_req(report_data)
        resp = SnpReportResp()
        arg = _guest_request(req, resp)
        try:
            self.ioctl(fd, SNP_GET_REPORT, arg)
        except OSError as exc:
            raise self._ioctl_error("SNP_GET_REPORT", exc, arg) from exc
        return self._report_from_response(resp)

    def _ioctl_error(self, what: str, exc: OSError, arg: SnpGuestRequestIoctl) -> EvidenceError:
        errno_name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        # No hint when the kernel refused the request itself: the VMPCK is then untouched.
        hint = ""
        if reached_firmware(arg) and arg.vmm_error == VMM_ERR_BUSY:
            hint = " (the host is throttling guest requests; retry later)"
        elif reached_firmware(arg) and arg.fw_error:
            hint = " (after a firmware error the kernel disables the VMPCK: restart the VM)"
        return EvidenceError(
            f"sev-guest: {what} failed with {errno_name}: "
            f"{describe_errors(arg.fw_error, arg.vmm_error)}{hint}"
        )

    def _report_from_response(self, resp: SnpReportResp) -> bytes:
        data = bytes(resp.data)
        status, size = RESP_HEADER.unpack_from(data, 0)
        if status != 0:
            raise EvidenceError(
                f"sev-guest: firmware status 0x{status:x} "
                f"({FW_ERROR_NAMES.get(status, 'unknown')}) in the report response"
            )
        if size != REPORT_SIZE:
            raise EvidenceError(
                f"sev-guest: response says the report is {size} bytes, expected {REPORT_SIZE}"
            )
        return data[RESP_REPORT_OFFSET : RESP_REPORT_OFFSET + size]
