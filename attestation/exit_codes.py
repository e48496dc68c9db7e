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


def exit_code_for(error: BaseException) -> int:
    """Exit code for an exception; anything that is not ours is usage/IO/internal (9)."""
    if isinstance(error, AttestationError):
        return EXIT_CODES[error.failure_class]
    return EXIT_CODES[FailureClass.USAGE]
