"""The operator CLI against a real kube-apiserver, Job controller, garbage collector, TTL
controller and scheduler, with kwok as the nodes (tests/k8s/control_plane.py).

What only a real control plane shows: RBAC of the project's Role, admission (ServiceAccount,
Pod Security, RuntimeClass), the Job controller's pods, conditions and events, cascade and TTL
deletion, watch expiry after an etcd compaction.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runner.k8s.job import INSTANCE_LABEL
from tests.k8s.apiserver import PodRefusedError
from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import (
    RUN_ID,
    TENANT,
    Pods,
    cli,
    error_line,
    last_json,
    name_of,
    submit_args,
)
from tests.k8s.control_plane import ADMIN, NAMESPACE, OPERATOR, UNBOUND, ControlPlane
from tests.k8s.kubelet import Replays

pytestmark = pytest.mark.control_plane

SUBMIT_EXIT = 5
WAIT = ("--timeout", "60")


def operator_kubeconfig(plane: ControlPlane, tmp_path: Path, user: str = OPERATOR) -> Path:
    return plane.kubeconfig(user, tmp_path / f"{user}.kubeconfig")


def run_pods(plane: ControlPlane, job: str, namespace: str = NAMESPACE) -> list[Any]:
    path = f"/api/v1/namespaces/{namespace}/pods?labelSelector={INSTANCE_LABEL}%3D{job}"
    items: list[Any] = plane.json("GET", path)["items"]
    return items


def wait_until(plane: ControlPlane, what: str, condition: Any, timeout: float = 60.0) -> None:
    plane.wait_for(what, condition, timeout=timeout)


def job_exists(plane: ControlPlane, name: str, namespace: str = NAMESPACE) -> bool:
    answer = plane.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    return answer.status_code == 200


def test_submit_waits_collects_and_verifies_on_a_real_control_plane(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = "real-happy"
    output = pods.for_run(run_id)
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    out = tmp_path / "envelope.json"
    with Replays(real_cluster, name_of(run_id), tmp_path, log=output.log) as replays:
        code = cli(
            *submit_args(kubeconfig, pods, run_id=run_id),
            "--wait",
            *WAIT,
            "--expected",
            str(output.expected),
            "--out",
            str(out),
        )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # the ClusterRole lets the operator read the runtime class: the check ran
    assert "k8s_runtime_class_unchecked" not in captured.err
    summary = last_json(captured.out)
    assert (summary["verified"], summary["source"], summary["runId"]) == (True, "pod-log", run_id)
    # kwok reports no termination message, as a CoCo node without GetDiagnosticData
    assert summary["terminationMessage"] == "absent"
    assert out.read_bytes() == output.envelope
    assert len(replays.finished) == 1
    (pod,) = run_pods(real_cluster, name_of(run_id))
    # RuntimeClass admission merged the class's overhead and node selector into the pod
    assert pod["spec"]["runtimeClassName"] == "kata-qemu-coco-dev"
    assert pod["spec"]["overhead"] == {"cpu": "250m", "memory": "160Mi"}
    assert pod["spec"]["nodeSelector"] == {"katacontainers.io/kata-runtime": "true"}
    assert pod["spec"]["serviceAccountName"] == "attested-replay-job"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == name_of(run_id)

    assert cli("status", "--kubeconfig", str(kubeconfig), "--tenant", TENANT, run_id) == 0
    status = last_json(capsys.readouterr().out)
    assert (status["job"], status["phase"], status["reason"]) == (
        name_of(run_id),
        "succeeded",
        "Complete",
    )
    assert cli("list", "--kubeconfig", str(kubeconfig)) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(run["runId"], run["phase"]) for run in listed] == [(run_id, "succeeded")]


def test_cancel_deletes_the_job_and_its_running_pod(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    assert cli(*submit_args(kubeconfig, pods)) == 0
    wait_until(
        real_cluster,
        "the replay pod to run",
        lambda: (
            [p["status"].get("phase") for p in run_pods(real_cluster, name_of())] == ["Running"]
        ),
    )
    assert cli("cancel", "--kubeconfig", str(kubeconfig), "--tenant", TENANT, RUN_ID) == 0
    assert last_json(capsys.readouterr().out) == {
        "job": name_of(),
        "runId": RUN_ID,
        "cancelled": True,
    }
    # the garbage collector deletes the pod (kwok kills it, the Job controller lets go of it)
    wait_until(real_cluster, "the Job to go", lambda: not job_exists(real_cluster, name_of()))
    wait_until(real_cluster, "its pod to go", lambda: not run_pods(real_cluster, name_of()))
    assert cli("status", "--kubeconfig", str(kubeconfig), "--tenant", TENANT, RUN_ID) == 0
    gone = last_json(capsys.readouterr().out)
    assert (gone["phase"], gone["record"]["state"]) == ("gone", "cancelled")


def test_a_different_spec_for_a_submitted_run_is_refused(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    assert cli(*submit_args(kubeconfig, pods, run_id="real-conflict")) == 0
    first = last_json(capsys.readouterr().out)
    assert cli(*submit_args(kubeconfig, pods, run_id="real-conflict")) == 0
    again = last_json(capsys.readouterr().out)
    assert (again["attached"], again["specDigest"]) == (True, first["specDigest"])
    code = cli(*submit_args(kubeconfig, pods, "--cpu", "4", run_id="real-conflict"))
    assert code == SUBMIT_EXIT
    message = error_line(capsys.readouterr().err)
    assert (
        f"run 'real-conflict' of tenant '{TENANT}' already exists as Job {name_of('real-conflict')}"
    ) in message


def test_an_unbound_user_is_told_it_may_not(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path, UNBOUND)
    code = cli(*submit_args(kubeconfig, pods, run_id="real-unbound"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err) == (
        "the operator may not create run records (configmaps in namespace attested-replay): "
        "apply the Role in k8s/base there"
    )
    assert not job_exists(real_cluster, name_of("real-unbound"))
    hint = (
        "the operator needs the Role and ClusterRole of k8s/base, bound to the group "
        "attested-replay:operators or the ServiceAccount attested-replay-operator, in the Jobs' "
        "namespace"
    )
    for argv, verb, what in (
        (["status", "--tenant", TENANT, "real-unbound"], "get", ' "acme-real-unbound-'),
        (["list"], "list", ""),
        (["cancel", "--tenant", TENANT, "real-unbound"], "delete", ' "acme-real-unbound-'),
    ):
        code = cli(*argv, "--kubeconfig", str(kubeconfig))
        message = error_line(capsys.readouterr().err)
        assert code == SUBMIT_EXIT, message
        assert message.startswith(
            f"the Kubernetes API refused the request (HTTP 403: jobs.batch{what}"
        ), message
        assert message.endswith(
            f'is forbidden: User "{UNBOUND}" cannot {verb} resource "jobs" in API group "batch" '
            f'in the namespace "attested-replay"): {hint}'
        ), message


def test_a_pod_refused_by_service_account_admission_stops_the_job(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another namespace without the attested-replay-job ServiceAccount: the Job is created,
    its pod refused at admission; the wait names the admission and deletes the Job."""
    real_cluster.kubectl("create", "namespace", "elsewhere")
    kubeconfig = real_cluster.kubeconfig(ADMIN, tmp_path / "admin.kubeconfig")
    run_id = "real-no-account"
    code = cli(
        *submit_args(kubeconfig, pods, run_id=run_id),
        "--namespace",
        "elsewhere",
        "--wait",
        *WAIT,
        "--expected",
        str(pods.for_run(run_id).expected),
    )
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT, captured.err
    assert error_line(captured.err).startswith(
        f"Job {name_of(run_id)}: cannot-run (FailedCreate): refused by ServiceAccount: "
        "Error creating: pods "
    )
    assert (
        "error looking up service account elsewhere/attested-replay-job: serviceaccount "
        '"attested-replay-job" not found'
    ) in captured.err
    assert not job_exists(real_cluster, name_of(run_id), "elsewhere")


