"""Pods that cannot start yet, pods that never will, and pods that are taken away, through the CLI.

The scenarios follow what a CoCo node shows: a sandbox failure leaves the pod in
ContainerCreating and is visible only as ``FailedCreatePodSandBox`` events (one per attempt,
each a VM boot); an agent-policy denial of the replay container fails the pod with
``StartError``; an eviction fails it with ``DisruptionTarget`` (or just ``Evicted`` for a
local-storage limit). ``wait`` must report each while it happens, tell transient from final,
stop the Job when waiting cannot help, and let the Job's own policy bound the retries.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from runner.k8s.watch import POLL_INTERVAL
from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import Pods, cli, error_line, name_of, run_id_of, submit_args

SUBMIT_EXIT = 5
NS = "attested-replay"
KATA = "failed to create shim task: "
ANNOTATION_REFUSED = (
    "rpc error: code = Unknown desc = failed to create containerd task: "
    + KATA
    + "annotation io.katacontainers.config.hypervisor.kernel_params is not enabled"
)
VM_FAILED = (
    "rpc error: code = Unknown desc = failed to create containerd task: "
    + KATA
    + "failed to launch qemu: exit status 1, error messages from qemu log: SEV: failed to "
    "initialize"
)
POLICY_DENIED = (
    'rpc error: code = PermissionDenied desc = "CreateContainerRequest is blocked by policy: "'
)


def wait_args(pods: Pods, *extra: str) -> list[str]:
    return ["--wait", "--timeout", "30", "--expected", str(pods.base.expected), *extra]


def progress(stderr: str) -> list[dict[str, Any]]:
    """The ``run_progress`` events the CLI logged (JSON lines on stderr)."""
    events = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "run_progress":
                events.append({k: event[k] for k in ("phase", "reason", "message") if k in event})
    return events


def job_exists(cluster: FakeCluster) -> bool:
    return (NS, name_of()) in cluster.jobs


def seen(cluster: FakeCluster, pod: str) -> None:
    """Wait until the CLI's pod watch was sent the pod's current state, and give the CLI a poll
    interval to take it in: watches of different kinds are not ordered with each other."""
    version = int(cluster.pods[(NS, pod)]["metadata"]["resourceVersion"])
    cluster.wait_until(lambda: cluster.delivered["pods"] >= version)
    time.sleep(POLL_INTERVAL)


def watching(cluster: FakeCluster) -> None:
    """Let the CLI open its watches first, so it sees every change in order."""
    cluster.wait_until(
        lambda: all(cluster.requests[f"WATCH {kind}"] >= 1 for kind in ("jobs", "pods", "events"))
    )


def test_unschedulable_then_scheduled_within_the_grace_succeeds(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    message = "0/3 nodes are available: 3 Insufficient sev-snp.amd.com/esids."

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        pod = c.start_pod(job["metadata"]["name"])
        c.unschedulable(pod, message)
        seen(c, pod)
        c.running(pod)  # the autoscaler added a node; the scheduler binds the pod
        c.succeed(pod, log=pods.for_run(run_id_of(job)).log)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = progress(captured.err)
    assert {"phase": "pending", "reason": "Unschedulable", "message": message} in lines
    assert lines[-1] == {"phase": "succeeded", "reason": "Complete", "message": ""}
    assert cluster.created[name_of()] == 1


@pytest.mark.parametrize(
    ("stall", "reason", "message", "grace"),
    [
        (
            "unschedulable",
            "Unschedulable",
            "0/3 nodes are available: 3 Insufficient cpu.",
            "--schedule-grace",
        ),
        ("ErrImagePull", "ErrImagePull", "manifest unknown", "--image-pull-grace"),
        ("ImagePullBackOff", "ImagePullBackOff", "Back-off pulling image", "--image-pull-grace"),
        (
            "CreateContainerConfigError",
            "CreateContainerConfigError",
            'secret "acme-publish" not found',
            "--start-grace",
        ),
    ],
)
def test_a_stall_becomes_final_after_its_grace_and_the_job_is_stopped(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    stall: str,
    reason: str,
    message: str,
    grace: str,
) -> None:
    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        pod = c.start_pod(job["metadata"]["name"])
        if stall == "unschedulable":
            c.unschedulable(pod, message)
        else:
            c.waiting(pod, reason, message)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, grace, "0.5"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err).startswith(
        f"Job {name_of()}: cannot-run ({reason}): {message}; "
    )
    assert error_line(captured.err).endswith(
        "; the Job was stopped (deleted) so that no further VM boots"
    )
    assert {"phase": "pending", "reason": reason, "message": message} in progress(captured.err)
    assert not job_exists(cluster)
    assert cluster.pods == {}


def test_an_invalid_image_name_is_final_at_once(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        c.waiting(c.start_pod(job["metadata"]["name"]), "InvalidImageName", "couldn't parse image")

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, "--start-grace", "3600"))
    assert code == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err).startswith(
        f"Job {name_of()}: cannot-run (InvalidImageName): couldn't parse image"
    )
    assert not job_exists(cluster)


def test_a_sandbox_failure_is_reported_while_waiting_and_by_status(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    """One attempt, and the very next look (one ``status``, or the waiting CLI's next event)
    names it, with the kubelet's reason and message."""

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        c.sandbox_failed(c.start_pod(job["metadata"]["name"]), VM_FAILED)

    cluster.on_job_created = script
    code = cli(
        *submit_args(kubeconfig, pods),
        "--wait",
        "--timeout",
        "3",
        "--expected",
        str(pods.base.expected),
    )
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT  # timed out: the grace (60 s) had not passed
    assert {
        "phase": "pending",
        "reason": "FailedCreatePodSandBox",
        "message": f"Failed to create pod sandbox: {VM_FAILED}",
    } in progress(captured.err)
    assert error_line(captured.err) == f"Job {name_of()}: timeout (Timeout): not finished after 3 s"

    assert cli("status", "run-1", "--tenant", "acme", "--kubeconfig", str(kubeconfig)) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["phase"], status["reason"], status["message"], status["sandboxAttempts"]) == (
        "pending",
        "FailedCreatePodSandBox",
        f"Failed to create pod sandbox: {VM_FAILED}",
        1,
    )


