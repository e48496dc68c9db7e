"""status and collect of a run whose Job is gone: the run record says what is known.

The TTL controller deletes a finished Job with its pods and their logs, ``cancel`` and a
stopped wait delete it, and a run may live in another namespace. ``status`` then prints what
the record says (phase ``gone``, why, when, who; exit 0); ``collect`` fails naming what is
missing and, when a publication URL is known, where the envelope is (exit 5). A run ID nobody
submitted is still "not found", with both places looked in named.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from runner.k8s import submit
from runner.k8s.job import ReplaySpec, build_job
from tests.k8s.apiserver import ApiServer
from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import (
    RUN_ID,
    TENANT,
    Pods,
    cli,
    error_line,
    last_json,
    name_of,
    publishing_args,
    submit_args,
    succeed,
    unpublished_service,
)

NS = "attested-replay"
SUBMIT_EXIT = 5
PUBLISH_URL = "https://publish.example"


def record(cluster: FakeCluster) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        cluster.configmaps[(NS, name_of())]["data"]["record.json"]
    )
    return document


def status(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``status``'s exit code and JSON line ({} when none); its stderr stays captured."""
    capsys.readouterr()
    code = cli("status", RUN_ID, "--tenant", TENANT, "--kubeconfig", str(kubeconfig))
    captured = capsys.readouterr()
    print(captured.err, file=sys.stderr, end="")
    return code, (last_json(captured.out) if captured.out.strip() else {})


def collect(kubeconfig: Path, pods: Pods, *extra: str) -> int:
    return cli(
        "collect",
        RUN_ID,
        "--tenant",
        TENANT,
        "--kubeconfig",
        str(kubeconfig),
        "--watch-timeout",
        "2",
        "--expected",
        str(pods.base.expected),
        *extra,
    )


def ttl_gone(record_: dict[str, Any]) -> str:
    first = record_["history"][-1]
    return (
        f"its Job {NS}/{name_of()}, submitted at {first['at']} by {first['by']}, is gone: removed "
        "by its TTL (ttlSecondsAfterFinished) after it finished, or deleted outside attested-replay"
    )


PODS_GONE = (
    "; its pods went with it, and with them the pod log and termination message that collect reads"
)


