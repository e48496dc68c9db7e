"""Operator scenarios through the CLI, on the official client, against the loopback API server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from attestation.contracts import sha256_digest
from attestation.tenant.http import RetryPolicy
from runner.k8s import retry
from runner.k8s.errors import ApiUnavailableError
from runner.k8s.job import ANNOTATION_SPEC_DIGEST, ReplaySpec, build_job
from runner.pod_output import frame_envelope
from tests.k8s.apiserver import Fault
from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import (
    IMAGE,
    RUN_ID,
    TENANT,
    Pods,
    cli,
    error_line,
    last_json,
    name_of,
    submit_args,
    succeed,
)

SUBMIT_EXIT = 5
VERIFY_EXIT = 4


def wait_args(pods: Pods, *extra: str) -> list[str]:
    return ["--wait", "--timeout", "30", "--expected", str(pods.base.expected), *extra]


def test_happy_path_submits_waits_collects_and_verifies(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster.on_job_created = succeed(pods)
    out = tmp_path / "envelope.json"
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods, "--out", str(out)))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    first = json.loads(captured.out.splitlines()[0])
    assert first["job"] == name_of()
    assert first["attached"] is False
    summary = last_json(captured.out)
    assert summary["verified"] is True
    assert summary["source"] == "pod-log"
    # a CoCo node: the host never saw the pod's termination message, and nothing is missing
    assert summary["terminationMessage"] == "absent"
    assert summary["runId"] == RUN_ID
    assert out.read_bytes() == pods.base.envelope
    assert cluster.created[name_of()] == 1
    job = cluster.jobs[("attested-replay", name_of())]
    assert job["spec"]["template"]["spec"]["runtimeClassName"] == "kata-qemu-coco-dev"


def test_resubmitting_the_same_spec_attaches_to_the_existing_job(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    cluster.on_job_created = succeed(pods)  # never called again: the Job exists
    first_job = cluster.jobs[("attested-replay", name_of())]

    def finish_later() -> None:
        cluster.wait_until(lambda: cluster.requests["WATCH jobs"] >= 1)
        succeed(pods)(cluster, first_job)

    finisher = threading.Thread(target=finish_later)
    finisher.start()
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    finisher.join()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    submissions = [json.loads(line) for line in captured.out.splitlines() if '"attached"' in line]
    assert [s["attached"] for s in submissions] == [False, True]
    assert submissions[0]["specDigest"] == submissions[1]["specDigest"]
    assert cluster.created[name_of()] == 1
    assert len(cluster.jobs) == 1


def test_resubmitting_a_different_spec_is_refused(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    existing = cluster.jobs[("attested-replay", name_of())]["metadata"]["annotations"][
        ANNOTATION_SPEC_DIGEST
    ]
    code = cli(*submit_args(kubeconfig, pods, "--cpu", "4"))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    message = error_line(captured.err)
    assert f"run '{RUN_ID}' of tenant '{TENANT}' already exists as Job {name_of()}" in message
    assert f"existing {existing}" in message
    assert "use a new run ID" in message
    assert cluster.created[name_of()] == 1
    job = cluster.jobs[("attested-replay", name_of())]
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "2"


def test_watch_410_relists_and_still_sees_completion(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        c.wait_until(lambda: c.requests["WATCH jobs"] >= 1 and c.requests["WATCH pods"] >= 1)
        c.expire_watches()  # open watches get 410 Expired
        succeed(pods)(c, job)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert last_json(captured.out)["verified"] is True
    assert cluster.requests["LIST jobs"] >= 2, (
        cluster.requests,
        captured.err,
    )  # list, re-list after 410
    assert cluster.created[name_of()] == 1


def test_api_5xx_and_dropped_connections_are_retried(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.faults = [
        # The create reaches the server, but the answer is lost: the retry meets 409 and
        # attaches by spec digest instead of starting a second run.
        Fault("POST", r"/jobs$", "commit-then-500"),
        Fault("POST", r"/jobs$", "drop"),
        Fault("GET", r"/jobs$", 503, times=2),
        Fault("GET", r"/pods$", "drop", times=2),
        Fault("GET", r"/jobs/[^/]+$", 500),
        Fault("GET", r"/log$", 502),
    ]
    cluster.on_job_created = succeed(pods)
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out.splitlines()[0])["attached"] is True
    assert last_json(captured.out)["verified"] is True
    assert all(fault.hits == fault.times for fault in cluster.faults), cluster.faults
    assert cluster.created[name_of()] == 1
    assert '"k8s_api_retry"' in captured.err


def test_api_that_keeps_failing_ends_with_a_clear_error(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.faults = [Fault("POST", r"/jobs$", 503, times=100)]
    code = cli(*submit_args(kubeconfig, pods))
    assert code == SUBMIT_EXIT
    message = error_line(capsys.readouterr().err)
    assert message.startswith(
        "Kubernetes API call create job failed after 6 attempts; last error: HTTP 503"
    )
    assert cluster.created[name_of()] == 0


def test_one_attempt_is_one_attempt() -> None:
    def unavailable() -> None:
        raise ApiException(status=503, reason="Service Unavailable")

    with pytest.raises(ApiUnavailableError) as caught:
        retry.call(RetryPolicy(attempts=1), "list jobs", unavailable)
    assert str(caught.value).startswith("Kubernetes API call list jobs failed after 1 attempt;")


def _exit_codes(*codes: int) -> Callable[[FakeCluster, dict[str, Any]], None]:
    """The controller's pods fail with these exit codes, one pod after the other."""

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        pod: str | None = c.start_pod(job["metadata"]["name"])
        for code in codes:
            assert pod is not None
            c.running(pod)
            pod = c.fail(pod, exit_code=code)

    return script