def dry_run_job(pods: Pods, tmp_path: Path, run_id: str, capsys: Any) -> dict[str, Any]:
    """The Job ``submit`` would create for ``run_id`` (``submit --dry-run``)."""
    kubeconfig = tmp_path / "unused.kubeconfig"
    kubeconfig.write_text("{}")
    assert cli(*submit_args(kubeconfig, pods, "--dry-run", run_id=run_id)) == 0
    job: dict[str, Any] = json.loads(capsys.readouterr().out)
    return job


def test_pod_security_warns_at_job_creation_and_refuses_the_pod(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """enforce judges the pod only; the namespace's warn label makes the Job's create answer
    with the violation, and the refused pod ends the wait with the admission named."""
    run_id = "real-privileged"
    job = dry_run_job(pods, tmp_path, run_id, capsys)
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["allowPrivilegeEscalation"] = True
    answer = real_cluster.request(
        "POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job, user=OPERATOR
    )
    assert answer.status_code == 201, answer.text
    violation = (
        'allowPrivilegeEscalation != false (container "replay" must set '
        "securityContext.allowPrivilegeEscalation=false)"
    )
    escaped = violation.replace('"', '\\"')
    assert answer.headers["Warning"] == (
        f'299 - "would violate PodSecurity \\"restricted:latest\\": {escaped}"'
    )
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    code = cli(
        "collect",
        "--kubeconfig",
        str(kubeconfig),
        "--tenant",
        TENANT,
        run_id,
        "--wait",
        *WAIT,
        "--expected",
        str(pods.for_run(run_id).expected),
    )
    message = error_line(capsys.readouterr().err)
    assert code == SUBMIT_EXIT, message
    assert message.startswith(
        f"Job {name_of(run_id)}: cannot-run (FailedCreate): refused by PodSecurity: "
        f'Error creating: pods "{name_of(run_id)}-'
    ), message
    assert f'is forbidden: violates PodSecurity "restricted:latest": {violation}' in message
    assert message.endswith("the Job was stopped (deleted) so that no further VM boots")
    assert not job_exists(real_cluster, name_of(run_id))


def test_a_pod_over_the_resource_quota_is_refused_and_named(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute"},
        "spec": {"hard": {"limits.cpu": "1"}},
    }
    real_cluster.json("POST", f"/api/v1/namespaces/{NAMESPACE}/resourcequotas", quota)
    try:
        run_id = "real-over-quota"
        kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
        code = cli(
            *submit_args(kubeconfig, pods, run_id=run_id),
            "--wait",
            *WAIT,
            "--expected",
            str(pods.for_run(run_id).expected),
        )
        message = error_line(capsys.readouterr().err)
    finally:
        real_cluster.json("DELETE", f"/api/v1/namespaces/{NAMESPACE}/resourcequotas/compute")
    assert code == SUBMIT_EXIT, message
    assert message.startswith(
        f"Job {name_of(run_id)}: cannot-run (FailedCreate): refused by ResourceQuota: "
        f'Error creating: pods "{name_of(run_id)}-'
    ), message
    # the pod's limit plus the runtime class's overhead, which RuntimeClass admission added
    assert (
        "is forbidden: exceeded quota: compute, requested: limits.cpu=2250m, used: "
        "limits.cpu=0, limited: limits.cpu=1"
    ) in message
    assert not job_exists(real_cluster, name_of(run_id))


def test_the_ttl_controller_deletes_a_finished_run_and_status_says_so(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = "real-ttl"
    output = pods.for_run(run_id)
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    with Replays(real_cluster, name_of(run_id), tmp_path, log=output.log):
        code = cli(
            *submit_args(kubeconfig, pods, "--ttl", "1", run_id=run_id),
            "--wait",
            *WAIT,
            "--expected",
            str(output.expected),
        )
    assert code == 0, capsys.readouterr().err
    wait_until(
        real_cluster,
        "the TTL to delete the Job",
        lambda: not job_exists(real_cluster, name_of(run_id)),
    )
    wait_until(real_cluster, "its pod to go", lambda: not run_pods(real_cluster, name_of(run_id)))
    capsys.readouterr()
    assert cli("status", "--kubeconfig", str(kubeconfig), "--tenant", TENANT, run_id) == 0
    gone = last_json(capsys.readouterr().out)
    assert (gone["phase"], gone["record"]["state"]) == ("gone", "submitted")
    code = cli(
        "collect",
        "--kubeconfig",
        str(kubeconfig),
        "--tenant",
        TENANT,
        run_id,
        "--expected",
        str(output.expected),
    )
    message = error_line(capsys.readouterr().err)
    assert code == SUBMIT_EXIT
    assert message.startswith(f"run '{run_id}' of tenant '{TENANT}': {gone['message']}"), message
    # the run record outlives the Job: the run ID is not reused silently, only with --rerun
    assert cli(*submit_args(kubeconfig, pods, run_id=run_id)) == SUBMIT_EXIT
    refusal = error_line(capsys.readouterr().err)
    assert refusal.startswith(
        f"run '{run_id}' of tenant '{TENANT}' was submitted before (record {NAMESPACE}/"
        f"{name_of(run_id)}: submitted, first on "
    ), refusal
    reason = "the envelope was lost before anyone collected it"
    assert cli(*submit_args(kubeconfig, pods, "--rerun", reason, run_id=run_id)) == 0
    assert job_exists(real_cluster, name_of(run_id))
    records = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name_of(run_id)}"
    history = json.loads(real_cluster.json("GET", records)["data"]["record.json"])["history"]
    assert [(event["event"], event.get("detail")) for event in history][-1] == ("rerun", reason)


def test_watches_cut_by_an_api_server_restart_reconnect_and_the_run_is_collected(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API server restarts while the wait watches: the three streams drop, the wait retries
    (through the moments when the new server refuses with 403 before its RBAC caches are
    filled), lists again and collects the run."""
    run_id = "real-restarted"
    output = pods.for_run(run_id)
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    release = threading.Event()
    with Replays(real_cluster, name_of(run_id), tmp_path, log=output.log, hold=release):
        assert cli(*submit_args(kubeconfig, pods, run_id=run_id)) == 0
        wait_until(
            real_cluster,
            "the replay pod to run",
            lambda: (
                [p["status"].get("phase") for p in run_pods(real_cluster, name_of(run_id))]
                == ["Running"]
            ),
        )

        def restart_then_release() -> None:
            wait_until(
                real_cluster,
                "collect to watch events",
                lambda: real_cluster.open_watches("events") > 0,
            )
            real_cluster.restart_apiserver()
            time.sleep(3)
            release.set()

        restarter = threading.Thread(target=restart_then_release)
        restarter.start()
        code = cli(
            "collect",
            "--kubeconfig",
            str(kubeconfig),
            "--tenant",
            TENANT,
            run_id,
            "--wait",
            *WAIT,
            "--expected",
            str(output.expected),
        )
        restarter.join()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert last_json(captured.out)["verified"] is True
    logged = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    retried = {entry["kind"] for entry in logged if entry["event"] == "k8s_watch_retry"}
    assert retried == {"job", "pod", "event"}, captured.err


def test_an_event_watch_expired_by_an_etcd_compaction_is_listed_again(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Events have no watch cache (kube-apiserver DefaultWatchCacheSizes): after etcd compacts,
    the wait's next event watch from the version it holds is answered 410 Expired
    ("The resourceVersion for the provided watch is too old."), and it lists again."""
    run_id = "real-compacted"
    output = pods.for_run(run_id)
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    release = threading.Event()
    with Replays(real_cluster, name_of(run_id), tmp_path, log=output.log, hold=release):
        assert cli(*submit_args(kubeconfig, pods, run_id=run_id)) == 0

        def compact_then_release() -> None:
            wait_until(
                real_cluster,
                "collect to watch events",
                lambda: real_cluster.open_watches("events") > 0,
            )
            for _ in range(3):
                time.sleep(1.5)  # the wait's one-second watches end and start again
                real_cluster.compact_etcd()
            time.sleep(1.5)
            release.set()

        compactor = threading.Thread(target=compact_then_release)
        compactor.start()
        code = cli(
            "collect",
            "--kubeconfig",
            str(kubeconfig),
            "--watch-timeout",
            "1",
            "--tenant",
            TENANT,
            run_id,
            "--wait",
            *WAIT,
            "--expected",
            str(output.expected),
        )
        compactor.join()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert last_json(captured.out)["verified"] is True
    logged = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    expired = [entry["kind"] for entry in logged if entry["event"] == "k8s_watch_expired"]
    assert "event" in expired, captured.err


def test_an_indexed_job_reports_each_index_from_the_real_controller(
    real_cluster: ControlPlane, pods: Pods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = "real-shards"
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    with Replays(real_cluster, name_of(run_id), tmp_path, log="replaying\n"):
        assert cli(*submit_args(kubeconfig, pods, "--shards", "3", run_id=run_id)) == 0
        wait_until(
            real_cluster,
            "the Indexed Job to complete",
            lambda: (
                real_cluster.json(
                    "GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name_of(run_id)}"
                )["status"].get("completedIndexes")
                == "0-2"
            ),
        )
    capsys.readouterr()
    assert cli("status", "--kubeconfig", str(kubeconfig), "--tenant", TENANT, run_id) == 0
    status = last_json(capsys.readouterr().out)
    assert status["phase"] == "succeeded"
    assert status["shards"] == [
        {"index": index, "state": "succeeded", "failures": 0} for index in range(3)
    ]
    indexes = sorted(
        int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
        for pod in run_pods(real_cluster, name_of(run_id))
    )
    assert indexes == [0, 1, 2]


def _mount_missing_volume(job: dict[str, Any]) -> None:
    mounts = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    mounts.append({"name": "missing", "mountPath": "/missing"})


def _long_label_value(job: dict[str, Any]) -> None:
    job["spec"]["template"]["metadata"]["labels"]["example.com/long"] = "a" * 80


def _limit_below_request(job: dict[str, Any]) -> None:
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1Gi"


def _restart_always(job: dict[str, Any]) -> None:
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"


def _unordered_exit_codes(job: dict[str, Any]) -> None:
    job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] = [9, 1]


def _huge_annotation(job: dict[str, Any]) -> None:
    job["metadata"]["annotations"]["example.com/big"] = "a" * 300 * 1024


def _missing_service_account(job: dict[str, Any]) -> None:
    job["spec"]["template"]["spec"]["serviceAccountName"] = "missing-account"


DIVERGENCES = {
    "mount-of-a-missing-volume": _mount_missing_volume,
    "80-character-label-value": _long_label_value,
    "limit-below-request": _limit_below_request,
    "restart-policy-always": _restart_always,
    "unordered-exit-codes": _unordered_exit_codes,
    "300-kib-annotation": _huge_annotation,
    "missing-service-account": _missing_service_account,
}


def _failed_create(plane: ControlPlane, job: str) -> str:
    """The message of the Job controller's FailedCreate event on ``job``."""
    selector = f"involvedObject.kind%3DJob,involvedObject.name%3D{job},reason%3DFailedCreate"
    path = f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector={selector}"
    messages: list[str] = []

    def found() -> bool:
        messages[:] = [str(event["message"]) for event in plane.json("GET", path)["items"]]
        return bool(messages)

    wait_until(plane, f"FailedCreate on Job {job}", found)
    return messages[0]


@pytest.mark.parametrize("case", DIVERGENCES)
def test_the_emulated_server_refuses_what_the_real_one_refuses(
    real_cluster: ControlPlane,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    """Each spec the emulation once accepted: the real server's answer (422 with its field
    path and message, or for a missing ServiceAccount 201 and a pod refused at admission) and
    the emulation's are the same."""
    job = dry_run_job(pods, tmp_path, RUN_ID, capsys)
    DIVERGENCES[case](job)
    job["metadata"]["name"] = f"diverge-{case}"
    real = real_cluster.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job)
    emulated_cluster = FakeCluster()
    emulated = emulated_cluster.create("jobs", NAMESPACE, job, "Strict")
    assert emulated.code == real.status_code
    if real.status_code == 422:
        assert emulated.body["message"] == real.json()["message"]
        assert emulated.body["reason"] == real.json()["reason"] == "Invalid"
        return
    assert real.status_code == 201, real.text
    with pytest.raises(PodRefusedError):
        emulated_cluster.start_pod(job["metadata"]["name"])
    (event,) = [e for e in emulated_cluster.events.values() if e["reason"] == "FailedCreate"]
    assert event["message"] == _failed_create(real_cluster, job["metadata"]["name"])
    assert event["message"] == (
        f'Error creating: pods "diverge-{case}-" is forbidden: error looking up service account '
        'attested-replay/missing-account: serviceaccount "missing-account" not found'
    )


@pytest.mark.parametrize(
    ("exit_code", "extra", "reason", "message"),
    [
        # exit 2 (checksum) is deterministic: the Job's podFailurePolicy fails the Job at once
        (2, (), "PodFailurePolicy", "failed with exit code 2 matching FailJob rule at index 0"),
        # exit 6 (publication unreachable) is counted against the backoff limit
        (6, ("--backoff-limit", "0"), "BackoffLimitExceeded", "Job has reached the specified"),
    ],
    ids=["pod-failure-policy", "backoff-limit"],
)
def test_a_failing_replay_ends_with_the_job_controllers_reason(  # noqa: PLR0917 - fixtures
    real_cluster: ControlPlane,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    exit_code: int,
    extra: tuple[str, ...],
    reason: str,
    message: str,
) -> None:
    run_id = f"real-exit-{exit_code}"
    kubeconfig = operator_kubeconfig(real_cluster, tmp_path)
    with Replays(
        real_cluster, name_of(run_id), tmp_path, log="replaying\n", exit_code=exit_code
    ) as replays:
        code = cli(
            *submit_args(kubeconfig, pods, *extra, run_id=run_id),
            "--wait",
            *WAIT,
            "--expected",
            str(pods.for_run(run_id).expected),
        )
    error = error_line(capsys.readouterr().err)
    assert code == SUBMIT_EXIT, error
    (pod,) = replays.finished
    assert error.startswith(f"Job {name_of(run_id)}: failed ({reason}): "), error
    if reason == "PodFailurePolicy":
        assert f"Container replay for pod {NAMESPACE}/{pod} {message}" in error
    else:
        assert f"{message} backoff limit" in error
