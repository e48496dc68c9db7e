"""Faithful stand-ins for the three guest interfaces, driven by the simulated AMD signer.

What is emulated, and how far:

* :class:`AgentEmulator` -- the guest-components REST API as a real HTTP server on loopback
  (pytest-httpserver): ``GET /info`` and ``GET /aa/evidence``. It treats ``runtime_data`` as the
  agent does (raw UTF-8 text, or URL-safe base64 without padding when ``encoding=base64`` and
  the agent is new enough; longer than 64 bytes is an error; zero-padded to 64, no hashing),
  signs a report over it with the simulated signer and answers with the virtee/sev JSON shape.
  Failure modes: attestation disabled (404), backend error (500), slow answer, malformed
  JSON, JSON of the wrong shape, the no-TEE sample attester, null/empty certificate chain.
* :class:`EmulatedConfigfs` -- the kernel side of configfs-tsm on a real temporary directory,
  as a :class:`~runner.evidence.configfs_tsm.ConfigfsAccess` layer: ``mkdir`` creates the
  attributes (``provider``, ``generation``), every write to ``inblob`` bumps ``generation``,
  reading ``outblob`` produces a report over the last ``inblob`` (and fills ``auxblob``). A
  "concurrent writer" hook writes ``inblob`` again between our write and our read. Not
  emulated: configfs permission bits, and the kernel's EINVAL for short inblobs is modelled
  explicitly in :meth:`EmulatedConfigfs.write`.
* :class:`IoctlEmulator` -- the ``/dev/sev-guest`` driver at the ioctl boundary: it reads the
  request structures from the addresses in ``snp_guest_request_ioctl`` (as the kernel copies
  them from user memory), writes the response header and report, the certificate table, and
  ``exitinfo2``/``certs_len`` the way the kernel does, and raises ``OSError`` with the errno.
  Like ``snp_guest_ioctl`` it preloads ``exitinfo2`` with ``SEV_RET_NO_FW_CALL`` and copies it
  back whenever it is non-zero, so a request the kernel refuses before any firmware call
  (unknown ioctl, bad ``certs_len``) reports ``no_fw_call_value`` rather than zero.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import errno
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding
from werkzeug import Request, Response

from attestation.abi.product import ProductLine
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd.vtpm import new_attestation_key, simulated_vtpm_evidence
from runner.evidence.agent_json import AgentCertEntry, evidence_to_agent_json
from runner.evidence.certtable import GUID_ARK, GUID_ASK, GUID_VCEK, build_cert_table
from runner.evidence.configfs_tsm import ConfigfsAccess
from runner.evidence.sev_guest import (
    PAGE_SIZE,
    RESP_REPORT_OFFSET,
    SNP_GET_EXT_REPORT,
    SNP_GET_REPORT,
    SnpExtReportReq,
    SnpGuestRequestIoctl,
    SnpReportReq,
    SnpReportResp,
)


def signed_chain(amd: SimulatedAmd, report: bytes) -> list[bytes]:
    """DER VCEK, ASK, ARK the simulated signer issues for ``report``."""
    pem = amd.endorsement_pem(report)
    return [c.public_bytes(Encoding.DER) for c in x509.load_pem_x509_certificates(pem.encode())]


# ------------------------------------------------------------------------- agent (HTTP)

AgentMode = Literal[
    "ok",
    "disabled",
    "error500",
    "slow",
    "malformed",
    "wrong-shape",
    "sample",
    "wrong-data",
    "azure",
    "azure-sim",
    "azure-sim-wrong-nonce",
]
#: Real az-snp-vtpm evidence (trustee test data; tests/assets/coco/PROVENANCE.md).
AZURE_EVIDENCE = Path(__file__).parents[1] / "assets" / "coco" / "azure-vtpm" / "evidence-v1.json"
ChainMode = Literal["full", "null", "empty"]


@dataclass
class AgentEmulator:
    amd: SimulatedAmd
    version: str | None = "v0.21.0"
    """``/info`` version; ``None`` makes ``/info`` answer 404 (an agent without it, before
    guest-components v0.18.0). Reported as api-server-rest builds it: "Guest Components
    Version: " and ``git describe`` of the build."""
    tee: str | None = "snp"
    """``/info`` tee (kbs-types' lowercase name); ``None`` leaves it out, as an agent without
    the attestation feature does."""
    mode: AgentMode = "ok"
    chain: ChainMode = "null"
    product_line: ProductLine = ProductLine.MILAN
    release: threading.Event = field(default_factory=threading.Event)
    """In ``slow`` mode the evidence answer waits until this is set (at most 10 s)."""
    requests: list[dict[str, str]] = field(default_factory=list)
    azure_ak: rsa.RSAPrivateKey | None = None
    """``azure-sim`` modes: the simulated vTPM's attestation key (a new one when None)."""
    azure_init_data: bytes | None = None
    """``azure-sim`` modes: the init-data digest the simulated VM extended into PCR 8."""
    azure_version: int = 1
    """``azure-sim`` modes: the az-snp-vtpm evidence version (2 puts the nonce in user-data)."""

    @property
    def decodes_base64(self) -> bool:
        # guest-components v0.21.0 added encoding=base64. Compared as numbers: as strings,
        # "v0.3.0" would sort after "v0.21.0".
        if self.version is None:
            return False
        numbers = tuple(int(part) for part in re.findall(r"\d+", self.version)[:3])
        return numbers >= (0, 21, 0)

    def info(self, _request: Request) -> Response:
        if self.version is None:
            return Response("Not Found", status=404)
        body: dict[str, str] = {
            "version": f"Guest Components Version: {self.version}",
            "feature": "attestation",
        }
        if self.tee is not None:
            body["tee"] = self.tee
        return Response(json.dumps(body), content_type="application/json")

    def evidence(self, request: Request) -> Response:
        self.requests.append(dict(request.args))
        if self.mode == "disabled":
            return Response("Attestation Feature Not Enabled", status=404)
        if self.mode == "error500":
            return Response("get evidence failed: SNP attester: ioctl EIO", status=500)
        if self.mode == "slow":
            self.release.wait(timeout=10)
        if self.mode == "malformed":
            return Response('{"attestation_report": {"version": 5', status=200)
        if self.mode == "azure":
            return Response(AZURE_EVIDENCE.read_bytes(), content_type="application/octet-stream")
        runtime_data = request.args.get("runtime_data")
        if runtime_data is None:
            return Response("runtime_data is required", status=400)
        if request.args.get("encoding") == "base64" and self.decodes_base64:
            try:
                data = base64.urlsafe_b64decode(runtime_data + "=" * (-len(runtime_data) % 4))
            except (binascii.Error, ValueError):
                return Response("bad base64", status=400)
        else:
            data = runtime_data.encode("utf-8")
        if self.mode in {"azure-sim", "azure-sim-wrong-nonce"}:
            return self._azure(data)
        if self.mode == "sample":
            body = {"svn": "1", "report_data": base64.b64encode(data).decode()}
            return Response(json.dumps(body), content_type="application/octet-stream")
        if len(data) > 64:
            return Response("SNP Attester: runtime data must be <= 64 bytes", status=500)
        report_data = data.ljust(64, b"\0")
        if self.mode == "wrong-data":
            report_data = bytes(64)
        report = self.amd.sign_report(report_data=report_data, product_line=self.product_line)
        entries: list[AgentCertEntry] | None = None
        if self.chain == "full":
            vcek, ask, ark = signed_chain(self.amd, report)
            entries = [
                AgentCertEntry("ARK", ark),
                AgentCertEntry("ASK", ask),
                AgentCertEntry("VCEK", vcek),
            ]
        elif self.chain == "empty":
            entries = []
        body_text = evidence_to_agent_json(report, entries)
        if self.mode == "wrong-shape":  # valid JSON, but a field of the report is missing
            document = json.loads(body_text)
            del document["attestation_report"]["chip_id"]
            body_text = json.dumps(document)
        return Response(body_text, content_type="application/octet-stream")

    def _azure(self, data: bytes) -> Response:
        """A simulated Azure VM's answer, as guest-components' az-snp-vtpm attester gives it:
        the quote's nonce is the runtime data as received."""
        if self.azure_ak is None:
            self.azure_ak = new_attestation_key()
        nonce = data if self.mode == "azure-sim" else bytes(len(data))
        evidence = simulated_vtpm_evidence(
            self.amd,
            nonce=nonce,
            ak=self.azure_ak,
            init_data_digest=self.azure_init_data,
            format_version=self.azure_version,
            product_line=self.product_line,
        )
        return Response(json.dumps(evidence.agent_answer()), content_type="application/json")


