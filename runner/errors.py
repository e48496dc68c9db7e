"""The ``runner`` package's exception hierarchy (exit codes: ``runner.exit_codes``, which also
maps the ``tenant`` package's errors, since ``attested-replay`` runs the tenant commands too)."""

from __future__ import annotations


class RunnerError(Exception):
    """Base of every error raised by ``runner``."""


class UsageError(RunnerError):
    """Bad command-line arguments or configuration."""


class InputError(RunnerError):
    """Invalid input data: a corpus, a score file, an expected-values file, a manifest."""


class ImageBuildError(InputError):
    """The replay image's inputs differ from its lock files (a package version or hash the
    mirror or index serves), or a step of the build failed on them."""


class ChecksumMismatchError(InputError):
    """The corpus checksum differs from the one the operator expected."""


class SourceUnavailableError(RunnerError):
    """A network source (the corpus URL) could not be reached, even after retries: transient,
    so a Job may retry the pod, unlike invalid input."""


class EvidenceError(RunnerError):
    """No attestation evidence could be obtained (no TEE, agent disabled, device error)."""


class EvidenceUnavailableError(EvidenceError):
    """The requested evidence provider does not exist on this machine."""


class VerificationFailedError(RunnerError):
    """An envelope the runner produced or collected did not verify."""

    def __init__(self, message: str, *, verifier_exit_code: int) -> None:
        super().__init__(message)
        self.verifier_exit_code = verifier_exit_code


class SubmitError(RunnerError):
    """A Kubernetes submission failed or the Job ended without an envelope."""


class ListenerLostError(RunnerError):
    """``serve`` lost its listening socket (the event loop closed it after an accept error):
    it stops (exit 9) so that its supervisor starts it again, instead of serving on without
    accepting a connection."""


class LogProcessStartError(UsageError):
    """``serve`` could not start its log process (the interpreter cannot be executed by the
    service's user, no memory or process slot for it): a startup error, exit 9, naming why."""


class LogProcessExitedError(RunnerError):
    """``serve``'s log process (``runner.service.log.process``) exited on its own: ``serve``
    stops (exit 9) so that its supervisor starts it again; until then publishing answers 503."""


class PublishError(RunnerError):
    """An envelope could not be published (it stays in the spool)."""
