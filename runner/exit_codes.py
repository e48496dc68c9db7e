"""Exit codes of ``attested-replay``: the only place runner errors become numbers.

One mapping from error classes to numbers serves every subcommand, so a number means the same
thing everywhere (except in the verification family: commands such as ``tenant reproduce``
return a verdict in ``verify-attested-run``'s classes). Commands are grouped in families
(:class:`Family`); each family has one table of the codes its commands return, in its own
words, which ``--help`` prints and the docs show.
The rules the tables follow: a missing or unreadable input path, a bad option value and an
output that cannot be written are usage errors (9), found before any work; an input that is
there but whose content is invalid is 1.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from attestation.exit_codes import MEANINGS as VERIFIER_MEANINGS
from attestation.tenant import errors as tenant_errors
from runner import errors

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
        # A dead worker process decided nothing: internal, never tampering or a verdict.
        tenant_errors.WorkerProcessError: INTERNAL,
    }
)


def exit_code_for(error: BaseException, family: Family | None = None) -> int:
    """Exit code for an exception raised while running a command of ``family``.

    A command of the verification family returns verify-attested-run's classes, in which
    2-8 are verdicts: an error it raises is either invalid input (1, malformed) or nothing
    was verified (9), never a number that would read as a verdict.
    """
    if family is Family.VERIFICATION:
        invalid_input = isinstance(error, errors.InputError | tenant_errors.TenantInputError)
        return 1 if invalid_input else INTERNAL
    for error_class, code in EXIT_CODES.items():
        if isinstance(error, error_class):
            return code
    return INTERNAL


class Family(enum.Enum):
    """Command families; every subcommand belongs to exactly one."""

    REPLAY = "replay"
    REFERENCE = "reference values"
    CLUSTER = "cluster"
    PUBLICATION = "publication"
    DOCUMENTS = "documents"
    #: Commands whose result is a verdict in the verifier's classes (``tenant reproduce``):
    #: their codes are verify-attested-run's table, not this module's.
    VERIFICATION = "verification"


_USAGE = (
    "usage: a bad option value, a missing or unreadable input path, an output path that "
    "cannot be written, a missing extra; or an internal error"
)

#: The exit codes of each family, in the order ``--help`` shows them.
FAMILY_EXIT_CODES: Final[Mapping[Family, tuple[tuple[int, str], ...]]] = MappingProxyType(
    {
        Family.REPLAY: (
            (0, "success"),
            (1, "invalid input content: a corpus file, a score file, a policy, expected values"),
            (2, "the corpus checksum differs from --expect-checksum"),
            (3, "no attestation evidence: the provider's interface is missing, or it failed"),
            (4, "the envelope did not verify with the tenant's verifier (nothing was written)"),
            (6, "publication failed (run --publish); the envelope is kept in the spool"),
            (8, "the corpus URL could not be reached, even after retries"),
            (9, _USAGE),
        ),
        Family.REFERENCE: (
            (0, "success"),
            (
                1,
                (
                    "invalid input content: a report, a certificate, a policy or config file; "
                    "an image build whose inputs differ from its lock files"
                ),
            ),
            (3, "no VCEK: AMD KDS failed or refused, or its VCEK did not verify"),
            (9, _USAGE),
        ),
        Family.CLUSTER: (
            (0, "success: submitted, or collected and verified"),
            (1, "invalid input content: a malformed expected-values file"),
            (4, "the collected envelope did not verify against the expected values"),
            (5, "submission or run failure: conflict, Job failed, timeout, envelope missing"),
            (9, _USAGE + "; no cluster configuration"),
        ),
        Family.DOCUMENTS: (
            (0, "success"),
            (1, "invalid input content: an envelope that does not parse"),
            (9, _USAGE),
        ),
        Family.VERIFICATION: tuple(VERIFIER_MEANINGS.items()),
        Family.PUBLICATION: (
            (0, "success"),
            (1, "invalid input content: an envelope, a spool entry, a kept checkpoint"),
            (4, "tenant fetch: a fetched envelope did not verify, or has no verdict yet"),
            (6, "publication failed (the envelope stays spooled) or the service is unreachable"),
            (7, "tampering: the log or a checkpoint shows removed or rewritten entries"),
            (9, _USAGE + "; a port already in use"),
        ),
    }
)