# ------------------------------------------------------------------------- configfs-tsm


@dataclass
class EmulatedConfigfs(ConfigfsAccess):
    amd: SimulatedAmd
    provider: str = "sev_guest"
    register_provider: bool = True
    certs: list[tuple[uuid.UUID, bytes]] | None = None
    concurrent_writes: int = 0
    """How many of the next requests suffer a concurrent inblob write."""
    removed: list[Path] = field(default_factory=list)
    inblobs: dict[Path, bytes] = field(default_factory=dict)

    def make_entry(self, root: Path) -> Path:
        if not self.register_provider:
            raise OSError(errno.ENXIO, "No such device or address")
        path = super().make_entry(root)
        (path / "provider").write_text(self.provider + "\n")
        (path / "generation").write_text("0\n")
        for name in ("inblob", "outblob", "auxblob"):
            (path / name).write_bytes(b"")
        return path

    def write(self, path: Path, data: bytes) -> None:
        if path.name == "inblob":
            if self.provider == "sev_guest" and len(data) != 64:
                raise OSError(errno.EINVAL, "Invalid argument")
            super().write(path, data)
            self.inblobs[path.parent] = data
            generation = path.parent / "generation"
            generation.write_text(f"{int(generation.read_text()) + 1}\n")
            if self.concurrent_writes:  # another process writes right after us
                self.concurrent_writes -= 1
                other = bytes(range(64))
                self.inblobs[path.parent] = other
                generation.write_text(f"{int(generation.read_text()) + 1}\n")
            return
        super().write(path, data)

    def read(self, path: Path) -> bytes:
        entry = path.parent
        if path.name == "outblob":
            if entry not in self.inblobs:
                raise OSError(errno.EINVAL, "Invalid argument")
            report = self.amd.sign_report(report_data=self.inblobs[entry])
            path.write_bytes(report)
            if self.certs is not None:
                (entry / "auxblob").write_bytes(build_cert_table(self.certs))
            else:
                chain = signed_chain(self.amd, report)
                table = build_cert_table(
                    list(zip((GUID_VCEK, GUID_ASK, GUID_ARK), chain, strict=True))
                )
                (entry / "auxblob").write_bytes(table)
        return super().read(path)

    def remove_entry(self, path: Path) -> None:
        for child in path.iterdir():
            child.unlink()
        super().remove_entry(path)
        self.removed.append(path)


