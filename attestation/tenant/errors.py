"""The ``tenant`` package's exception hierarchy.

``attested-replay`` maps these to its exit codes in ``runner.exit_codes`` (the one table), so a
tenant command exits as its operator-side counterpart would: bad usage 9, bad local input 1,
an unreachable service 6, evidence of tampering 7.
"""

from __future__ import annotations


class TenantError(Exception):
    """Base of every error raised by the ``tenant`` package."""


class TenantUsageError(TenantError):
    """Bad arguments or configuration: a URL the policy refuses, an unreadable token file."""


class TenantInputError(TenantError):
    """Local input that is invalid: a kept checkpoint or index that does not check out."""


class ServiceUnavailableError(TenantError):
    """A service (the publication service, a download) could not be reached or answered an
    unexpected status: nothing was decided about the data."""


class TamperingError(TenantError):
    """A publication log or checkpoint shows removed, reordered or rewritten entries."""


class WorkerProcessError(TenantError):
    """A worker process of a tenant command died: what it was doing was not decided either
    way (exit 9, as an internal error; never a verdict, never a completed fetch)."""


class VerificationWorkerError(WorkerProcessError):
    """A process verifying fetched envelopes died: nothing was decided about them (exit 9,
    never a verdict)."""


class FetchWorkerError(WorkerProcessError):
    """A process downloading, checking and storing fetched envelopes died: the fetch did not
    complete, so the kept index and checkpoint are unchanged (exit 9)."""


class ArchiveError(TenantInputError):
    """An archive is malformed or over one of its bounds; the message names which."""
