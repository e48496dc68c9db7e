"""The test API server answers like kube-apiserver where the operator commands depend on it.

Each test pins one behaviour of the real server (the source is named in
``tests/k8s/apiserver.py``), through the official client, so that a shortcut in the double
cannot hide a difference from a real cluster.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runner.k8s.retry import warnings_of
from tests.k8s.apiserver import ApiServer
from tests.k8s.cluster import FakeCluster, match_pod_failure_policy

NS = "attested-replay"


def job_body(**template_spec: Any) -> dict[str, Any]:
    spec = {
        "restartPolicy": "Never",
        "containers": [{"name": "replay", "image": "registry.example/r@sha256:" + "a" * 64}],
        **template_spec,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "acme-run-1-0123456789", "labels": {"app": "x"}},
        "spec": {
            "backoffLimit": 2,
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": spec},
        },
    }


@pytest.fixture
def api() -> Iterator[tuple[FakeCluster, client.ApiClient]]:
    cluster = FakeCluster()
    with ApiServer(cluster) as server:
        configuration = client.Configuration()
        configuration.host = server.url
        with client.ApiClient(configuration) as api_client:
            yield cluster, api_client


def create_job(api_client: client.ApiClient, body: dict[str, Any], **kwargs: Any) -> Any:
    """The raw response (status and headers), its body read and its connection released."""
    batch: Any = client.BatchV1Api(api_client)  # untyped use: raw responses, dict bodies
    response = batch.create_namespaced_job(NS, body, _preload_content=False, **kwargs)
    _ = response.data
    response.release_conn()
    return response


def core_api(api_client: client.ApiClient) -> Any:
    """CoreV1Api used untyped: dict bodies and raw responses, as the submitter uses it."""
    return client.CoreV1Api(api_client)


def failure(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str, str]:
    body = json.loads(str(exc.value.body))
    return int(exc.value.status), body["reason"], body["message"]


# A field the client's models know (Kubernetes 1.34+) that a 1.33 server does not: the usual
# way an unknown field reaches a real server is a client newer than the cluster.
NEWER_FIELD = {"hostnameOverride": "replay"}
UNKNOWN = 'unknown field "spec.template.spec.hostnameOverride"'


def test_unknown_fields_are_dropped_with_a_warning_by_default(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    cluster, api_client = api
    response = create_job(api_client, job_body(**NEWER_FIELD))
    assert response.status == 201
    assert response.headers.getlist("Warning") == [
        f'299 - "{UNKNOWN.replace(chr(34), chr(92) + chr(34))}"'
    ]
    assert warnings_of(response) == [UNKNOWN]
    stored = cluster.jobs[(NS, "acme-run-1-0123456789")]
    assert "hostnameOverride" not in stored["spec"]["template"]["spec"]
    assert cluster.field_validation == [("POST jobs", "")]


def test_ignore_drops_silently_and_strict_refuses(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    cluster, api_client = api
    body = job_body(**NEWER_FIELD)
    with pytest.raises(ApiException) as refused:
        create_job(api_client, body, field_validation="Strict")
    assert failure(refused) == (
        400,
        "BadRequest",
        f'Job in version "v1" cannot be handled as a Job: strict decoding error: {UNKNOWN}',
    )
    assert cluster.jobs == {}
    response = create_job(api_client, body, field_validation="Ignore")
    assert response.status == 201
    assert response.headers.getlist("Warning") == []
    assert (
        "hostnameOverride"
        not in cluster.jobs[(NS, "acme-run-1-0123456789")]["spec"]["template"]["spec"]
    )


def test_duplicate_keys_are_strict_errors(api: tuple[FakeCluster, client.ApiClient]) -> None:
    _, api_client = api
    raw = json.dumps(job_body()).replace(
        '"backoffLimit": 2', '"backoffLimit": 2, "backoffLimit": 9'
    )
    answer = urllib3.request(
        "POST",
        f"{api_client.configuration.host}/apis/batch/v1/namespaces/{NS}/jobs?fieldValidation=Strict",
        body=raw.encode(),
    )
    assert answer.status == 400
    assert json.loads(answer.data)["message"] == (
        'Job in version "v1" cannot be handled as a Job: strict decoding error: '
        'duplicate field "spec.backoffLimit"'
    )


def test_created_jobs_get_the_servers_defaults(api: tuple[FakeCluster, client.ApiClient]) -> None:
    """The stored Job is not the submitted one: selector, template labels and defaults are the
    server's (``pkg/registry/batch/job/strategy.go``), so nothing may compare whole specs."""
    cluster, api_client = api
    create_job(api_client, job_body())
    job = cluster.jobs[(NS, "acme-run-1-0123456789")]
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "app": "x",
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "acme-run-1-0123456789",
        "controller-uid": uid,
        "job-name": "acme-run-1-0123456789",
    }
    assert (job["spec"]["completionMode"], job["spec"]["suspend"]) == ("NonIndexed", False)


