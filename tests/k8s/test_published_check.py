"""submit asks the publication service whether a run ID was published before a TEE boots.

The service keeps one envelope per (tenant, run ID, part) and refuses a second (409), so a run
of a published run ID would replay and then fail to publish, once per Job attempt. The check
reads the tenant's listing (the token must be the run's tenant's: another tenant's runs answer
404),
``/v1/tenants/{t}/runs/{r}`` and ``…/shards``, and fails closed on anything else. Against the
real service: ``tests/k8s/test_pod_contract.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import (
    PUBLISH_TOKEN,
    RUN_ID,
    TENANT,
    Pods,
    cli,
    error_line,
    name_of,
    publishing_args,
    submit_args,
    unpublished_service,
)

SUBMIT_EXIT = 5
RUN_PATH = f"/v1/tenants/{TENANT}/runs/{RUN_ID}"


def nothing_created(cluster: FakeCluster) -> bool:
    return cluster.jobs == {} and cluster.configmaps == {}


def test_an_unpublished_run_is_submitted_after_three_reads(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, httpserver: HTTPServer, token_file: Path
) -> None:
    url = unpublished_service(httpserver)
    assert cli(*submit_args(kubeconfig, pods), *publishing_args(url, token_file)) == 0
    assert [(r.method, r.path) for r, _ in httpserver.log] == [
        ("GET", f"/v1/tenants/{TENANT}/envelopes"),
        ("GET", RUN_PATH),
        ("GET", f"{RUN_PATH}/shards"),
    ]
    assert all(r.headers["Authorization"] == f"Bearer {PUBLISH_TOKEN}" for r, _ in httpserver.log)
    assert cluster.created[name_of()] == 1

    # An identical submit while the Job exists attaches to it: the run is not asked about again.
    assert cli(*submit_args(kubeconfig, pods), *publishing_args(url, token_file)) == 0
    assert len(httpserver.log) == 3
    assert cluster.created[name_of()] == 1


def test_a_run_with_published_shards_is_refused(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = unpublished_service(httpserver, shards=[0, 2])
    code = cli(
        *submit_args(kubeconfig, pods), *publishing_args(url, token_file), "--rerun", "again"
    )
    assert code == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"run '{RUN_ID}' of tenant '{TENANT}' was published before: the publication service "
        f"has shard envelopes (0, 2) of it ({url}{RUN_PATH}/shards) and keeps one per run ID, "
        "so it would refuse this run's envelope after the TEE ran (--rerun does not change "
        "that). Use a new run ID, or collect the published envelope"
    )
    assert nothing_created(cluster)


def test_a_token_of_another_tenant_cannot_tell_and_is_refused(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = unpublished_service(httpserver, owner="globex")
    assert cli(*submit_args(kubeconfig, pods), *publishing_args(url, token_file)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"{url}/v1/tenants/{TENANT}/envelopes answered HTTP 404: the --publish-token-file token "
        f"is not one of tenant '{TENANT}', and the publication service answers 'not found' for "
        f"every run of another tenant, so submit cannot check whether run '{RUN_ID}' was "
        f"published; give a token of tenant '{TENANT}'"
    )
    assert [r.path for r, _ in httpserver.log] == [f"/v1/tenants/{TENANT}/envelopes"]
    assert nothing_created(cluster)


def test_a_token_the_service_does_not_accept_is_refused(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    httpserver.expect_request(f"/v1/tenants/{TENANT}/envelopes").respond_with_json(
        {"error": "no"}, status=401
    )
    url = httpserver.url_for("/").rstrip("/")
    assert cli(*submit_args(kubeconfig, pods), *publishing_args(url, token_file)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"{url}/v1/tenants/{TENANT}/envelopes answered HTTP 401: the --publish-token-file token is not accepted by "
        f"the publication service, so submit cannot check whether run '{RUN_ID}' was published "
        "there"
    )
    assert nothing_created(cluster)


def test_a_service_that_cannot_answer_fails_the_check_closed(  # noqa: PLR0917 - fixtures
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    httpserver: HTTPServer,
    token_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    httpserver.expect_request(f"/v1/tenants/{TENANT}/envelopes").respond_with_json(
        {"envelopes": [], "next": None}
    )
    httpserver.expect_request(RUN_PATH).respond_with_data("overloaded", status=503)
    url = httpserver.url_for("/").rstrip("/")
    assert cli(*submit_args(kubeconfig, pods), *publishing_args(url, token_file)) == SUBMIT_EXIT
    assert error_line(capsys.readouterr().err) == (
        f"{url}{RUN_PATH} answered HTTP 503: submit cannot check whether run '{RUN_ID}' was "
        "published, and refuses to boot a TEE for a run ID that may have been"
    )
    assert nothing_created(cluster)


def test_publishing_without_a_token_to_check_with_is_a_usage_error(
    cluster: FakeCluster, kubeconfig: Path, pods: Pods, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli(
        *submit_args(kubeconfig, pods),
        "--publish-url",
        "https://publish.example",
        "--publish-token-secret",
        "acme-publish",
    )
    assert code == 9
    assert error_line(capsys.readouterr().err) == (
        "--publish-url https://publish.example: submit first asks the publication service "
        f"whether run '{RUN_ID}' was published; give --publish-token-file FILE (a token of "
        f"tenant '{TENANT}')"
    )
    assert sum(cluster.requests.values()) == 0
