"""The attestation agent's az-snp-vtpm answer (Azure confidential VMs), decoded strictly.

Shapes, from guest-components ``attestation-agent/attester/src/az_snp_vtpm/mod.rs`` @ 07b7c1a0
(``Evidence``/``TpmQuote``, serde) and trustee's verifier (``deps/verifier/src/az_snp_vtpm/
compat.rs`` @ 78962cd4, which reads all three):

* versions 1 and 2: ``{"version": 1|2, "tpm_quote": {"signature": hex, "message": hex,
  "pcrs": [hex, ...]}, "hcl_report": base64url, "vcek": base64url of the DER VCEK}``
  (serde_with's URL-safe base64, padded; unpadded text is accepted too);
* version 0 (no ``version``): ``{"quote": {"signature": [u8], "message": [u8], "pcrs": [[u8]]},
  "report": [u8], "vcek": PEM}``.

``signature`` is the raw RSASSA signature (the TPMT_SIGNATURE's buffer); ``message`` the
TPMS_ATTEST. The bytes are judged by :mod:`attestation.verify.az_vtpm`; this module only takes
them out of JSON, and refuses any other key or type.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from attestation.abi.hcl import HCL_REPORT_SIZE
from attestation.abi.tpm import MAX_QUOTE_SIZE, PCR_COUNT, SHA256_SIZE, QuoteSignature
from attestation.errors import MalformedError
from attestation.verify.az_vtpm import VtpmEvidence

_VERSIONED_KEYS: Final = frozenset({"version", "tpm_quote", "hcl_report", "vcek"})
_UNVERSIONED_KEYS: Final = frozenset({"quote", "report", "vcek"})
_QUOTE_KEYS: Final = frozenset({"signature", "message", "pcrs"})
_HEX: Final = re.compile(r"(?:[0-9a-fA-F]{2})*")
#: A DER VCEK is about 1.3 KB; generous, but bounded.
_MAX_VCEK_BYTES: Final = 16 * 1024


class AzVtpmJsonError(ValueError):
    """The answer is not az-snp-vtpm evidence of a known shape."""


@dataclass(frozen=True, slots=True)
class AgentVtpmEvidence:
    """What the agent returned: the evidence bytes and the VCEK (DER)."""

    evidence: VtpmEvidence
    vcek_der: bytes


def is_az_vtpm_document(document: object) -> bool:
    """Whether an agent answer has the keys of az-snp-vtpm evidence (any version)."""
    return isinstance(document, dict) and set(document) in (_VERSIONED_KEYS, _UNVERSIONED_KEYS)


def _hex(value: object, where: str, limit: int) -> bytes:
    if not isinstance(value, str) or len(value) > 2 * limit:
        raise AzVtpmJsonError(f"{where} must be hex text of at most {limit} bytes")
    if _HEX.fullmatch(value) is None:
        raise AzVtpmJsonError(f"{where} is not hex (pairs of 0-9, a-f)")
    return bytes.fromhex(value)


def _byte_array(value: object, where: str, limit: int) -> bytes:
    if not isinstance(value, list) or len(value) > limit:
        raise AzVtpmJsonError(f"{where} must be an array of at most {limit} bytes")
    # type() is int, not isinstance: a JSON true must not pass as the byte 1.
    if not all(type(item) is int and 0 <= item <= 0xFF for item in value):
        raise AzVtpmJsonError(f"{where} must hold integers 0..255")
    return bytes(value)


def _base64url(value: object, where: str, limit: int) -> bytes:
    if not isinstance(value, str) or len(value) > 2 * limit:
        raise AzVtpmJsonError(f"{where} must be base64url text")
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AzVtpmJsonError(f"{where} is not base64url: {exc}") from None


def _quote(
    value: object, where: str, decode: Callable[[object, str, int], bytes]
) -> tuple[bytes, bytes, tuple[bytes, ...]]:
    """The message, signature and PCRs of a quote object, each decoded by ``decode`` (the
    byte encoding of the answer's version)."""
    if not isinstance(value, dict) or set(value) != _QUOTE_KEYS:
        raise AzVtpmJsonError(f"{where} must be an object with signature, message and pcrs")
    pcrs = value["pcrs"]
    if not isinstance(pcrs, list) or len(pcrs) > PCR_COUNT:
        raise AzVtpmJsonError(f"{where}.pcrs must be an array of at most {PCR_COUNT} values")
    return (
        decode(value["message"], f"{where}.message", MAX_QUOTE_SIZE),
        decode(value["signature"], f"{where}.signature", 512),
        tuple(decode(pcr, f"{where}.pcrs[{i}]", SHA256_SIZE) for i, pcr in enumerate(pcrs)),
    )


def az_vtpm_evidence_from_document(document: object) -> AgentVtpmEvidence:
    """The evidence of an az-snp-vtpm answer.

    Raises:
        AzVtpmJsonError: another shape, a wrong type, or bytes that are not what they claim.
    """
    if not isinstance(document, dict):
        raise AzVtpmJsonError("the answer is not a JSON object")
    keys = set(document)
    if keys == _VERSIONED_KEYS:
        version = document["version"]
        if type(version) is not int or version not in (1, 2):
            raise AzVtpmJsonError(f"version {version!r} is not 1 or 2")
        message, signature, pcrs = _quote(document["tpm_quote"], "tpm_quote", _hex)
        report = _base64url(document["hcl_report"], "hcl_report", HCL_REPORT_SIZE)
        vcek = _base64url(document["vcek"], "vcek", _MAX_VCEK_BYTES)
    elif keys == _UNVERSIONED_KEYS:
        version = 0
        message, signature, pcrs = _quote(document["quote"], "quote", _byte_array)
        report = _byte_array(document["report"], "report", HCL_REPORT_SIZE)
        vcek = _pem_certificate_der(document["vcek"])
    else:
        raise AzVtpmJsonError(f"keys {sorted(keys)} are not those of az-snp-vtpm evidence")
    try:
        evidence = VtpmEvidence(
            hcl_report=report,
            quote=message,
            signature=QuoteSignature(signature),
            pcrs=pcrs,
            format_version=version,
        )
    except MalformedError as exc:
        raise AzVtpmJsonError(str(exc)) from None
    return AgentVtpmEvidence(evidence, vcek)


def _pem_certificate_der(value: object) -> bytes:
    if not isinstance(value, str) or len(value) > 2 * _MAX_VCEK_BYTES:
        raise AzVtpmJsonError("vcek must be PEM text")
    try:
        certificates = x509.load_pem_x509_certificates(value.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise AzVtpmJsonError(f"vcek is not a PEM certificate: {exc}") from None
    return certificates[0].public_bytes(Encoding.DER)
