"""Exit codes of ``attested-replay``: the only place runner errors become numbers."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from runner import errors
from tenant import errors as tenant_errors

INTERNAL: Final = 9

#: Most specific class first; the first ``isinstance`` match wins.
EXIT_CODES: Final = MappingProxyType(
    {
        errors.ChecksumMismatchError: 2,
        errors.InputError: 1,
        errors.EvidenceError: 3,
        errors.VerificationFailedError: 4,
        errors.SubmitError: 5,
        errors.PublishError: 6,
        tenant_errors.TamperingError: 7,
        errors.SourceUnavailableError: 8,
        errors.UsageError: 9,
        tenant_errors.TenantInputError: 1,
        tenant_errors.ServiceUnavailableError: 6,
        tenant_errors.TenantUsageError: 9,
    }
)


def exit_code_for(error: BaseException) -> int:
    """Exit code for an exception raised while running a command."""
    for error_class, code in EXIT_CODES.items():
        if isinstance(error, error_class):
            return code
    return INTERNAL
