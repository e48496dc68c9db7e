"""One TEE per run ID, durably: the run record outlives the Job, through the CLI.

The Job alone cannot keep a run ID from running twice: its TTL deletes it after it finished,
``cancel`` deletes it, and a Job of the same name in another namespace does not conflict. The
record (a ConfigMap per run ID in one records namespace) does, and a deliberate rerun is
written into it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.k8s import submit
from runner.k8s.job import ReplaySpec, build_job
from tests.k8s.apiserver import Fault
from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import RUN_ID, TENANT, Pods, cli, error_line, name_of, submit_args, succeed

NS = "attested-replay"
SUBMIT_EXIT = 5


def record(cluster: FakeCluster) -> dict[str, Any]:
    config_map = cluster.configmaps[(NS, name_of())]
    document: dict[str, Any] = json.loads(config_map["data"]["record.json"])
    return document


def refusal_prefix(namespace_note: str = "") -> str:
    return (
        f"run '{RUN_ID}' of tenant '{TENANT}' was submitted before{namespace_note} "
        f"(record {NS}/{name_of()}: "
    )


def test_a_run_id_reused_after_its_job_expired_is_refused_unless_rerun(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.on_job_created = succeed(pods)
    wait = ["--wait", "--timeout", "30", "--expected", str(pods.base.expected)]
    assert cli(*submit_args(kubeconfig, pods), *wait) == 0
    first = record(cluster)
    assert (first["state"], first["runId"], first["tenant"], first["jobNamespace"]) == (
        "submitted",
        RUN_ID,
        TENANT,
        NS,
    )
    cluster.expire(name_of())  # ttlSecondsAfterFinished: the Job and its pods are gone
    capsys.readouterr()

    assert cli(*submit_args(kubeconfig, pods)) == SUBMIT_EXIT
    message = error_line(capsys.readouterr().err)
    assert message.startswith(refusal_prefix() + "submitted, first on ")
    assert message.endswith(
        f"spec {first['specDigest']}) and no Job of it exists here now (expired after its TTL, "
        "cancelled, stopped, or in another namespace): a run ID names one replay. Use a new run "
        "ID, or pass --rerun REASON to run it again (recorded)"
    )
    assert cluster.created[name_of()] == 1

    reason = "the envelope was lost before anyone collected it"
    assert cli(*submit_args(kubeconfig, pods), "--rerun", reason) == 0
    assert cluster.created[name_of()] == 2
    again = record(cluster)
    assert [event["event"] for event in again["history"]] == ["submitted", "rerun"]
    assert again["history"][1]["detail"] == reason
    assert again["submission"] != first["submission"]


def test_a_cancelled_run_stays_cancelled(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert cli("cancel", RUN_ID, "--tenant", TENANT, "--kubeconfig", str(kubeconfig)) == 0
    assert record(cluster)["state"] == "cancelled"
    capsys.readouterr()
    assert cli(*submit_args(kubeconfig, pods)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err).startswith(refusal_prefix() + "cancelled, ")
    assert cluster.created[name_of()] == 1


def test_the_same_run_in_another_namespace_is_refused(  # noqa: PLR0917 - fixtures
    apiserver: Any,
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    cluster.namespaces.add("replays-a")
    elsewhere = apiserver.kubeconfig(tmp_path / "kc", namespace="replays-a")
    capsys.readouterr()
    assert cli(*submit_args(elsewhere, pods)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err).startswith(
        refusal_prefix(f" in namespace {NS}") + "submitted, "
    )
    assert ("replays-a", name_of()) not in cluster.jobs


def test_a_claim_whose_job_the_server_refused_can_be_claimed_again(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, monkeypatch: pytest.MonkeyPatch
) -> None:
    def newer(spec: ReplaySpec) -> dict[str, Any]:
        job = build_job(spec)
        job["spec"]["template"]["spec"]["hostnameOverride"] = "replay"
        return job

    monkeypatch.setattr(submit, "build_job", newer)
    assert cli(*submit_args(kubeconfig, pods)) == SUBMIT_EXIT
    assert record(cluster)["state"] == "refused"  # no Job, so no TEE, ever existed
    monkeypatch.undo()
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert cluster.created[name_of()] == 1
    assert [event["event"] for event in record(cluster)["history"]] == [
        "submitted",
        "refused",
        "submitted",
    ]


def test_a_lost_answer_to_the_claim_is_recognised_as_ours(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods
) -> None:
    cluster.faults = [Fault("POST", r"/configmaps$", "commit-then-500")]
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert cluster.faults[0].hits == 1
    assert cluster.created[name_of()] == 1


def test_records_live_in_one_namespace_that_must_exist(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*submit_args(kubeconfig, pods), "--records-namespace", "records-x") == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        "records namespace 'records-x' does not exist: apply k8s/base (it creates it) or pass "
        "--records-namespace"
    )
    assert cluster.jobs == {}


def test_every_record_write_is_strict(cluster: FakeCluster, kubeconfig: Path, pods: Pods) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert cli("cancel", RUN_ID, "--tenant", TENANT, "--kubeconfig", str(kubeconfig)) == 0
    assert cluster.field_validation == [
        ("POST configmaps", "Strict"),
        ("POST jobs", "Strict"),
        ("PUT configmap", "Strict"),
    ]
