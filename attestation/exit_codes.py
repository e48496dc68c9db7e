"""The public exit-code table of ``verify-attested-run`` (docs/verification.md).

This module is the only place where failure classes become numbers.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from attestation.errors import AttestationError, FailureClass

VERIFIED: Final = 0

EXIT_CODES: Final = MappingProxyType(
    {
        FailureClass.MALFORMED: 1,
        FailureClass.UNTRUSTED_CHAIN: 2,
        FailureClass.BAD_SIGNATURE: 3,
        FailureClass.ENDORSEMENT_MISMATCH: 4,
        FailureClass.PLATFORM_POLICY: 5,
        FailureClass.WORKLOAD_IDENTITY: 6,
        FailureClass.BINDING: 7,
        FailureClass.EXPECTATION: 8,
        FailureClass.USAGE: 9,
    }
)


#: What each code means, in the order ``verify-attested-run --help`` lists them.
MEANINGS: Final = MappingProxyType(
    {
        VERIFIED: "verified: every check passed",
        EXIT_CODES[FailureClass.MALFORMED]: "malformed input (unparseable, over its size limit)",
        EXIT_CODES[FailureClass.UNTRUSTED_CHAIN]: "untrusted-chain: not chained to a pinned root",
        EXIT_CODES[FailureClass.BAD_SIGNATURE]: "bad-signature: the report signature is wrong",
        EXIT_CODES[FailureClass.ENDORSEMENT_MISMATCH]: (
            "endorsement-mismatch: the certificate does not describe this report"
        ),
        EXIT_CODES[
            FailureClass.PLATFORM_POLICY
        ]: "platform-policy: the policy refuses the platform",
        EXIT_CODES[FailureClass.WORKLOAD_IDENTITY]: (
            "workload-identity: MEASUREMENT, HOST_DATA or ID key not allowed"
        ),
        EXIT_CODES[FailureClass.BINDING]: "binding: the envelope does not match its report",
        EXIT_CODES[FailureClass.EXPECTATION]: (
            "expectation: authentic, but not the run the expected values describe"
        ),
        EXIT_CODES[FailureClass.USAGE]: (
            "usage, IO or internal error, --help and --version: nothing was verified"
        ),
    }
)


def exit_code_for(error: BaseException) -> int:
    """Exit code for an exception; anything that is not ours is usage/IO/internal (9)."""
    if isinstance(error, AttestationError):
        return EXIT_CODES[error.failure_class]
    return EXIT_CODES[FailureClass.USAGE]