def test_a_failing_sandbox_is_stopped_after_its_grace_with_the_attempts_counted(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        pod = c.start_pod(job["metadata"]["name"])
        for _ in range(4):  # the kubelet retries the sandbox: four VM boots
            c.sandbox_failed(pod, VM_FAILED)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, "--sandbox-grace", "0.5"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err).startswith(
        f"Job {name_of()}: cannot-run (FailedCreatePodSandBox): Failed to create pod sandbox: "
        f"{VM_FAILED} (4 attempts, each a VM boot); the Kata runtime could not start"
    )
    assert not job_exists(cluster)


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("sandbox-annotation", "FailedCreatePodSandBox"),
        ("sandbox-policy", "AgentPolicyDenied"),
        ("container-policy", "AgentPolicyDenied"),
    ],
)
def test_failures_that_cannot_heal_stop_the_job_at_once(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    where: str,
    reason: str,
) -> None:
    """An annotation the runtime refuses, and an agent-policy denial (the policy is fixed in the
    pod's init-data), fail the same way on every attempt: no grace, no second VM."""

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        pod = c.start_pod(job["metadata"]["name"])
        if where == "sandbox-annotation":
            c.sandbox_failed(pod, ANNOTATION_REFUSED)
        elif where == "sandbox-policy":
            c.sandbox_failed(
                pod, POLICY_DENIED.replace("CreateContainerRequest", "CreateSandboxRequest")
            )
        else:
            c.start_error(pod, POLICY_DENIED)

    cluster.on_job_created = script
    graces = ("--sandbox-grace", "3600", "--start-grace", "3600")
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, *graces))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    message = error_line(captured.err)
    assert message.startswith(f"Job {name_of()}: cannot-run ({reason}): ")
    assert ("blocked by policy" in message) == (reason == "AgentPolicyDenied")
    assert message.endswith("; the Job was stopped (deleted) so that no further VM boots")
    assert not job_exists(cluster)
    assert cluster.created[name_of()] == 1
    # the container-level denial failed one pod: the Job had made a second one, now gone too
    assert cluster.pods == {}


