"""Offline verification of AMD SEV-SNP attestation envelopes: the tenant's verifier.

The verifier is pure: it depends only on ``cryptography`` and ``pydantic``, never on
``runner``, on this package's tool subpackages ``attestation.tenant`` (the tenant's network
tools) and ``attestation.simulated_amd`` (the simulated AMD), on ``requests`` or ``kubernetes``
(a test enforces it).
Time (``now``) and trust roots are always arguments. Everything a caller needs is exported
here; the sub-packages are its internals, grouped by concern:

=================== =========================================================================
``abi``             the 1184-byte report layout, TCB layouts, product lines, signature format
``endorsement``     VCEK/VLEK certificates and AMD's KDS extensions, pinned roots, the chain
``verify``          the policy, the ordered check records, the raw-report verifier
``envelope``        the envelope model, REPORT_DATA binding, expected values, envelope mode
``transparency``    publication-log proofs (RFC 6962) and signed checkpoints (C2SP)
``contracts``       identifiers, size limits, digests and the pod's output format
``encoding``        RFC 8785 canonical JSON and the strict JSON reader
=================== =========================================================================

Verify an envelope against the tenant's expected values (``verify-attested-run --envelope``)::

    from datetime import UTC, datetime
    from pathlib import Path

    import attestation

    expected = attestation.load_expected(Path("expected.json").read_bytes())
    result = attestation.verify_envelope(
        Path("envelope.json").read_bytes(), expected, now=datetime.now(UTC)
    )
    print(result.summary(), end="")  # VERIFIED (...) or NOT VERIFIED: <class> (exit N)
    assert result.exit_code == 0     # 1-8: exactly one failure class each

Verify a raw report and its VCEK (``verify-attested-run --report``)::

    result = attestation.verify_report(
        Path("report.bin").read_bytes(),
        Path("vcek.der").read_bytes(),
        policy=attestation.Policy(),          # {}: the secure defaults
        trust=attestation.TrustStore.amd(),   # AMD's pinned roots only
        now=datetime.now(UTC),
    )
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # the names below, imported on first use (a one-shot CLI loads only its own)
    from attestation.abi.product import ProductLine, SignerKind
    from attestation.abi.report import AttestationReport, parse_report, serialize_report
    from attestation.contracts import (
        MAX_ENVELOPE_BYTES,
        RunId,
        Sha256Digest,
        TenantId,
        sha256_digest,
    )
    from attestation.encoding.canonical import canonicalize
    from attestation.endorsement.chain import VerifiedChain
    from attestation.endorsement.trust import TrustStore, fingerprint
    from attestation.envelope.binding import report_data_for, result_digest
    from attestation.envelope.expected import ExpectedValues, load_expected
    from attestation.envelope.model import Binding, Envelope, Workload, parse_envelope
    from attestation.envelope.verification import verify_envelope
    from attestation.errors import (
        AttestationError,
        BadSignatureError,
        BindingError,
        EndorsementMismatchError,
        ExpectationError,
        FailureClass,
        MalformedError,
        PlatformPolicyError,
        UntrustedChainError,
        UsageError,
        WorkloadIdentityError,
    )
    from attestation.exit_codes import EXIT_CODES, VERIFIED, exit_code_for
    from attestation.transparency.checkpoint import (
        Checkpoint,
        CheckpointError,
        VerifierKey,
        verify_signed_checkpoint,
    )
    from attestation.transparency.entries import LogEntry
    from attestation.transparency.merkle import leaf_hash, verify_consistency, verify_inclusion
    from attestation.verify.checks import Check, VerificationResult
    from attestation.verify.policy import CRYPTO_ONLY, Policy, load_policy
    from attestation.verify.verifier import Verifier, verify_report

__version__ = "0.1.0"

__all__ = [
    "CRYPTO_ONLY",
    "EXIT_CODES",
    "MAX_ENVELOPE_BYTES",
    "VERIFIED",
    "AttestationError",
    "AttestationReport",
    "BadSignatureError",
    "Binding",
    "BindingError",
    "Check",
    "Checkpoint",
    "CheckpointError",
    "EndorsementMismatchError",
    "Envelope",
    "ExpectationError",
    "ExpectedValues",
    "FailureClass",
    "LogEntry",
    "MalformedError",
    "PlatformPolicyError",
    "Policy",
    "ProductLine",
    "RunId",
    "Sha256Digest",
    "SignerKind",
    "TenantId",
    "TrustStore",
    "UntrustedChainError",
    "UsageError",
    "VerificationResult",
    "VerifiedChain",
    "Verifier",
    "VerifierKey",
    "Workload",
    "WorkloadIdentityError",
    "__version__",
    "canonicalize",
    "exit_code_for",
    "fingerprint",
    "leaf_hash",
    "load_expected",
    "load_policy",
    "parse_envelope",
    "parse_report",
    "report_data_for",
    "result_digest",
    "serialize_report",
    "sha256_digest",
    "verify_consistency",
    "verify_envelope",
    "verify_inclusion",
    "verify_report",
    "verify_signed_checkpoint",
]


#: Every exported name and the module it lives in: ``import attestation`` itself loads none
#: of them (``verify-attested-run`` starts in a fresh process per verification, and pays only
#: for what its mode uses); ``attestation.NAME`` imports the module on first use.
_EXPORTS: Final = {
    "AttestationError": "attestation.errors",
    "AttestationReport": "attestation.abi.report",
    "BadSignatureError": "attestation.errors",
    "Binding": "attestation.envelope.model",
    "BindingError": "attestation.errors",
    "CRYPTO_ONLY": "attestation.verify.policy",
    "Check": "attestation.verify.checks",
    "Checkpoint": "attestation.transparency.checkpoint",
    "CheckpointError": "attestation.transparency.checkpoint",
    "EXIT_CODES": "attestation.exit_codes",
    "EndorsementMismatchError": "attestation.errors",
    "Envelope": "attestation.envelope.model",
    "ExpectationError": "attestation.errors",
    "ExpectedValues": "attestation.envelope.expected",
    "FailureClass": "attestation.errors",
    "LogEntry": "attestation.transparency.entries",
    "MAX_ENVELOPE_BYTES": "attestation.contracts",
    "MalformedError": "attestation.errors",
    "PlatformPolicyError": "attestation.errors",
    "Policy": "attestation.verify.policy",
    "ProductLine": "attestation.abi.product",
    "RunId": "attestation.contracts",
    "Sha256Digest": "attestation.contracts",
    "SignerKind": "attestation.abi.product",
    "TenantId": "attestation.contracts",
    "TrustStore": "attestation.endorsement.trust",
    "UntrustedChainError": "attestation.errors",
    "UsageError": "attestation.errors",
    "VERIFIED": "attestation.exit_codes",
    "VerificationResult": "attestation.verify.checks",
    "VerifiedChain": "attestation.endorsement.chain",
    "Verifier": "attestation.verify.verifier",
    "VerifierKey": "attestation.transparency.checkpoint",
    "Workload": "attestation.envelope.model",
    "WorkloadIdentityError": "attestation.errors",
    "canonicalize": "attestation.encoding.canonical",
    "exit_code_for": "attestation.exit_codes",
    "fingerprint": "attestation.endorsement.trust",
    "leaf_hash": "attestation.transparency.merkle",
    "load_expected": "attestation.envelope.expected",
    "load_policy": "attestation.verify.policy",
    "parse_envelope": "attestation.envelope.model",
    "parse_report": "attestation.abi.report",
    "report_data_for": "attestation.envelope.binding",
    "result_digest": "attestation.envelope.binding",
    "serialize_report": "attestation.abi.report",
    "sha256_digest": "attestation.contracts",
    "verify_consistency": "attestation.transparency.merkle",
    "verify_envelope": "attestation.envelope.verification",
    "verify_inclusion": "attestation.transparency.merkle",
    "verify_report": "attestation.verify.verifier",
    "verify_signed_checkpoint": "attestation.transparency.checkpoint",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attestation' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
