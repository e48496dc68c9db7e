"""The verifier's exception hierarchy.

Every failure the verifier can decide belongs to exactly one :class:`FailureClass`;
``attestation.exit_codes`` maps the classes to the public exit codes in one table.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class FailureClass(enum.StrEnum):
    """The verifier's failure classes, in the order checks run."""

    MALFORMED = "malformed"
    UNTRUSTED_CHAIN = "untrusted-chain"
    BAD_SIGNATURE = "bad-signature"
    ENDORSEMENT_MISMATCH = "endorsement-mismatch"
    PLATFORM_POLICY = "platform-policy"
    WORKLOAD_IDENTITY = "workload-identity"
    BINDING = "binding"
    EXPECTATION = "expectation"
    USAGE = "usage"


class AttestationError(Exception):
    """Base of every error raised by the ``attestation`` package."""

    failure_class: ClassVar[FailureClass] = FailureClass.USAGE


class MalformedError(AttestationError):
    """Input that cannot be parsed: wrong size, bad encoding, reserved bytes set, schema."""

    failure_class = FailureClass.MALFORMED


class UntrustedChainError(AttestationError):
    """The endorsement does not chain to a pinned root at ``now``, or is revoked."""

    failure_class = FailureClass.UNTRUSTED_CHAIN


class BadSignatureError(AttestationError):
    """The report signature does not verify, or the report is unsigned."""

    failure_class = FailureClass.BAD_SIGNATURE


class EndorsementMismatchError(AttestationError):
    """The certificate disagrees with the report (TCB, chip, product line, signer kind)."""

    failure_class = FailureClass.ENDORSEMENT_MISMATCH


class PlatformPolicyError(AttestationError):
    """The platform or guest policy is not acceptable under the verification policy."""

    failure_class = FailureClass.PLATFORM_POLICY


class WorkloadIdentityError(AttestationError):
    """MEASUREMENT, HOST_DATA or ID/author key digests are not the expected ones."""

    failure_class = FailureClass.WORKLOAD_IDENTITY


class BindingError(AttestationError):
    """REPORT_DATA, convenience fields or the result digest do not match the envelope."""

    failure_class = FailureClass.BINDING


class ExpectationError(AttestationError):
    """Authentic evidence, but for another run, corpus, tenant, workload or result."""

    failure_class = FailureClass.EXPECTATION


class UsageError(AttestationError):
    """Bad arguments or unreadable input: the verifier could not decide."""

    failure_class = FailureClass.USAGE