def test_creating_in_a_missing_namespace_is_not_found(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    _, api_client = api
    batch: Any = client.BatchV1Api(api_client)
    with pytest.raises(ApiException) as refused:
        batch.create_namespaced_job("elsewhere", job_body())
    assert failure(refused) == (404, "NotFound", 'namespaces "elsewhere" not found')


def test_config_map_updates_need_the_current_resource_version(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    _, api_client = api
    core = core_api(api_client)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "rec"},
        "data": {"a": "1"},
    }
    answer = core.create_namespaced_config_map(NS, body, _preload_content=False)
    created = json.loads(answer.data)
    answer.release_conn()
    stale = copy.deepcopy(created)
    created["data"]["a"] = "2"
    core.replace_namespaced_config_map("rec", NS, created, _preload_content=False).release_conn()
    stale["data"]["a"] = "3"
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("rec", NS, stale)
    assert failure(conflict) == (
        409,
        "Conflict",
        (
            'Operation cannot be fulfilled on configmaps "rec": the object has been modified; '
            "please apply your changes to the latest version and try again"
        ),
    )
    with pytest.raises(ApiException) as missing:
        core.replace_namespaced_config_map("other", NS, dict(body, metadata={"name": "other"}))
    assert failure(missing)[:2] == (404, "NotFound")


def test_pod_logs_need_a_valid_container_and_a_node(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    cluster, api_client = api
    core = core_api(api_client)
    create_job(api_client, job_body())
    pod = cluster.start_pod("acme-run-1-0123456789")
    with pytest.raises(ApiException) as unscheduled:
        core.read_namespaced_pod_log(pod, NS, container="replay")
    assert failure(unscheduled) == (400, "BadRequest", f"pod {pod} does not have a host assigned")
    cluster.running(pod)
    cluster.succeed(pod, log="one\ntwo\nthree\n")
    with pytest.raises(ApiException) as wrong:
        core.read_namespaced_pod_log(pod, NS, container="sidecar")
    assert failure(wrong) == (400, "BadRequest", f"container sidecar is not valid for pod {pod}")
    assert core.read_namespaced_pod_log(pod, NS) == "one\ntwo\nthree\n"  # the only container
    # the kubelet takes the last lines first, then limits the bytes from there
    assert core.read_namespaced_pod_log(pod, NS, container="replay", tail_lines=2) == "two\nthree\n"
    assert (
        core.read_namespaced_pod_log(pod, NS, container="replay", tail_lines=2, limit_bytes=5)
        == "two\nt"
    )


def test_events_are_selected_by_field_and_repeats_count_up(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    cluster, api_client = api
    core = core_api(api_client)
    create_job(api_client, job_body())
    pod = cluster.start_pod("acme-run-1-0123456789")
    assert cluster.sandbox_failed(pod, "boom") == 1
    assert cluster.sandbox_failed(pod, "boom") == 2
    cluster.unschedulable(cluster.start_pod("acme-run-1-0123456789"), "0/1 nodes are available")

    def listed(selector: str) -> list[dict[str, Any]]:
        raw = core.list_namespaced_event(NS, field_selector=selector, _preload_content=False)
        items: list[dict[str, Any]] = json.loads(raw.data)["items"]
        raw.release_conn()
        return items

    (sandbox,) = listed(f"involvedObject.name={pod},type=Warning")
    assert (sandbox["reason"], sandbox["count"], sandbox["message"]) == (
        "FailedCreatePodSandBox",
        2,
        "Failed to create pod sandbox: boom",
    )
    assert sandbox["source"] == {"component": "kubelet", "host": "snp-worker-1"}
    (scheduling,) = listed("involvedObject.kind=Pod,reason=FailedScheduling")
    assert "count" not in scheduling  # events.k8s.io recorders: eventTime and series instead
    assert scheduling["reportingComponent"] == "default-scheduler"
    assert len(listed("involvedObject.kind=Pod,type!=Normal")) == 2
    with pytest.raises(ApiException) as bad:
        listed("involvedObject.colour=red")
    assert failure(bad)[:2] == (400, "BadRequest")


def test_the_job_controller_applies_the_jobs_own_pod_failure_policy() -> None:
    policy = {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "replay", "operator": "In", "values": [2]},
            },
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ]
    }

    def pod(exit_code: int, conditions: list[dict[str, str]]) -> dict[str, Any]:
        state = {"terminated": {"exitCode": exit_code}}
        return {
            "metadata": {"name": "p", "namespace": NS},
            "status": {
                "conditions": conditions,
                "containerStatuses": [{"name": "replay", "state": state}],
            },
        }

    disrupted = [{"type": "DisruptionTarget", "status": "True"}]
    assert match_pod_failure_policy(policy, pod(2, [])) == (
        "Container replay for pod attested-replay/p failed with exit code 2 matching FailJob rule at index 0",
        True,
        "FailJob",
    )
    assert match_pod_failure_policy(policy, pod(137, disrupted)) == (None, False, "Ignore")
    assert match_pod_failure_policy(policy, pod(6, [])) == (None, True, None)  # counted
    assert match_pod_failure_policy(policy, pod(2, disrupted))[2] == "FailJob"  # first match
