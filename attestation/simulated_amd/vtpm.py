"""A simulated Azure confidential VM: an HCL report signed by the simulated AMD and a vTPM quote.

The same shapes Azure produces (:mod:`attestation.abi.hcl`, :mod:`attestation.abi.tpm`): the
paravisor's SEV-SNP report (VMPL 0, REPORT_DATA = SHA-256 of the variable data, zero HOST_DATA:
a peer pod's VM is started without it) binds a test attestation key (RSA-2048), which signs a
TPM2_Quote over the caller's nonce and 24 SHA-256 PCRs. PCR 8 holds one extend of the init-data
digest from zero, as the attestation agent's ``bind_init_data`` makes it. The report is signed by
the simulated VCEK, so a verifier accepts it only when the tenant pins the simulated root.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.serialization import Encoding

from attestation.abi.hcl import (
    AK_KEY_ID,
    HCL_REPORT_SIZE,
    HCL_SIGNATURE,
    IGVM_REQUEST_OFFSET,
    IGVM_REQUEST_SIZE,
    REPORT_DATA_HASH_SHA256,
    REPORT_TYPE_SNP,
    REQUEST_TYPE_ATTESTATION,
    SNP_REPORT_OFFSET,
    USER_DATA_FORMAT,
    USER_DATA_SIZE,
    VARIABLE_DATA_OFFSET,
)
from attestation.abi.product import ProductLine
from attestation.abi.tpm import (
    PCR_COUNT,
    SHA256_SIZE,
    ClockInfo,
    Quote,
    pcr_digest_of,
    pcr_extend,
    serialize_quote,
)
from attestation.simulated_amd.amd import SimulatedAmd

#: The PCR the attestation agent extends the init-data digest into.
INIT_DATA_PCR: Final = 8
#: The firmware version the simulated vTPM reports (Azure's, from the real quotes).
FIRMWARE_VERSION: Final = 0x2020031200120003


def _b64url_uint(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def new_attestation_key() -> rsa.RSAPrivateKey:
    """A test vTPM attestation key (RSA-2048, as Azure's paravisor makes it)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass(frozen=True)
class SimulatedVtpmEvidence:
    """One simulated az-snp-vtpm evidence: HCL report, quote, raw AK signature, PCR values."""

    hcl_report: bytes
    quote: bytes
    signature: bytes
    pcrs: tuple[bytes, ...]
    vcek_der: bytes
    cert_chain_pem: str
    format_version: int = 1

    def agent_answer(self) -> dict[str, object]:
        """The attestation agent's az-snp-vtpm answer (guest-components
        ``attestation-agent/attester/src/az_snp_vtpm/mod.rs`` @ 07b7c1a0: ``version``,
        ``tpm_quote`` {``signature``, ``message``, ``pcrs``} in hex, ``hcl_report`` and the
        DER ``vcek`` in URL-safe base64 with padding)."""
        return {
            "version": self.format_version,
            "tpm_quote": {
                "signature": self.signature.hex(),
                "message": self.quote.hex(),
                "pcrs": [pcr.hex() for pcr in self.pcrs],
            },
            "hcl_report": base64.urlsafe_b64encode(self.hcl_report).decode("ascii"),
            "vcek": base64.urlsafe_b64encode(self.vcek_der).decode("ascii"),
        }


def variable_data(ak: rsa.RSAPrivateKey, user_data: bytes) -> bytes:
    """The HCL variable data JSON: the AK as the ``HCLAkPub`` JWK, the VM's configuration and
    ``user-data`` (hex)."""
    numbers = ak.public_key().public_numbers()
    document = {
        "keys": [
            {
                "kid": AK_KEY_ID,
                "key_ops": ["sign"],
                "kty": "RSA",
                "e": _b64url_uint(numbers.e),
                "n": _b64url_uint(numbers.n),
            }
        ],
        "vm-configuration": {
            "console-enabled": False,
            "secure-boot": True,
            "tpm-enabled": True,
            "vmUniqueId": "00000000-0000-0000-0000-000000000000",
        },
        "user-data": user_data.hex(),
    }
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def hcl_report(
    amd: SimulatedAmd,
    ak: rsa.RSAPrivateKey,
    *,
    user_data: bytes = bytes(USER_DATA_SIZE),
    product_line: ProductLine = ProductLine.MILAN,
    vmpl: int = 0,
) -> bytes:
    """A 2600-byte HCL report whose SNP report (signed by the simulated VCEK) binds ``ak``."""
    variable = variable_data(ak, user_data)
    snp = amd.sign_report(
        report_data=hashlib.sha256(variable).digest() + bytes(32),
        product_line=product_line,
        vmpl=vmpl,
    )
    end = VARIABLE_DATA_OFFSET + len(variable)
    header = (
        HCL_SIGNATURE
        + (1).to_bytes(4, "little")
        + end.to_bytes(4, "little")
        + REQUEST_TYPE_ATTESTATION.to_bytes(4, "little")
        + bytes(4 + 12)
    )
    igvm = b"".join(
        value.to_bytes(4, "little")
        for value in (
            IGVM_REQUEST_SIZE + len(variable),
            1,
            REPORT_TYPE_SNP,
            REPORT_DATA_HASH_SHA256,
            len(variable),
        )
    )
    body = header + snp + igvm + variable
    return body + bytes(HCL_REPORT_SIZE - len(body))


def pcr_values(init_data_digest: bytes | None) -> tuple[bytes, ...]:
    """24 SHA-256 PCRs: PCR 0-7 fixed boot measurements, PCR 8 the init-data's extend."""
    values = [hashlib.sha256(b"simulated boot measurement %d" % pcr).digest() for pcr in range(8)]
    values.extend(bytes(SHA256_SIZE) for _ in range(8, PCR_COUNT))
    if init_data_digest is not None:
        values[INIT_DATA_PCR] = pcr_extend(bytes(SHA256_SIZE), init_data_digest)
    return tuple(values)


def simulated_vtpm_evidence(
    amd: SimulatedAmd,
    *,
    nonce: bytes,
    ak: rsa.RSAPrivateKey,
    init_data_digest: bytes | None = None,
    format_version: int = 1,
    product_line: ProductLine = ProductLine.MILAN,
) -> SimulatedVtpmEvidence:
    """The evidence the attestation agent would return for ``nonce`` on a simulated Azure VM.

    Format 2 puts the nonce (zero-padded to 64 bytes) into ``user-data`` as well.
    """
    user_data = (
        nonce.ljust(USER_DATA_SIZE, b"\0") if format_version >= USER_DATA_FORMAT else bytes(64)
    )
    report = hcl_report(amd, ak, user_data=user_data, product_line=product_line)
    pcrs = pcr_values(init_data_digest)
    quote = serialize_quote(
        Quote(
            qualified_signer=b"\x00\x0b" + hashlib.sha256(b"simulated AK name").digest(),
            extra_data=nonce,
            clock_info=ClockInfo(clock=1, reset_count=0, restart_count=0, safe=True),
            firmware_version=FIRMWARE_VERSION,
            selected_pcrs=tuple(range(PCR_COUNT)),
            pcr_digest=pcr_digest_of(pcrs),
        )
    )
    signature = ak.sign(quote, padding.PKCS1v15(), hashes.SHA256())
    chain = amd.cert_chain_pem_for_report(report[SNP_REPORT_OFFSET:IGVM_REQUEST_OFFSET])
    leaf = x509.load_pem_x509_certificates(chain.encode("ascii"))[0]
    return SimulatedVtpmEvidence(
        hcl_report=report,
        quote=quote,
        signature=signature,
        pcrs=pcrs,
        vcek_der=leaf.public_bytes(Encoding.DER),
        cert_chain_pem=chain,
        format_version=format_version,
    )