# ------------------------------------------------------------------------- sev-guest ioctl


@dataclass
class IoctlEmulator:
    amd: SimulatedAmd
    ext_supported: bool = True
    certs: list[tuple[uuid.UUID, bytes]] | None = None
    """Certificate table to return; ``None`` returns the signer's real chain."""
    fw_error: int = 0
    vmm_error: int = 0
    fail_errno: int | None = None
    bad_status: int = 0
    no_fw_call_value: int = 0xFFFF_FFFF_FFFF_FFFF
    """``SEV_RET_NO_FW_CALL`` as the kernel stores it: all ones, or ``0xff`` on older kernels."""
    calls: list[tuple[int, int]] = field(default_factory=list)

    def __call__(self, _fd: int, request: int, arg: SnpGuestRequestIoctl) -> None:
        assert arg.msg_version == 1
        if request == SNP_GET_EXT_REPORT:
            ext = SnpExtReportReq.from_address(arg.req_data)
            self.calls.append((request, int(ext.certs_len)))
            if not self.ext_supported:
                arg.exitinfo2 = self.no_fw_call_value
                raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")
            if ext.certs_len % PAGE_SIZE:  # the kernel checks this before any firmware call
                arg.exitinfo2 = self.no_fw_call_value
                raise OSError(errno.EINVAL, "Invalid argument")
            report_req = ext.data
        elif request == SNP_GET_REPORT:
            self.calls.append((request, 0))
            report_req = SnpReportReq.from_address(arg.req_data)
        else:
            arg.exitinfo2 = self.no_fw_call_value
            raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")
        if self.fail_errno is not None:
            arg.exitinfo2 = self.fw_error | self.vmm_error << 32
            raise OSError(self.fail_errno, errno.errorcode[self.fail_errno])
        report = self.amd.sign_report(report_data=bytes(report_req.user_data))
        if request == SNP_GET_EXT_REPORT:
            entries = self.certs
            if entries is None:
                chain = signed_chain(self.amd, report)
                entries = list(zip((GUID_VCEK, GUID_ASK, GUID_ARK), chain, strict=True))
            table = build_cert_table(entries) if entries else b""
            needed = -(-len(table) // PAGE_SIZE) * PAGE_SIZE
            if needed > ext.certs_len:
                ext.certs_len = needed
                arg.exitinfo2 = 1 << 32  # SNP_GUEST_VMM_ERR_INVALID_LEN
                raise OSError(errno.EIO, "Input/output error")
            ctypes.memmove(ext.certs_address, table, len(table))
            if not entries:
                ext.certs_len = 0
        resp = SnpReportResp.from_address(arg.resp_data)
        header = self.bad_status.to_bytes(4, "little") + len(report).to_bytes(4, "little")
        ctypes.memmove(ctypes.addressof(resp), header, len(header))
        ctypes.memmove(ctypes.addressof(resp) + RESP_REPORT_OFFSET, report, len(report))
        arg.exitinfo2 = 0


def assert_chain_signs(report: bytes, chain: tuple[bytes, ...], amd: SimulatedAmd) -> None:
    """``chain`` is leaf, ASK, ARK of the simulated PKI and its leaf verifies ``report``."""
    from attestation.abi.report import parse_report
    from attestation.abi.signature import verify_report_signature

    assert len(chain) == 3
    expected = signed_chain(amd, report)
    assert chain[1:] == tuple(expected[1:])
    leaf_key = x509.load_der_x509_certificate(chain[0]).public_key()
    verify_report_signature(parse_report(report), leaf_key)  # type: ignore[arg-type]
