"""Collecting from the publication endpoint (a loopback HTTP server) instead of the pod log.

CoCo's default agent policy blocks log reads, so here the pod log is empty on purpose: the
envelope can only come from the endpoint, and must match the pod's termination message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from tests.k8s.apiserver import FakeCluster
from tests.k8s.conftest import RUN_ID, TENANT, Pods, Script, cli, error_line, last_json, submit_args

TOKEN = "read-token-for-acme"


def finish_without_log(pods: Pods) -> Script:
    def script(cluster: FakeCluster, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        pod = cluster.start_pod(name)
        cluster.finish_pod(pod, exit_code=0, message=pods.base.termination_message, log="")
        cluster.complete_job(name)

    return script


def test_envelope_is_collected_from_the_publication_endpoint(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    httpserver.expect_request(
        f"/v1/tenants/{TENANT}/runs/{RUN_ID}",
        method="GET",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ).respond_with_data(pods.base.envelope, content_type="application/json")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    cluster.on_job_created = finish_without_log(pods)
    url = httpserver.url_for("/").rstrip("/")
    code = cli(
        *submit_args(kubeconfig, pods),
        "--publish-url",
        url,
        "--publish-token-secret",
        "acme-publish",
        "--wait",
        "--timeout",
        "30",
        "--expected",
        str(pods.base.expected),
        "--publish-token-file",
        str(token_file),
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = last_json(captured.out)
    assert summary["source"] == "publication"
    assert summary["verified"] is True
    job = next(iter(cluster.jobs.values()))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-4:] == [
        "--publish",
        url,
        "--publish-token-file",
        "/var/run/secrets/attested-replay/publish/token",
    ]
    assert cluster.requests["GET log"] == 0


def test_endpoint_envelope_that_differs_from_the_pods_digest_is_refused(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = pods.for_run("run-other").envelope
    httpserver.expect_request(f"/v1/tenants/{TENANT}/runs/{RUN_ID}").respond_with_data(other)
    cluster.on_job_created = finish_without_log(pods)
    url = httpserver.url_for("/").rstrip("/")
    code = cli(
        *submit_args(kubeconfig, pods),
        "--publish-url",
        url,
        "--publish-token-secret",
        "acme-publish",
        "--wait",
        "--timeout",
        "30",
        "--expected",
        str(pods.base.expected),
    )
    captured = capsys.readouterr()
    assert code == 5
    reported = json.loads(pods.base.termination_message)["envelope"]
    assert error_line(captured.err).endswith(f"the pod reported {reported}")


def test_endpoint_without_the_run_is_a_clear_error(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    httpserver.expect_request(f"/v1/tenants/{TENANT}/runs/{RUN_ID}").respond_with_data(
        "{}", status=404
    )
    cluster.on_job_created = finish_without_log(pods)
    url = httpserver.url_for("/").rstrip("/")
    code = cli(
        *submit_args(kubeconfig, pods),
        "--publish-url",
        url,
        "--publish-token-secret",
        "acme-publish",
        "--wait",
        "--timeout",
        "30",
        "--expected",
        str(pods.base.expected),
    )
    assert code == 5
    assert error_line(capsys.readouterr().err) == (
        f"publication endpoint {url}/v1/tenants/{TENANT}/runs/{RUN_ID} answered HTTP 404"
    )


def test_without_endpoint_an_empty_log_names_the_cause(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.on_job_created = finish_without_log(pods)
    code = cli(
        *submit_args(kubeconfig, pods),
        "--wait",
        "--timeout",
        "30",
        "--expected",
        str(pods.base.expected),
    )
    assert code == 5
    message = error_line(capsys.readouterr().err)
    assert "expected one ATTESTED-ENVELOPE line in the log, found 0" in message
    assert "use --publish-url" in message


@pytest.mark.parametrize("content", ["", "\n", "two tokens\n"], ids=["empty", "blank", "two"])
def test_a_malformed_token_file_is_a_usage_error_before_any_request(
    cluster: FakeCluster,
    kubeconfig: Path,
    tmp_path: Path,
    content: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(content)
    code = cli(
        "collect",
        RUN_ID,
        "--tenant",
        TENANT,
        "--kubeconfig",
        str(kubeconfig),
        "--expected",
        str(tmp_path),
        "--publish-url",
        "https://publish.example",
        "--publish-token-file",
        str(token_file),
    )
    assert code == 9
    assert error_line(capsys.readouterr().err) == (
        f"token file {token_file} must hold exactly one token"
    )
    assert sum(cluster.requests.values()) == 0
