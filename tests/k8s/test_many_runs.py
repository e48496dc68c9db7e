"""200 concurrent runs tracked by one Job, one Pod and one Event watch, through the CLI."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import TENANT, Pods, cli, name_of, run_id_of, submit_args

RUNS = 200


def test_200_concurrent_runs_on_one_watch(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster.validate = False  # schema validation of every create is covered elsewhere; ~50 ms each
    run_ids = [f"batch-{i:03d}" for i in range(RUNS)]
    for run_id in run_ids:
        pods.for_run(run_id)  # the pods' envelopes and the tenant's expected values
        assert cli(*submit_args(kubeconfig, pods, run_id=run_id)) == 0
    assert cli(*submit_args(kubeconfig, pods, run_id=run_ids[7])) == 0  # a retry attaches
    capsys.readouterr()
    assert cluster.requests["POST jobs"] == RUNS + 1  # exactly one create per submission
    requests_before_wait = cluster.requests["total"]

    def controller() -> None:
        cluster.wait_until(
            lambda: cluster.requests["WATCH jobs"] >= 1 and cluster.requests["WATCH pods"] >= 1
        )
        jobs = sorted(cluster.jobs.values(), key=lambda job: job["metadata"]["name"])
        for job in jobs:
            name = job["metadata"]["name"]
            output = pods.for_run(run_id_of(job))
            pod = cluster.start_pod(name)
            cluster.running(pod)
            cluster.succeed(pod, log=output.log)

    thread = threading.Thread(target=controller)
    thread.start()
    out_dir = tmp_path / "envelopes"
    out_dir.mkdir()
    code = cli(
        "collect",
        *run_ids,
        "--tenant",
        TENANT,
        "--wait",
        "--timeout",
        "60",
        "--watch-timeout",
        "30",
        "--kubeconfig",
        str(kubeconfig),
        "--expected",
        str(pods.directory),
        "--out-dir",
        str(out_dir),
    )
    thread.join()
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    summaries = [json.loads(line) for line in captured.out.splitlines()]
    assert sorted(s["runId"] for s in summaries) == run_ids
    assert all(s["verified"] is True for s in summaries)
    for run_id in run_ids:
        assert (out_dir / f"{run_id}.envelope.json").read_bytes() == pods.for_run(run_id).envelope
    # No duplicate Job for any run ID, and exactly one Job per run.
    assert len(cluster.jobs) == RUNS
    assert all(cluster.created[name_of(run_id)] == 1 for run_id in run_ids)
    # One watch per resource type for all 200 runs (no stream timed out or expired here).
    assert cluster.requests["WATCH jobs"] == 1
    assert cluster.requests["WATCH pods"] == 1
    assert cluster.requests["WATCH events"] == 1
    assert cluster.requests["LIST jobs"] == 1
    assert cluster.requests["LIST events"] == 1
    assert cluster.requests["LIST pods"] == 1 + RUNS  # tracker + one per collected run
    # collect: one Job read, one pod list and one log read per run.
    # + the attaching retry: its claim finds the Job, and the 409 is attached by spec digest
    assert cluster.requests["GET job"] == RUNS + 2
    assert cluster.requests["GET log"] == RUNS
    assert cluster.requests["total"] - requests_before_wait == 6 + 3 * RUNS
