"""Collecting from the publication endpoint (a loopback HTTP server) instead of the pod log.

The pods here run as on a CoCo node whose agent policy denies ReadStreamRequest: the log is
empty (the agent redacts it) and the host sees no termination message (no shared filesystem
before kata 3.29), so the envelope can only come from the endpoint, and it is checked against
the Job and by the tenant's verifier.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from tests import hostile_server as hs
from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import (
    PUBLISH_TOKEN,
    RUN_ID,
    TENANT,
    Pods,
    Script,
    cli,
    error_line,
    last_json,
    name_of,
    publishing_args,
    submit_args,
    succeed,
    unpublished_service,
)


def finish_without_log(pods: Pods, *, termination_message: bool = False) -> Script:
    return succeed(pods, termination_message=termination_message, log=False)


def test_envelope_is_collected_from_the_publication_endpoint(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    unpublished_service(httpserver)
    httpserver.expect_request(
        f"/v1/tenants/{TENANT}/runs/{RUN_ID}",
        method="GET",
        headers={"Authorization": f"Bearer {PUBLISH_TOKEN}"},
    ).respond_with_data(pods.base.envelope, content_type="application/json")
    cluster.on_job_created = finish_without_log(pods)
    url = httpserver.url_for("/").rstrip("/")
    code = cli(
        *submit_args(kubeconfig, pods),
        *publishing_args(url, token_file),
        "--wait",
        "--timeout",
        "30",
        "--expected",
        str(pods.base.expected),
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


@pytest.mark.parametrize("termination_message", [False, True], ids=["coco", "kata-3.29"])
def test_endpoint_envelope_of_another_run_is_refused(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
    termination_message: bool,
) -> None:
    other = pods.for_run("run-other").envelope
    unpublished_service(httpserver)
    httpserver.expect_request(f"/v1/tenants/{TENANT}/runs/{RUN_ID}").respond_with_data(other)
    cluster.on_job_created = finish_without_log(pods, termination_message=termination_message)
    url = httpserver.url_for("/").rstrip("/")
    code = cli(
        *submit_args(kubeconfig, pods),
        *publishing_args(url, token_file),
        "--wait",
        "--timeout",
        "30",
        "--expected",
        str(pods.base.expected),
    )
    captured = capsys.readouterr()
    assert code == 5
    assert error_line(captured.err) == (
        f"Job {name_of()}: envelope runId is 'run-other', expected '{RUN_ID}'"
    )


def test_endpoint_envelope_the_termination_message_contradicts_is_refused(  # noqa: PLR0917
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """When the host does see the message (kata >= 3.29), it must describe the envelope."""
    unpublished_service(httpserver)
    httpserver.expect_request(f"/v1/tenants/{TENANT}/runs/{RUN_ID}").respond_with_data(
        pods.base.envelope
    )
    message = json.loads(pods.base.termination_message)
    message["result"] = "sha256:" + "1" * 64

    def script(c: FakeCluster, job: dict[str, Any]) -> None:
        pod = c.start_pod(job["metadata"]["name"])
        c.succeed(pod, log="", termination_message=json.dumps(message))

    cluster.on_job_created = script
    url = httpserver.url_for("/").rstrip("/")
    code = cli(
        *submit_args(kubeconfig, pods),
        *publishing_args(url, token_file),
        "--wait",
        "--timeout",
        "30",
        "--expected",
        str(pods.base.expected),
    )
    captured = capsys.readouterr()
    assert code == 5
    envelope_result = json.loads(pods.base.termination_message)["result"]
    assert error_line(captured.err) == (
        f"Job {name_of()}: pod {name_of()}-bbbbb's termination message reports result digest "
        f"{message['result']}, the collected envelope has {envelope_result}"
    )


def test_endpoint_without_the_run_is_a_clear_error(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    unpublished_service(httpserver)
    httpserver.expect_request(f"/v1/tenants/{TENANT}/runs/{RUN_ID}").respond_with_data(
        "{}", status=404
    )
    cluster.on_job_created = finish_without_log(pods)
    url = httpserver.url_for("/").rstrip("/")
    code = cli(
        *submit_args(kubeconfig, pods),
        *publishing_args(url, token_file),
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
    assert message == (
        f"pod {name_of()}-bbbbb: expected one ATTESTED-ENVELOPE line in the last 4096 lines of "
        "container replay's log, found 0 (a CoCo agent policy that denies ReadStreamRequest "
        "empties the log; use --publish-url)"
    )


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


def test_an_https_endpoint_signed_by_another_ca_is_trusted_only_with_ca_bundle(  # noqa: PLR0917
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """submit --wait and collect read the endpoint with certifi's roots, or --ca-bundle's
    instead; the variables other tools read (REQUESTS_CA_BUNDLE, SSL_CERT_FILE) are not."""
    context, ca = hs.mint_tls(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    json_answer = {"Content-Type": "application/json"}
    envelope = hs.answer(200, pods.base.envelope, json_answer)
    missing = hs.answer(404, b'{"error": "not found"}', json_answer)
    answers = iter([missing])  # submit's check finds no envelope; collect finds it

    def run(conn: socket.socket, request: bytes, server: hs.HostileServer) -> None:
        next(answers, envelope)(conn, request, server)

    cluster.on_job_created = finish_without_log(pods)
    expected = ["--expected", str(pods.base.expected)]
    run_path = f"/v1/tenants/{TENANT}/runs/{RUN_ID}"
    routes = {
        f"/v1/tenants/{TENANT}/envelopes": hs.answer(200, b'{"envelopes": []}', json_answer),
        run_path: run,
        f"{run_path}/shards": hs.answer(200, b'{"shards": []}', json_answer),
    }
    with hs.HostileServer(hs.route(routes, hs.answer(404)), tls=context) as server:
        publish = publishing_args(server.url, token_file)
        submit = [*submit_args(kubeconfig, pods), *publish, "--wait", "--timeout", "30"]
        assert cli(*submit, *expected, "--ca-bundle", str(ca)) == 0
        assert last_json(capsys.readouterr().out)["source"] == "publication"
        assert len(server.requests) == 4  # the listing, the run (404), its shards; the run

        collect = ["collect", RUN_ID, "--tenant", TENANT, "--kubeconfig", str(kubeconfig)]
        assert cli(*collect, *expected) == 5
        message = error_line(capsys.readouterr().err)
        assert message.startswith(
            f"publication endpoint {server.url}/v1/tenants/{TENANT}/runs/{RUN_ID}: "
        )
        assert "TLS failed" in message
        assert len(server.requests) == 4  # the handshake failed: no request was sent

        assert cli(*collect, *expected, "--ca-bundle", str(ca)) == 0
        summary = last_json(capsys.readouterr().out)
        assert (summary["source"], summary["verified"]) == ("publication", True)
        assert len(server.requests) == 5


def test_a_ca_bundle_that_is_not_pem_is_a_usage_error_before_any_request(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a certificate\n")
    code = cli(*submit_args(kubeconfig, pods), "--ca-bundle", str(bundle))
    assert code == 9
    assert error_line(capsys.readouterr().err).startswith(f"cannot load the CA bundle {bundle}: ")
    assert cluster.jobs == {}
    assert cluster.configmaps == {}
    assert sum(cluster.requests.values()) == 0