def _deadline(c: FakeCluster, job: dict[str, Any]) -> None:
    c.running(c.start_pod(job["metadata"]["name"]))
    c.deadline_exceeded(job["metadata"]["name"])


@pytest.mark.parametrize(
    ("script", "reason", "message"),
    [
        (_deadline, "DeadlineExceeded", "Job was active longer than specified deadline"),
        # publication unreachable (6) is retried: 3 pods with backoffLimit 2
        (
            _exit_codes(6, 6, 6),
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ),
        (
            _exit_codes(2),
            "PodFailurePolicy",
            (
                f"Container replay for pod attested-replay/{name_of()}-bbbbb failed with exit "
                "code 2 matching FailJob rule at index 0"
            ),
        ),
    ],
    ids=["deadline", "backoff", "pod-failure-policy"],
)
def test_failed_jobs_end_with_their_reason(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    script: Callable[[FakeCluster, dict[str, Any]], None],
    reason: str,
    message: str,
) -> None:
    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err).startswith(f"Job {name_of()}: failed ({reason}): {message}")


def test_job_deleted_during_the_watch(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        c.start_pod(job["metadata"]["name"])
        c.wait_until(lambda: c.requests["WATCH jobs"] >= 1)
        c.delete_job("attested-replay", job["metadata"]["name"], "Background")

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err) == (
        f"Job {name_of()}: deleted (JobDeleted): the Job was deleted while waiting"
    )
    assert cluster.jobs == {}
    assert cluster.pods == {}


def test_wait_times_out_with_a_clear_error(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli(
        *submit_args(kubeconfig, pods),
        "--wait",
        "--timeout",
        "0.2",  # nothing ever finishes the Job: any timeout is reached
        "--expected",
        str(pods.base.expected),
    )
    assert code == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"Job {name_of()}: timeout (Timeout): not finished after 0.2 s"
    )


@pytest.mark.parametrize("termination_message", [False, True], ids=["coco", "kata-3.29"])
def test_another_runs_envelope_in_the_log_is_rejected(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    termination_message: bool,
) -> None:
    other = pods.for_run("run-other").envelope

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        pod = c.start_pod(job["metadata"]["name"])
        log = f"{frame_envelope(other)}\n"
        message = pods.base.termination_message if termination_message else None
        c.succeed(pod, log=log, termination_message=message)

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err) == (
        f"Job {name_of()}: envelope runId is 'run-other', expected '{RUN_ID}'"
    )


