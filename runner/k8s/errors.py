"""Why a submission did not end with a verified envelope. All are ``SubmitError`` (exit 5)."""

from __future__ import annotations

from runner.errors import SubmitError


class RunConflictError(SubmitError):
    """A Job for this tenant and run ID exists with a different spec."""


class RunPublishedError(RunConflictError):
    """The publication service already has an envelope of this run ID (``--rerun`` cannot help:
    it would refuse the new one)."""


class PublicationCheckError(SubmitError):
    """submit could not learn from the publication service whether the run ID was published."""


class RunNotFoundError(SubmitError):
    """No Job exists for this tenant and run ID."""


class RunFailedError(SubmitError):
    """The Job ended Failed (DeadlineExceeded, BackoffLimitExceeded, PodFailurePolicy, ...)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class PodCannotRunError(RunFailedError):
    """A pod of the Job cannot start (Unschedulable, ImagePullBackOff, ...)."""


class RunDeletedError(SubmitError):
    """The Job was deleted while it was being watched."""


class WaitTimeoutError(SubmitError):
    """The Job did not finish within the client-side timeout."""


class EnvelopeMissingError(SubmitError):
    """The Job completed but its envelope or termination message cannot be found."""


class RunGoneError(EnvelopeMissingError):
    """The run's Job is gone (TTL, cancel, stop) or elsewhere; its record says what is known."""


class EnvelopeMismatchError(SubmitError):
    """The collected envelope differs from the digests the pod reported."""


class ApiUnavailableError(SubmitError):
    """The Kubernetes API kept failing after every retry."""


class ApiRefusedError(SubmitError):
    """The Kubernetes API answered with a refusal no retry changes (401, 403, another 4xx)."""