def test_an_eviction_is_counted_reported_and_retried(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    pressure = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. "

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        first = c.start_pod(job["metadata"]["name"])
        c.running(first)
        second = c.evict(first, reason="TerminationByKubelet", message=pressure)
        assert second is not None  # counted (backoffLimit 2), replaced
        seen(c, first)
        c.running(second)
        c.succeed(second, log=pods.for_run(run_id_of(job)).log)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert {
        "phase": "disrupted",
        "reason": "TerminationByKubelet",
        "message": f"pod {name_of()}-bbbbb: {pressure}",
    } in progress(captured.err)
    assert cluster.jobs[(NS, name_of())]["status"]["failed"] == 1  # counted, not ignored


def test_evictions_are_bounded_by_the_backoff_limit_and_listed(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    """Preemption, an API eviction and an emptyDir-limit eviction (no DisruptionTarget): three
    attempts, three VMs, then the Job fails; the error lists each."""
    emptydir = 'Usage of EmptyDir volume "tmp" exceeds the limit "5823Mi". '

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        pod: str | None = c.start_pod(job["metadata"]["name"])
        assert pod is not None
        c.running(pod)
        pod = c.evict(
            pod,
            reason="PreemptionByScheduler",
            message="default-scheduler: preempting to accommodate a higher priority pod",
        )
        assert pod is not None
        c.running(pod)
        pod = c.evict(pod, reason="EvictionByEvictionAPI", message="Eviction API: evicting")
        assert pod is not None
        c.running(pod)
        assert c.evict(pod, reason=None, message=emptydir) is None  # the Job failed

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err) == (
        f"Job {name_of()}: failed (BackoffLimitExceeded): Job has reached the specified backoff "
        "limit; every attempt failed (the pod failures are listed); each attempt was a new VM; "
        f"pod failures: {name_of()}-bbbbb disrupted (PreemptionByScheduler): default-scheduler: "
        f"preempting to accommodate a higher priority pod; {name_of()}-cbbbb disrupted "
        f"(EvictionByEvictionAPI): Eviction API: evicting; {name_of()}-dbbbb disrupted (Evicted): "
        f"{emptydir}"
    )


@pytest.mark.parametrize(
    ("refusal", "admission"),
    [
        (
            (
                'pods "replay-" is forbidden: error looking up service account '
                'other/attested-replay-job: serviceaccount "attested-replay-job" not found'
            ),
            "ServiceAccount",
        ),
        (
            (
                'pods "replay-" is forbidden: violates PodSecurity "restricted:latest": '
                'allowPrivilegeEscalation != false (container "replay" must set '
                "securityContext.allowPrivilegeEscalation=false)"
            ),
            "PodSecurity",
        ),
        (
            (
                'pods "replay-" is forbidden: exceeded quota: compute, requested: limits.cpu=2, '
                "used: limits.cpu=8, limited: limits.cpu=8"
            ),
            "ResourceQuota",
        ),
        (
            'admission webhook "policy.example.com" denied the request: no',
            "a validating/mutating webhook",
        ),
    ],
)
def test_a_pod_refused_at_admission_is_named_and_the_job_stopped(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    refusal: str,
    admission: str,
) -> None:
    """No pod exists: the only sign is the Job controller's ``FailedCreate`` on the Job."""

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        c.failed_create(job["metadata"]["name"], refusal)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, "--start-grace", "3600"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err) == (
        f"Job {name_of()}: cannot-run (FailedCreate): refused by {admission}: "
        f"Error creating: {refusal}; the API server refused the Job's pod at admission, so no "
        "pod (and no VM) will ever start; fix what the message names (in the Job's namespace) "
        "and submit again; the Job was stopped (deleted) so that no further VM boots"
    )
    assert not job_exists(cluster)