def test_a_termination_message_that_disagrees_is_refused(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the host does see the message (kata >= 3.29), it must describe the envelope."""
    message = json.loads(pods.base.termination_message)
    message["envelope"] = "sha256:" + "0" * 64

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        pod = c.start_pod(job["metadata"]["name"])
        c.succeed(pod, log=pods.base.log, termination_message=json.dumps(message))

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert error_line(captured.err) == (
        f"Job {name_of()}: pod {name_of()}-bbbbb's termination message reports envelope digest "
        f"{message['envelope']}, the collected envelope has {sha256_digest(pods.base.envelope)}"
    )


def test_envelope_that_fails_the_tenant_verifier_exits_4(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster.on_job_created = succeed(pods)
    expected = json.loads(pods.base.expected.read_text())
    expected["workloadDigest"] = "sha256:" + "0" * 64
    wrong = tmp_path / "expected.json"
    wrong.write_text(json.dumps(expected))
    code = cli(
        *submit_args(kubeconfig, pods), "--wait", "--timeout", "30", "--expected", str(wrong)
    )
    captured = capsys.readouterr()
    assert code == VERIFY_EXIT
    assert error_line(captured.err).startswith("envelope rejected")


def test_status_list_collect_and_cancel(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    common = ["--kubeconfig", str(kubeconfig)]
    assert cli("status", RUN_ID, "--tenant", TENANT, *common) == 0
    job = cluster.jobs[("attested-replay", name_of())]
    assert last_json(capsys.readouterr().out) == {
        "job": name_of(),
        "runId": RUN_ID,
        "tenant": TENANT,
        "phase": "pending",
        "reason": "",
        "message": "",
        "created": job["metadata"]["creationTimestamp"],
    }
    assert (
        cli("collect", RUN_ID, "--tenant", TENANT, "--expected", str(pods.base.expected), *common)
        == 5
    )
    assert "has not completed: still running" in error_line(capsys.readouterr().err)
    succeed(pods)(cluster, job)
    out = tmp_path / "collected.json"
    assert (
        cli(
            "collect",
            RUN_ID,
            "--tenant",
            TENANT,
            "--expected",
            str(pods.base.expected),
            "--out",
            str(out),
            *common,
        )
        == 0
    )
    assert out.read_bytes() == pods.base.envelope
    capsys.readouterr()
    assert cli("list", *common) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["runId"], r["phase"], r["reason"]) for r in listed] == [
        (RUN_ID, "succeeded", "Complete")
    ]
    assert cli("cancel", RUN_ID, "--tenant", TENANT, *common) == 0
    assert cluster.jobs == {}
    assert cluster.pods == {}
    assert cli("cancel", RUN_ID, "--tenant", TENANT, *common) == 5
    assert error_line(capsys.readouterr().err) == f"no Job {name_of()} in namespace attested-replay"
    # the run record outlives the Job: status says what became of it (tests/k8s/test_gone.py)
    assert cli("status", RUN_ID, "--tenant", TENANT, *common) == 0
    gone = last_json(capsys.readouterr().out)
    assert (gone["phase"], gone["reason"]) == ("gone", "Cancelled")


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--cpu", "1.5", "--cpu '1.5': give a whole number of vCPUs"),
        ("--cpu", "500m", "--cpu '500m': give a whole number of vCPUs"),
        (
            "--image",
            "registry.example/attested-replay:latest",
            "must be pinned by digest with its registry",
        ),
        ("--checksum", "sha256:abc", "--checksum 'sha256:abc': must be 'sha256:' followed by 64"),
        ("--corpus", "/data/corpus", "give an https:// URL, or a path with --corpus-claim"),
        ("--run-id", "bad/run", "run ID 'bad/run': must be 1 to 128 letters, digits"),
    ],
)
def test_bad_submissions_are_usage_errors_before_any_request(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    fragment: str,
) -> None:
    args = submit_args(kubeconfig, pods)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    assert cli(*args) == 9
    assert fragment in error_line(capsys.readouterr().err)
    assert cluster.requests["total"] == 0


def test_wait_without_expected_values_is_refused(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*submit_args(kubeconfig, pods), "--wait") == 9
    assert "give --expected" in error_line(capsys.readouterr().err)
    assert cluster.requests["total"] == 0


@pytest.mark.parametrize(
    ("content", "code", "fragment"),
    [
        (None, 9, "expected.json: no such file"),
        (b'{"runId": 1}', 1, "expected-values file is invalid"),
    ],
    ids=["missing", "malformed"],
)
def test_expected_values_are_read_before_anything_is_submitted(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes | None,
    code: int,
    fragment: str,
) -> None:
    expected = tmp_path / "expected.json"
    if content is not None:
        expected.write_bytes(content)
    args = ["--wait", "--timeout", "30", "--expected", str(expected)]
    assert cli(*submit_args(kubeconfig, pods), *args) == code
    assert fragment in error_line(capsys.readouterr().err)
    assert cluster.requests["total"] == 0


def test_namespace_comes_from_the_kubeconfig_context(
    apiserver: Any, cluster: FakeCluster, pods: Pods, tmp_path: Path
) -> None:
    kubeconfig = apiserver.kubeconfig(tmp_path / "kc", namespace="replays-a")
    cluster.namespaces.add("replays-a")
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert ("replays-a", name_of()) in cluster.jobs


def test_kubeconfig_from_environment(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    args = submit_args(kubeconfig, pods)
    del args[1:3]  # no --kubeconfig
    assert cli(*args) == 0
    assert cluster.created[name_of()] == 1


def test_no_cluster_configuration_is_a_usage_error(
    pods: Pods, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    args = submit_args(tmp_path / "unused", pods)
    del args[1:3]
    assert cli(*args) == 9
    assert "no Kubernetes configuration" in error_line(capsys.readouterr().err)


def test_image_reference_is_exactly_the_submitted_digest(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    container = cluster.jobs[("attested-replay", name_of())]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["image"] == IMAGE
    assert container["imagePullPolicy"] == "Always"


def test_missing_runtime_class_is_refused_before_creating_the_job(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.runtime_classes = {"kata-qemu-snp"}
    assert cli(*submit_args(kubeconfig, pods)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err).startswith(
        "runtime class 'kata-qemu-coco-dev' is not installed in the cluster"
    )
    assert cluster.requests["POST jobs"] == 0


def test_runtime_class_check_is_skipped_without_permission(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.runtime_classes = None
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert '"k8s_runtime_class_unchecked"' in capsys.readouterr().err
    assert cluster.created[name_of()] == 1


def test_every_create_asks_for_strict_field_validation(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert cluster.field_validation == [("POST configmaps", "Strict"), ("POST jobs", "Strict")]


def test_a_field_the_cluster_does_not_know_is_refused_not_dropped(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Job field newer than the cluster (here 1.34's ``hostnameOverride`` on a 1.33 server)
    would be dropped with a mere warning by default, and a different Job than the one whose
    spec digest was computed would run. With Strict the server refuses it."""
    from runner.k8s import submit

    def newer(spec: ReplaySpec) -> dict[str, Any]:
        job = build_job(spec)
        job["spec"]["template"]["spec"]["hostnameOverride"] = "replay"
        return job

    monkeypatch.setattr(submit, "build_job", newer)
    assert cli(*submit_args(kubeconfig, pods)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f'creating Job {name_of()} was refused: HTTP 400: Job in version "v1" cannot be handled '
        'as a Job: strict decoding error: unknown field "spec.template.spec.hostnameOverride"'
    )
    assert cluster.jobs == {}


def test_a_namespace_that_does_not_exist_is_named(
    apiserver: Any,
    cluster: FakeCluster,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = apiserver.kubeconfig(tmp_path / "kc", namespace="replays-b")
    assert cli(*submit_args(kubeconfig, pods)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f'creating Job {name_of()} was refused: HTTP 404: namespaces "replays-b" not found'
    )


def test_parameters_are_checked_before_looking_for_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No kubeconfig anywhere: a bad checksum is still what the user hears about first."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    argv = [
        *("submit", "--run-id", "run-1", "--tenant", "acme", "--overlay", "snp"),
        *("--image", "registry.example/attested-replay@sha256:" + "1" * 64),
        *("--corpus", "https://corpora.example/c.tar.gz", "--checksum", "sha256:00"),
    ]
    assert cli(*argv) == 9
    assert error_line(capsys.readouterr().err) == (
        "--checksum 'sha256:00': must be 'sha256:' followed by 64 lowercase hex digits"
    )


def test_a_missing_kubeconfig_file_is_named_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    assert cli("list") == 9
    assert error_line(capsys.readouterr().err) == f"$KUBECONFIG {missing}: no such file"
    assert cli("list", "--kubeconfig", str(missing)) == 9
    assert error_line(capsys.readouterr().err) == f"--kubeconfig {missing}: no such file"


def test_a_refusal_after_an_allowed_list_is_retried_but_not_for_ever(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    """A restarting kube-apiserver answers 403 until its RBAC caches fill (measured in
    tests/k8s/test_real_cluster.py): after a list that was allowed, the wait retries a 403
    within its retry budget; a refusal that lasts still ends the wait."""

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        c.wait_until(lambda: c.requests["WATCH pods"] >= 1)
        c.faults = [Fault("GET", r"/pods$", 403, times=1000)]
        c.start_pod(job["metadata"]["name"])

    cluster.on_job_created = script
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    retries = [line for line in captured.err.splitlines() if '"k8s_watch_retry"' in line]
    assert len(retries) == 5, captured.err  # six attempts: the retry budget
    assert error_line(captured.err) == (
        f"Job {name_of()}: timeout (WatchFailed): 6 consecutive failures; last: HTTP 403: injected fault"
    )


def test_a_refusal_of_the_first_list_ends_the_wait_at_once(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.faults = [Fault("GET", r"/pods$", 403, times=1000)]
    code = cli(*submit_args(kubeconfig, pods), *wait_args(pods))
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    assert '"k8s_watch_retry"' not in captured.err
    assert error_line(captured.err).startswith(f"Job {name_of()}: timeout (WatchFailed): HTTP 403")
