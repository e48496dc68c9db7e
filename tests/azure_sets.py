"""The five real az-snp-vtpm evidence sets of tests/assets/coco/azure-vtpm, decoded for tests."""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from attestation.abi.tpm import QuoteSignature
from attestation.verify.az_vtpm import VtpmEvidence

AZURE = Path(__file__).parent / "assets" / "coco" / "azure-vtpm"
#: The time at which every VCEK of the sets is valid (as for the SNP vectors in cases.json).
NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
CHALLENGE = b"challenge"


@dataclass(frozen=True)
class EvidenceSet:
    name: str
    evidence: VtpmEvidence
    endorsement: bytes
    nonce: bytes


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _vcek_der_to_pem(der: bytes) -> bytes:
    body = base64.encodebytes(der).decode("ascii").replace("\n", "")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return (
        "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"
    ).encode()


def load(name: str) -> EvidenceSet:
    """One set by file name (``hcl-report.bin`` pairs with tpm-quote-v1.json and vcek.pem)."""
    if name == "hcl-report.bin":
        quote = json.loads((AZURE / "tpm-quote-v1.json").read_text())
        evidence = VtpmEvidence(
            hcl_report=(AZURE / name).read_bytes(),
            quote=bytes.fromhex(quote["message"]),
            signature=QuoteSignature(bytes.fromhex(quote["signature"])),
            pcrs=tuple(bytes.fromhex(pcr) for pcr in quote["pcrs"]),
            format_version=1,
        )
        return EvidenceSet(name, evidence, (AZURE / "vcek.pem").read_bytes(), CHALLENGE)
    document = json.loads((AZURE / name).read_text())
    if "version" in document:
        quote = document["tpm_quote"]
        evidence = VtpmEvidence(
            hcl_report=_b64url(document["hcl_report"]),
            quote=bytes.fromhex(quote["message"]),
            signature=QuoteSignature(bytes.fromhex(quote["signature"])),
            pcrs=tuple(bytes.fromhex(pcr) for pcr in quote["pcrs"]),
            format_version=document["version"],
        )
        endorsement = _vcek_der_to_pem(_b64url(document["vcek"]))
    else:
        quote = document["quote"]
        evidence = VtpmEvidence(
            hcl_report=bytes(document["report"]),
            quote=bytes(quote["message"]),
            signature=QuoteSignature(bytes(quote["signature"])),
            pcrs=tuple(bytes(pcr) for pcr in quote["pcrs"]),
            format_version=0,
        )
        endorsement = document["vcek"].encode("ascii")
    return EvidenceSet(name, evidence, endorsement, NONCES[name])


#: The nonce upstream's test passes for each set (docs: tests/assets/coco/PROVENANCE.md).
NONCES: dict[str, bytes] = {
    "evidence-v0.json": CHALLENGE,
    "evidence-v1.json": CHALLENGE,
    "evidence-v2.json": bytes.fromhex(
        "982f5c6e45df0ed3f10b6f60b02f0c8390e281300f3805e2279c16168cd6ae9a"
        "a398f647caa2338748cd0fd9f5f819ef"
    ),
    "evidence-genoa.json": bytes.fromhex(
        "0218488bae25d2509232bf676f1a66a30d7372add909109b36016ef136f2938c"
        "a05475f8b46094de6b64270ea35d950f"
    ),
}
SETS = (
    "evidence-v0.json",
    "evidence-v1.json",
    "evidence-v2.json",
    "evidence-genoa.json",
    "hcl-report.bin",
)
