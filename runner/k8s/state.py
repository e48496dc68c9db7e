"""Read run state from Job and Pod objects (wire-form dicts). Pure.

Terminal Job states come from conditions with ``status: "True"``: ``Complete``, or ``Failed``
with its reason (DeadlineExceeded, BackoffLimitExceeded, PodFailurePolicy, ...), or the
interim ``FailureTarget`` (the controller has decided to fail the Job and is only waiting
for pods to terminate). A pod that cannot run never ends the Job by itself (it sits Pending
until the deadline), so those states are detected here to fail early with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from runner.k8s.errors import PodCannotRunError, RunDeletedError, RunFailedError, WaitTimeoutError
from runner.k8s.indexes import IndexProgress
from runner.k8s.job import ANNOTATION_RUN_ID, ANNOTATION_TENANT

State = Literal["succeeded", "failed", "cannot-run", "deleted", "timeout"]
Phase = Literal["pending", "running", "succeeded", "failed"]

#: Container waiting reasons that will not resolve on their own.
CANNOT_RUN_REASONS: Final = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)

_HINTS: Final = {
    "Unschedulable": "no node can run this pod: check that SNP nodes exist and carry the "
    "runtime class's node labels, and that the runtime class is installed",
    "ImagePullBackOff": "the image cannot be pulled: check the digest exists in the registry "
    "and that the CoCo guest can reach the registry",
    "ErrImagePull": "the image cannot be pulled: check the digest exists in the registry",
    "CreateContainerConfigError": "the container configuration is invalid: a referenced "
    "Secret, ConfigMap or volume is missing",
    "DeadlineExceeded": "the Job ran longer than activeDeadlineSeconds",
    "BackoffLimitExceeded": "every retry failed; read the pod's termination message",
    "PodFailurePolicy": "the replay exited with a deterministic failure code; retrying cannot help",
    "MaxFailedIndexesExceeded": "a shard failed for good and a merge needs every shard, so the "
    "Job stopped the others; `status` shows which index and why",
    "FailedIndexes": "some shards failed for good; `status` shows which indices and why",
}


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a tracked run ended (or why it cannot go on)."""

    name: str
    state: State
    reason: str
    message: str

    def explain(self) -> str:
        hint = _HINTS.get(self.reason)
        base = f"Job {self.name}: {self.state} ({self.reason})"
        if self.message:
            base += f": {self.message}"
        return f"{base}; {hint}" if hint else base


@dataclass(frozen=True, slots=True)
class RunStatus:
    """One line of ``status``/``list``."""

    name: str
    run_id: str
    tenant: str
    phase: Phase
    reason: str
    created: str
    #: A sharded run's indices (``status`` reads the pods for them; None for ``list`` and for
    #: unsharded runs).
    shards: tuple[IndexProgress, ...] | None = None

    def to_json_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "job": self.name,
            "runId": self.run_id,
            "tenant": self.tenant,
            "phase": self.phase,
            "reason": self.reason,
            "created": self.created,
        }
        if self.shards is not None:
            document["shards"] = [shard.to_json_dict() for shard in self.shards]
        return document


def _true_condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in job.get("status", {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def job_outcome(job: dict[str, Any]) -> RunOutcome | None:
    """The terminal outcome of a Job, or None while it is still going."""
    name = str(job.get("metadata", {}).get("name", ""))
    if _true_condition(job, "Complete") is not None:
        return RunOutcome(name, "succeeded", "Complete", "")
    for kind in ("Failed", "FailureTarget"):
        condition = _true_condition(job, kind)
        if condition is not None:
            return RunOutcome(
                name,
                "failed",
                str(condition.get("reason") or kind),
                str(condition.get("message") or ""),
            )
    return None


def pod_blocker(pod: dict[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` when a pod cannot run and will not recover by waiting."""
    status = pod.get("status", {})
    if status.get("phase") not in (None, "Pending"):
        return None
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return "Unschedulable", str(condition.get("message") or "")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in CANNOT_RUN_REASONS:
            return str(reason), str(waiting.get("message") or "")
    return None


def job_status(job: dict[str, Any]) -> RunStatus:
    """Phase and reason of one Job, for ``status`` and ``list``."""
    metadata = job.get("metadata", {})
    annotations = metadata.get("annotations") or {}
    outcome = job_outcome(job)
    phase: Phase
    if outcome is None:
        phase = "running" if job.get("status", {}).get("active") else "pending"
        reason = ""
    else:
        phase = "succeeded" if outcome.state == "succeeded" else "failed"
        reason = outcome.reason
    return RunStatus(
        name=str(metadata.get("name", "")),
        run_id=str(annotations.get(ANNOTATION_RUN_ID, "")),
        tenant=str(annotations.get(ANNOTATION_TENANT, "")),
        phase=phase,
        reason=reason,
        created=str(metadata.get("creationTimestamp", "")),
    )


def raise_for_outcome(outcome: RunOutcome) -> None:
    """Turn a non-success outcome into its precise ``SubmitError``."""
    if outcome.state == "succeeded":
        return
    message = outcome.explain()
    if outcome.state == "cannot-run":
        raise PodCannotRunError(message, reason=outcome.reason)
    if outcome.state == "failed":
        raise RunFailedError(message, reason=outcome.reason)
    if outcome.state == "deleted":
        raise RunDeletedError(message)
    raise WaitTimeoutError(message)