def test_status_of_a_run_whose_job_expired_says_what_the_record_knows(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.on_job_created = succeed(pods)
    wait = ["--wait", "--timeout", "30", "--expected", str(pods.base.expected)]
    assert cli(*submit_args(kubeconfig, pods), *wait) == 0
    cluster.expire(name_of())

    code, line = status(kubeconfig, capsys)
    assert code == 0
    stored = record(cluster)
    assert line == {
        "job": name_of(),
        "runId": RUN_ID,
        "tenant": TENANT,
        "phase": "gone",
        "reason": "JobGone",
        "message": ttl_gone(stored),
        "created": stored["history"][0]["at"],
        "record": {"namespace": NS, **stored},
    }
    assert stored["state"] == "submitted"
    assert [event["event"] for event in stored["history"]] == ["submitted"]


def test_collect_after_the_ttl_names_what_is_missing(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.on_job_created = succeed(pods)
    assert cli(*submit_args(kubeconfig, pods)) == 0
    cluster.expire(name_of())
    capsys.readouterr()

    assert collect(kubeconfig, pods) == SUBMIT_EXIT
    expected = (
        f"run '{RUN_ID}' of tenant '{TENANT}': {ttl_gone(record(cluster))}{PODS_GONE}; no "
        "publication URL is recorded for the run (submitted without --publish-url), so no copy "
        "of its envelope is within reach: run it again with submit --rerun REASON"
    )
    assert error_line(capsys.readouterr().err) == expected
    # --wait meets no Job either: the same answer, not a bare "the Job does not exist"
    assert collect(kubeconfig, pods, "--wait", "--timeout", "30") == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == expected
    assert cluster.requests["GET log"] == 0


def test_collect_after_the_ttl_says_where_the_published_envelope_is(  # noqa: PLR0917
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster.on_job_created = succeed(pods)
    url = unpublished_service(httpserver)
    assert cli(*submit_args(kubeconfig, pods), *publishing_args(url, token_file)) == 0
    assert record(cluster)["publishUrl"] == url
    cluster.expire(name_of())
    capsys.readouterr()

    assert collect(kubeconfig, pods) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"run '{RUN_ID}' of tenant '{TENANT}': {ttl_gone(record(cluster))}{PODS_GONE}; the run "
        f"published its envelope to {url}: it is at {url}/v1/tenants/{TENANT}/runs/{RUN_ID} "
        f"(attested-replay tenant fetch --server {url} --tenant {TENANT} fetches and verifies it)"
    )


def test_a_cancelled_run(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    assert cli("cancel", RUN_ID, "--tenant", TENANT, "--kubeconfig", str(kubeconfig)) == 0
    cancelled = record(cluster)["history"][-1]
    assert cancelled["event"] == "cancelled"
    message = f"its Job {NS}/{name_of()} was cancelled at {cancelled['at']} by {cancelled['by']}"

    code, line = status(kubeconfig, capsys)
    assert code == 0
    assert (line["phase"], line["reason"], line["message"]) == ("gone", "Cancelled", message)

    assert collect(kubeconfig, pods, "--publish-url", PUBLISH_URL) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err).startswith(
        f"run '{RUN_ID}' of tenant '{TENANT}': {message}{PODS_GONE}; the run published its "
        f"envelope to {PUBLISH_URL}: it is at {PUBLISH_URL}/v1/tenants/{TENANT}/runs/{RUN_ID} "
    )


def test_a_run_whose_job_the_server_refused(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def newer(spec: ReplaySpec) -> dict[str, Any]:
        job = build_job(spec)
        job["spec"]["template"]["spec"]["hostnameOverride"] = "replay"
        return job

    monkeypatch.setattr(submit, "build_job", newer)
    assert cli(*submit_args(kubeconfig, pods)) == SUBMIT_EXIT
    refused = record(cluster)["history"][-1]
    assert refused["event"] == "refused"
    message = (
        f"no Job {NS}/{name_of()} was ever created: the API server refused it at "
        f"{refused['at']} by {refused['by']}: {refused['detail']}"
    )
    assert refused["detail"].startswith(f"creating Job {name_of()} was refused: ")

    code, line = status(kubeconfig, capsys)
    assert code == 0
    assert (line["phase"], line["reason"], line["message"]) == ("gone", "NeverCreated", message)
    assert collect(kubeconfig, pods) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"run '{RUN_ID}' of tenant '{TENANT}': {message}; it never ran to the end, so there is "
        "no envelope to collect"
    )


def test_a_run_submitted_to_another_namespace(  # noqa: PLR0917 - fixtures
    apiserver: ApiServer,
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(*submit_args(kubeconfig, pods)) == 0
    submitted = record(cluster)["history"][-1]
    cluster.namespaces.add("replays-a")
    elsewhere = apiserver.kubeconfig(tmp_path / "kc", namespace="replays-a")

    code, line = status(elsewhere, capsys)
    assert code == 0
    assert (line["phase"], line["reason"]) == ("gone", "InOtherNamespace")
    assert line["message"] == (
        f"its Job was submitted to namespace {NS}, not replays-a (record: submitted, at "
        f"{submitted['at']} by {submitted['by']}): pass --namespace {NS}"
    )


def test_a_run_id_never_submitted_is_not_found_in_both_places(
    cluster: FakeCluster, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = status(kubeconfig, capsys)
    assert (code, line) == (SUBMIT_EXIT, {})
    not_found = (
        f"no Job {name_of()} in namespace {NS}, and no run record {NS}/{name_of()}: the run "
        "was never submitted (or its record is in another --records-namespace)"
    )
    assert error_line(capsys.readouterr().err) == not_found
    assert cluster.configmaps == {}


def test_a_run_stopped_because_it_could_not_run(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        c.waiting(c.start_pod(job["metadata"]["name"]), "InvalidImageName", "couldn't parse image")

    cluster.on_job_created = script
    wait = ["--wait", "--timeout", "30", "--expected", str(pods.base.expected)]
    assert cli(*submit_args(kubeconfig, pods), *wait) == SUBMIT_EXIT
    stopped = record(cluster)["history"][-1]
    assert (stopped["event"], stopped["detail"]) == (
        "stopped",
        "InvalidImageName: couldn't parse image",
    )
    message = (
        f"its Job {NS}/{name_of()} was stopped at {stopped['at']} by {stopped['by']} because it "
        "could not run: InvalidImageName: couldn't parse image"
    )

    code, line = status(kubeconfig, capsys)
    assert code == 0
    assert (line["phase"], line["reason"], line["message"]) == ("gone", "Stopped", message)
    assert collect(kubeconfig, pods) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"run '{RUN_ID}' of tenant '{TENANT}': {message}; it never ran to the end, so there is "
        "no envelope to collect"
    )
