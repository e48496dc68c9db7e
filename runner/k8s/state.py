"""Read run state from Job, Pod and Event objects (wire-form dicts). Pure.

What each object tells, as the Kubernetes components write it:

* Job conditions with ``status: "True"`` (batch/v1 ``types.go``): ``Complete``, or from 1.31 the
  interim ``SuccessCriteriaMet`` (reason ``CompletionsReached``) that precedes it; ``Failed``
  with its reason (``DeadlineExceeded``, ``BackoffLimitExceeded``, ``PodFailurePolicy``, …), or
  the interim ``FailureTarget`` with the same reason and message (``job_controller.go``).
* A pod that cannot start never ends the Job by itself: it sits Pending until the deadline. The
  scheduler says ``PodScheduled=False`` reason ``Unschedulable``; the kubelet puts a waiting
  reason on the container (``ErrImagePull``, ``ImagePullBackOff``, ``CreateContainerConfigError``
  …); a sandbox that cannot be created shows only ``ContainerCreating`` and is visible solely
  through ``FailedCreatePodSandBox`` events, one per attempt (under Kata one VM boot each,
  retried every 10-15 s by the kubelet's pod worker).
* A failed pod (``phase: Failed``) was disrupted when it carries ``DisruptionTarget`` (reasons
  ``TerminationByKubelet``, ``PreemptionByScheduler``, ``EvictionByEvictionAPI``,
  ``DeletionByTaintManager``, ``DeletionByPodGC``) or ``status.reason: Evicted`` (kubelet
  local-storage evictions carry no condition); failed to start when its container terminated
  with ``StartError`` (containerd, exit 128) — under Kata that is where the agent's
  ``CreateContainerRequest`` runs, so an agent-policy denial reads "… is blocked by policy".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from runner.k8s.errors import PodCannotRunError, RunDeletedError, RunFailedError, WaitTimeoutError
from runner.k8s.indexes import IndexProgress
from runner.k8s.job import ANNOTATION_RUN_ID, ANNOTATION_TENANT

State = Literal["succeeded", "failed", "cannot-run", "deleted", "timeout"]
Phase = Literal["pending", "running", "succeeded", "failed"]
#: Which grace applies before a stalled pod counts as unable to run ("final": none).
StallKind = Literal["schedule", "image-pull", "start", "sandbox", "final"]

#: Container waiting reasons (kubelet ``images/types.go``, ``kuberuntime_container.go``) and
#: how they heal: image pulls retry with back-off (10 s doubling to 300 s), a missing Secret or
#: ConfigMap may appear; a malformed image name or ``Never`` pull policy cannot change in a
#: Job's immutable pod template.
WAITING_STALLS: Final[dict[str, StallKind]] = {
    "ErrImagePull": "image-pull",
    "ImagePullBackOff": "image-pull",
    "RegistryUnavailable": "image-pull",
    "SignatureValidationFailed": "final",
    "InvalidImageName": "final",
    "ErrImageNeverPull": "final",
    "CreateContainerConfigError": "start",
    "CreateContainerError": "start",
    "PreCreateHookError": "start",
    "PreStartHookError": "start",
    "RunContainerError": "start",
}
SANDBOX_EVENT: Final = "FailedCreatePodSandBox"
#: kata agent ``policy.rs``: ``"{ep} is blocked by policy: {prints}"`` — init-data fixes the
#: policy for the pod's lifetime, so a denial repeats on every attempt.
POLICY_DENIED: Final = "is blocked by policy"
#: kata runtime ``oci/utils.go``: ``"annotation %v is not enabled"`` — a node configuration
#: that no retry changes.
ANNOTATION_REFUSED: Final = "is not enabled"
POLICY_DENIED_REASON: Final = "AgentPolicyDenied"
DISRUPTION_TARGET: Final = "DisruptionTarget"
#: The outcome reason of a run whose Job did not exist when the wait began.
JOB_NOT_FOUND: Final = "JobNotFound"
START_ERROR: Final = "StartError"
#: kubelet volume manager: a volume (a Secret the pod mounts) cannot be set up; the pod stays
#: ``ContainerCreating`` and only this Warning says why ("MountVolume.SetUp failed for volume
#: … : secret "…" not found", later "Unable to attach or mount volumes: …").
FAILED_MOUNT: Final = "FailedMount"
#: CoCo pulls the image inside the guest: the agent's CreateContainer asks the Confidential
#: Data Hub, whose ttRPC server answers ``"[CDH] [ERROR]: {e}"`` with ``e`` = "Image Pull error:
#: {PullImageError}" (guest-components v0.21.0 ``confidential-data-hub/hub/src/bin/ttrpc_server/
#: mod.rs`` and ``hub/src/error.rs``; kata 4.1 ``src/agent/src/storage/image_pull_handler.rs``);
#: containerd fails the container with ``StartError``, not an image-pull waiting reason.
CDH_IMAGE_PULL: Final = "[CDH] [ERROR]: Image Pull error"
GUEST_IMAGE_PULL_REASON: Final = "GuestImagePullFailed"
#: The Job controller's Warning on the *Job* when the API server refused its pod
#: (``pkg/controller/job/job_controller.go`` → ``controller_utils.go`` CreatePods:
#: "Error creating: <err>"); no pod exists, so nothing else would ever show it.
FAILED_CREATE: Final = "FailedCreate"
#: Which admission refused the pod, by the text its plugin writes (kubernetes
#: ``plugin/pkg/admission/serviceaccount/admission.go`` "error looking up service account",
#: pod-security-admission ``admission/admission.go`` "violates PodSecurity",
#: ``plugin/pkg/admission/resourcequota`` "exceeded quota", apiserver
#: ``admission/plugin/webhook/errors`` "admission webhook %q denied the request").
_ADMISSIONS: Final = (
    ("error looking up service account", "ServiceAccount"),
    ("violates PodSecurity", "PodSecurity"),
    ("exceeded quota", "ResourceQuota"),
    ("admission webhook", "a validating/mutating webhook"),
)

_HINTS: Final = {
    "Unschedulable": "no node can run this pod: check that SNP nodes exist and carry the "
    "runtime class's node labels, and that they have room for the pod plus the runtime "
    "class overhead",
    "ImagePullBackOff": "the node cannot pull the image: check the digest exists in the "
    "registry and the node's pull credentials",
    "ErrImagePull": "the image cannot be pulled: check the digest exists in the registry",
    "CreateContainerConfigError": "the container configuration is invalid: a Secret or "
    "ConfigMap its environment references is missing",
    SANDBOX_EVENT: "the Kata runtime could not start the confidential VM (see the message: "
    "runtime configuration, init-data, firmware); every attempt boots a new VM",
    POLICY_DENIED_REASON: "the agent policy in the pod's init-data refuses the replay's "
    "request; regenerate init-data from the same run parameters as the Job",
    FAILED_CREATE: "the API server refused the Job's pod at admission, so no pod (and no VM) "
    "will ever start; fix what the message names (in the Job's namespace) and submit again",
    FAILED_MOUNT: "a volume of the pod cannot be mounted: a Secret it mounts "
    "(--publish-token-secret, --endorsement-secret) is missing in the Job's namespace; create "
    "it there (the pod starts as soon as it exists)",
    GUEST_IMAGE_PULL_REASON: "the image is pulled inside the confidential VM (CoCo guest pull "
    "through the Confidential Data Hub), not by the node: check the digest, the guest's egress "
    "to the registry (the NetworkPolicy applies), registry credentials and the image policy in "
    "init-data; node-side pull settings do not apply",
    "DeadlineExceeded": "the Job ran longer than activeDeadlineSeconds",
    "BackoffLimitExceeded": "every attempt failed (the pod failures are listed); each attempt "
    "was a new VM",
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
    #: Disruptions and failed attempts seen on the way, oldest first.
    attempts: tuple[str, ...] = ()
    #: The client deleted the Job because the run could not go on.
    stopped: bool = False

    def explain(self) -> str:
        hint = _HINTS.get(self.reason)
        base = f"Job {self.name}: {self.state} ({self.reason})"
        if self.message:
            base += f": {self.message}"
        if hint:
            base += f"; {hint}"
        if self.attempts:
            base += f"; pod failures: {'; '.join(self.attempts)}"
        if self.stopped:
            base += "; the Job was stopped (deleted) so that no further VM boots"
        return base


@dataclass(frozen=True, slots=True)
class Stall:
    """Why a pod is not running yet, and which grace applies."""

    reason: str
    message: str
    kind: StallKind


@dataclass(frozen=True, slots=True)
class PodFailure:
    """A failed attempt: one pod that ended ``Failed``."""

    pod: str
    reason: str
    message: str
    disruption: bool = False
    #: Retrying cannot help (an agent-policy denial).
    final: bool = False

    def describe(self) -> str:
        kind = "disrupted" if self.disruption else "failed"
        text = f"{self.pod} {kind} ({self.reason})"
        return f"{text}: {self.message}" if self.message else text


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
    message: str = ""
    #: Sandbox attempts of the current pod (under Kata: VM boots); 0 when none failed.
    sandbox_attempts: int = 0
    pod_failures: tuple[str, ...] = field(default=())

    def to_json_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "job": self.name,
            "runId": self.run_id,
            "tenant": self.tenant,
            "phase": self.phase,
            "reason": self.reason,
            "message": self.message,
            "created": self.created,
        }
        if self.shards is not None:
            document["shards"] = [shard.to_json_dict() for shard in self.shards]
        if self.sandbox_attempts:
            document["sandboxAttempts"] = self.sandbox_attempts
        if self.pod_failures:
            document["podFailures"] = list(self.pod_failures)
        return document


def job_status(job: dict[str, Any]) -> RunStatus:
    """Phase and reason of one Job from the Job alone (``list``; ``status`` adds its pods')."""
    metadata = job.get("metadata", {})
    annotations = metadata.get("annotations") or {}
    outcome = job_outcome(job)
    phase: Phase
    if outcome is None:
        phase = "running" if job.get("status", {}).get("active") else "pending"
        reason = message = ""
    else:
        phase = "succeeded" if outcome.state == "succeeded" else "failed"
        reason, message = outcome.reason, outcome.message
    return RunStatus(
        name=str(metadata.get("name", "")),
        run_id=str(annotations.get(ANNOTATION_RUN_ID, "")),
        tenant=str(annotations.get(ANNOTATION_TENANT, "")),
        phase=phase,
        reason=reason,
        created=str(metadata.get("creationTimestamp", "")),
        message=message,
    )


def true_condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def job_outcome(job: dict[str, Any]) -> RunOutcome | None:
    """The terminal outcome of a Job, or None while it is still going."""
    name = str(job.get("metadata", {}).get("name", ""))
    for kind in ("Complete", "SuccessCriteriaMet"):
        if true_condition(job, kind) is not None:
            return RunOutcome(name, "succeeded", "Complete", "")
    for kind in ("Failed", "FailureTarget"):
        condition = true_condition(job, kind)
        if condition is not None:
            return RunOutcome(
                name,
                "failed",
                str(condition.get("reason") or kind),
                str(condition.get("message") or ""),
            )
    return None


def pod_stall(pod: dict[str, Any]) -> Stall | None:
    """Why a Pending pod is not running, from its own status (events: :func:`event_stall`)."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return Stall("Unschedulable", str(condition.get("message") or ""), "schedule")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        kind = WAITING_STALLS.get(str(waiting.get("reason")))
        if kind is not None:
            return Stall(str(waiting["reason"]), str(waiting.get("message") or ""), kind)
    return None


def event_stall(event: dict[str, Any]) -> Stall | None:
    """A ``FailedCreatePodSandBox`` event: final at once when the message shows a cause no
    retry changes (agent policy, an annotation the runtime refuses); a ``FailedMount`` event:
    the start grace (the Secret may still be created)."""
    if event.get("type") != "Warning":
        return None
    if event.get("reason") == FAILED_MOUNT:
        return Stall(FAILED_MOUNT, str(event.get("message") or ""), "start")
    if event.get("reason") != SANDBOX_EVENT:
        return None
    message = str(event.get("message") or "")
    if POLICY_DENIED in message:
        return Stall(POLICY_DENIED_REASON, message, "final")
    if ANNOTATION_REFUSED in message:
        return Stall(SANDBOX_EVENT, message, "final")
    return Stall(SANDBOX_EVENT, message, "sandbox")


def admission_of(message: str) -> str:
    """The admission that refused a pod, named from a ``FailedCreate`` message."""
    for marker, admission in _ADMISSIONS:
        if marker in message:
            return admission
    return "an admission plugin"


def job_event_outcome(event: dict[str, Any]) -> RunOutcome | None:
    """A Warning event on a Job that ends the wait: ``FailedCreate`` (its pod was refused)."""
    involved = event.get("involvedObject") or {}
    if (
        involved.get("kind") != "Job"
        or event.get("reason") != FAILED_CREATE
        or event.get("type") != "Warning"
    ):
        return None
    message = str(event.get("message") or "")
    return RunOutcome(
        str(involved.get("name", "")),
        "cannot-run",
        FAILED_CREATE,
        f"refused by {admission_of(message)}: {message}",
    )


def event_count(event: dict[str, Any]) -> int:
    """How many times it happened: ``series.count`` (events.k8s.io recorders) or ``count``."""
    series = event.get("series") or {}
    for value in (series.get("count"), event.get("count")):
        if isinstance(value, int) and value > 0:
            return value
    return 1


def events_span(events: Iterable[dict[str, Any]]) -> float:
    """Seconds from the first occurrence of the earliest event to the last of the latest, by
    the reporting component's clock (the events of one object and reason, as one sequence)."""
    firsts: list[datetime] = []
    lasts: list[datetime] = []
    for event in events:
        series = event.get("series") or {}
        first = _timestamp(event.get("firstTimestamp") or event.get("eventTime"))
        last = _timestamp(
            series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
        )
        if first is not None and last is not None:
            firsts.append(first)
            lasts.append(last)
    if not firsts:
        return 0.0
    return max(0.0, (max(lasts) - min(firsts)).total_seconds())


def pod_failure(pod: dict[str, Any]) -> PodFailure | None:
    """What a ``Failed`` pod tells about the attempt it was."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    name = str((pod.get("metadata") or {}).get("name", ""))
    disruption = true_condition(pod, DISRUPTION_TARGET)
    if disruption is not None:
        return PodFailure(
            name,
            str(disruption.get("reason") or DISRUPTION_TARGET),
            str(disruption.get("message") or ""),
            disruption=True,
        )
    if status.get("reason") == "Evicted":
        return PodFailure(name, "Evicted", str(status.get("message") or ""), disruption=True)
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if not terminated:
            continue
        message = str(terminated.get("message") or "")
        if terminated.get("reason") == START_ERROR:
            if POLICY_DENIED in message:
                return PodFailure(name, POLICY_DENIED_REASON, message, final=True)
            if CDH_IMAGE_PULL in message:
                # The guest pulls afresh in every new VM and fails the same way (digest,
                # credentials, policy, the guest's route to the registry): stop, do not boot more.
                return PodFailure(name, GUEST_IMAGE_PULL_REASON, message, final=True)
            return PodFailure(name, START_ERROR, message)
        code = terminated.get("exitCode")
        return PodFailure(name, f"exit code {code}", str(terminated.get("reason") or ""))
    return PodFailure(name, "Failed", str(status.get("message") or ""))


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


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