def test_vm_boots_are_counted_across_aggregated_events(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kata's sandbox errors name per-attempt IDs, so each message differs: the kubelet's
    recorder keeps nine events of count 1, then folds the rest into one "(combined from similar
    events)" event whose count grows. Twelve boots are twelve, not one or three."""

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        pod = c.start_pod(job["metadata"]["name"])
        for attempt in range(12):
            c.sandbox_failed(pod, f"{VM_FAILED} (vsock cid {attempt + 3})")

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, "--sandbox-grace", "0.5"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    counts = sorted(
        event["count"]
        for event in cluster.events.values()
        if event["reason"] == "FailedCreatePodSandBox"
    )
    assert counts == [1] * 9 + [3]
    assert error_line(captured.err).startswith(
        f"Job {name_of()}: cannot-run (FailedCreatePodSandBox): (combined from similar events): "
        f"Failed to create pod sandbox: {VM_FAILED} (vsock cid 14) (12 attempts, each a VM boot); "
    )


def test_a_missing_secret_volume_is_a_failed_mount_stall_with_the_right_hint(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mounted Secret that does not exist never shows as a waiting reason: the pod stays
    ContainerCreating and only ``FailedMount`` says why."""
    message = (
        'MountVolume.SetUp failed for volume "publish-token" : secret "acme-publish" not found'
    )

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        c.mount_failed(c.start_pod(job["metadata"]["name"]), "publish-token", "acme-publish")

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, "--start-grace", "0.5"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err) == (
        f"Job {name_of()}: cannot-run (FailedMount): {message}; a volume of the pod cannot be "
        "mounted: a Secret it mounts (--publish-token-secret, --endorsement-secret) is missing "
        "in the Job's namespace; create it there (the pod starts as soon as it exists); the Job "
        "was stopped (deleted) so that no further VM boots"
    )
    assert {"phase": "pending", "reason": "FailedMount", "message": message} in progress(
        captured.err
    )
    assert not job_exists(cluster)


#: What a guest pull failure reads as in the container's StartError: the CDH's ttRPC status
#: message (guest-components v0.21.0 ttrpc_server/mod.rs "[CDH] [ERROR]: {e}", error.rs
#: "Image Pull error: {0}", image-rs image.rs PullImageError) inside the agent's rpc status.
CDH_PULL_FAILED = (
    'rpc status: Status { code: INTERNAL, message: "[CDH] [ERROR]: Image Pull error: Failed to '
    "pull image ghcr.io/acme/replay@sha256:00 from all mirror/mapping locations or original "
    'location: image: ghcr.io/acme/replay@sha256:00, error: Failed to pull image manifest", '
    "details: [], special_fields: SpecialFields { unknown_fields: UnknownFields { fields: None }"
    ", cached_size: CachedSize { size: 0 } } }"
)


def test_a_guest_image_pull_failure_stops_the_job_after_one_vm_with_the_guest_hint(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        watching(c)
        c.start_error(c.start_pod(job["metadata"]["name"]), CDH_PULL_FAILED)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, "--start-grace", "3600"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    line = error_line(captured.err)
    assert line.startswith(
        f"Job {name_of()}: cannot-run (GuestImagePullFailed): failed to create containerd task: "
        f"failed to create shim task: {CDH_PULL_FAILED}; the image is pulled inside the "
        "confidential VM (CoCo guest pull through the Confidential Data Hub), not by the node"
    )
    assert line.endswith("; the Job was stopped (deleted) so that no further VM boots")
    assert cluster.created[name_of()] == 1
    assert not job_exists(cluster)
