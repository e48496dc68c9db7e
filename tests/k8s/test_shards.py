"""A sharded replay as one Indexed Job: its shape on Kubernetes 1.31-1.34, per-index progress,
one index failing once and retried, a deterministic failure that stops the run, and collection
into a merged envelope the tenant verifies.

The pods' output is real: each index's log is what ``attested-replay run --shard-count N`` prints
with simulated evidence (the index from ``JOB_COMPLETION_INDEX``, as in the pod).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.cli import main as verify_main
from attestation.contracts import MAX_MERGEABLE_SHARD_COUNT
from runner.cli import main as runner_main
from runner.k8s.indexes import IndexListError, parse_index_list
from runner.k8s.job import MAX_NAME, CorpusUrl, ReplaySpec, build_job, job_name
from runner.pod_output import TAILS_FRAME_PREFIX
from runner.publish.client import publish_envelope
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import SqliteStorage
from tests.k8s.apiserver import job_validation_problems
from tests.k8s.cluster import FakeCluster, format_index_list
from tests.k8s.conftest import (
    EXAMPLE_CORPUS,
    IMAGE,
    TENANT,
    Pods,
    cli,
    error_line,
    last_json,
    submit_args,
)
from tests.k8s.test_manifests import VERSIONS
from tests.publish.conftest import running_service

SHARDS = 3
RUN_ID = "run-sharded"
SUBMIT_EXIT = 5


@dataclass(frozen=True)
class ShardOutputs:
    logs: list[str]
    envelopes: list[bytes]
    expected: Path
    unsharded_result: bytes


@pytest.fixture(scope="session")
def shard_outputs(tmp_path_factory: pytest.TempPathFactory, pods: Pods) -> ShardOutputs:
    """Each index's log, as the pod prints it (index from the Job's environment variable)."""
    work = tmp_path_factory.mktemp("shards")
    logs = []
    for index in range(SHARDS):
        stdout = io.StringIO()
        with (
            contextlib.redirect_stdout(stdout),
            pytest.MonkeyPatch.context() as env,
        ):
            env.setenv("JOB_COMPLETION_INDEX", str(index))
            code = runner_main(
                [
                    "run",
                    "--corpus",
                    str(EXAMPLE_CORPUS),
                    "--run-id",
                    RUN_ID,
                    "--tenant",
                    TENANT,
                    "--evidence",
                    "simulated",
                    "--state-dir",
                    str(pods.state_dir),
                    "--out",
                    str(work / f"shard-{index}.json"),
                    "--shard-count",
                    str(SHARDS),
                    "--frame-envelope",
                ]
            )
        assert code == 0
        logs.append(f"replaying shard {index}\n{stdout.getvalue()}")
    expected = json.loads(pods.base.expected.read_text())
    expected.update(runId=RUN_ID, shardCount=SHARDS)
    path = work / "expected.json"
    path.write_text(json.dumps(expected))
    unsharded = json.loads(pods.base.envelope)["result"]
    envelopes = [(work / f"shard-{index}.json").read_bytes() for index in range(SHARDS)]
    return ShardOutputs(logs, envelopes, path, json.dumps(unsharded, sort_keys=True).encode())


def spec(**changes: Any) -> ReplaySpec:
    fields: dict[str, Any] = {
        "tenant": TENANT,
        "run_id": RUN_ID,
        "corpus": CorpusUrl("https://corpora.example/acme/corpus.tar.gz"),
        "checksum": "sha256:" + "11" * 32,
        "image": IMAGE,
        "overlay": "snp",
        "shards": 8,
        "parallelism": 3,
    }
    fields.update(changes)
    return ReplaySpec(**fields)


# -- the Job -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_the_indexed_job_validates_strictly(version: str) -> None:
    job = build_job(spec())
    kubernetes_validate.validate(job, version, strict=True)


def test_the_indexed_job_shape() -> None:
    job = build_job(spec())
    body = job["spec"]
    assert body["completionMode"] == "Indexed"
    assert (body["completions"], body["parallelism"]) == (8, 3)
    assert (body["backoffLimitPerIndex"], body["maxFailedIndexes"]) == (2, 0)
    assert "backoffLimit" not in body  # the server's default for per-index Jobs
    assert body["podReplacementPolicy"] == "Failed"
    first = body["podFailurePolicy"]["rules"][0]
    assert first["action"] == "FailIndex"
    assert first["onExitCodes"]["values"] == [1, 2, 3, 4, 9]
    container = body["template"]["spec"]["containers"][0]
    assert container["args"][-2:] == ["--shard-count", "8"]
    # the index is the Job controller's to give: not in the template
    assert all(item["name"] != "JOB_COMPLETION_INDEX" for item in container["env"])
    assert "hostname" not in body["template"]["spec"]


def test_an_unsharded_job_is_unchanged() -> None:
    job = build_job(spec(shards=None, parallelism=None))["spec"]
    assert (job["completions"], job["parallelism"], job["backoffLimit"]) == (1, 1, 2)
    assert "completionMode" not in job
    assert job["podFailurePolicy"]["rules"][0]["action"] == "FailJob"


@pytest.mark.parametrize("shards", [1, 9, MAX_MERGEABLE_SHARD_COUNT])
def test_the_longest_job_names_pass_the_servers_indexed_job_validation(shards: int) -> None:
    long_run = "r" * 128
    name = job_name("t" * 63, long_run)
    assert len(name) == MAX_NAME
    job = build_job(spec(tenant="t" * 63, run_id=long_run, shards=shards, parallelism=None))
    assert job_validation_problems({**job, "spec": {**job["spec"], "completions": 256}}) == []
    # a 63-character name (as Jobs were named before) would not pass
    too_long = {**job, "metadata": {**job["metadata"], "name": "x" * 63}}
    assert job_validation_problems(too_long)[0].startswith("metadata.name: Invalid value")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"shards": 0}, "--shards 0: a replay has at least 1 shard"),
        ({"shards": 2.0}, "--shards 2.0: must be a whole number from 1 to 37"),
        # the merged envelope of 38 shards of a 50-run plan could exceed the envelope limits
        (
            {"shards": MAX_MERGEABLE_SHARD_COUNT + 1},
            (
                "--shards 38: at most 37 shards can be merged: the merged envelope of 38 shards "
                "of a plan of up to 50 runs may reach 16826550 bytes and 75038 JSON values, "
                "over the envelope limits \\(16777216 bytes, 100000 values\\)"
            ),
        ),
        ({"shards": 257}, "--shards 257: at most 37 shards can be merged"),
        ({"parallelism": 9}, "--parallelism 9: must be a whole number from 1 to the 8 shards"),
        ({"shards": None}, "--parallelism needs --shards"),
    ],
)
def test_bad_shard_parameters_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception, match=message):
        spec(**changes)


def test_index_lists_are_read_strictly() -> None:
    assert parse_index_list("0,2-4,7", below=8) == {0, 2, 3, 4, 7}
    assert parse_index_list("", below=8) == frozenset()
    for text in ("8", "1-0", "a", "01", "1,,2", "-1"):
        with pytest.raises(IndexListError):
            parse_index_list(text, below=8)
    assert format_index_list([0, 1, 3, 4, 5, 7]) == "0,1,3-5,7"


# -- the run on the cluster ----------------------------------------------------------------


def sharded_script(
    outputs: ShardOutputs,
    *,
    fail_once: dict[int, int] | None = None,
    release: threading.Event | None = None,
    publish: Callable[[int], None] | None = None,
) -> Any:
    """Controller and kubelets: every index's pods run as they are created; ``fail_once``
    makes the first pod of an index exit with that code; ``release`` holds index 2 until set;
    ``publish(index)`` is the pod publishing its shard envelope, whose log then holds its
    tails line only (``collect`` takes the envelope from the service, the tails, which the
    service does not keep, from the log)."""
    failures = dict(fail_once or {})

    def script(cluster: FakeCluster, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        cluster.start_indexes(name)
        handled: set[str] = set()

        def finished() -> bool:
            current = cluster.jobs.get(("attested-replay", name))
            conditions = (current or {}).get("status", {}).get("conditions") or []
            return current is None or any(c["type"] in ("Complete", "Failed") for c in conditions)

        def next_pod() -> str | None:
            for (_, pod_name), pod in sorted(cluster.pods.items()):
                if pod_name not in handled and pod["status"].get("phase") == "Pending":
                    return pod_name
            return None

        while True:
            cluster.wait_until(lambda: finished() or next_pod() is not None, timeout=30)
            pod_name = next_pod()
            if pod_name is None:
                return
            handled.add(pod_name)
            pod = cluster.pods[("attested-replay", pod_name)]
            index = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            cluster.schedule(pod_name)
            cluster.running(pod_name)
            if index in failures:
                cluster.fail(pod_name, exit_code=failures.pop(index))
                continue
            if index == 2 and release is not None:
                release.wait(30)
            if publish is not None:
                publish(index)
            log = outputs.logs[index]
            if publish:
                log = "".join(
                    f"{line}\n" for line in log.splitlines() if line.startswith(TAILS_FRAME_PREFIX)
                )
            cluster.succeed(pod_name, log=log)

    return script


def test_submit_refuses_a_split_that_cannot_merge_before_any_request(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "merged.json"
    count = str(MAX_MERGEABLE_SHARD_COUNT + 1)
    code = cli(*submit_args(kubeconfig, pods, "--shards", count, run_id=RUN_ID), "--out", str(out))
    assert code == 9
    assert error_line(capsys.readouterr().err).startswith(
        "--shards 38: at most 37 shards can be merged: the merged envelope of 38 shards"
    )
    assert cluster.requests["total"] == 0  # no Job, no read: refused before any work
    assert cluster.jobs == {}
    assert not out.exists()


def test_submit_waits_collects_merges_and_verifies_with_one_index_retried(  # noqa: PLR0917 (pytest fixtures)
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    shard_outputs: ShardOutputs,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # index 1's first pod is OOM-killed (137: not a deterministic code, so the index retries)
    cluster.on_job_created = sharded_script(shard_outputs, fail_once={1: 137})
    out = tmp_path / "merged.json"
    code = cli(
        *submit_args(
            kubeconfig, pods, "--shards", str(SHARDS), "--parallelism", "2", run_id=RUN_ID
        ),
        "--wait",
        "--timeout",
        "60",
        "--expected",
        str(shard_outputs.expected),
        "--out",
        str(out),
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = last_json(captured.out)
    assert (summary["verified"], summary["shards"], summary["source"]) == (True, 3, "pod-log")
    merged = json.loads(out.read_bytes())
    assert merged["kind"] == "MergedAttestationEnvelope"
    assert [shard["binding"]["shard"]["index"] for shard in merged["shards"]] == [0, 1, 2]
    assert json.dumps(merged["result"], sort_keys=True).encode() == shard_outputs.unsharded_result
    # the tenant verifies it offline
    assert verify_main(["--envelope", str(out), "--expected", str(shard_outputs.expected)]) == 0
    job = cluster.jobs[("attested-replay", job_name(TENANT, RUN_ID))]
    assert job["status"]["completedIndexes"] == "0-2"
    names = [p for (_, p) in cluster.pods if p.startswith(f"{job_name(TENANT, RUN_ID)}-1-")]
    assert len(names) == 2  # index 1 ran twice


def test_status_shows_every_index(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    shard_outputs: ShardOutputs,
    capsys: pytest.CaptureFixture[str],
) -> None:
    release = threading.Event()
    cluster.on_job_created = sharded_script(shard_outputs, fail_once={0: 137}, release=release)
    assert cli(*submit_args(kubeconfig, pods, "--shards", "3", run_id=RUN_ID)) == 0
    name = job_name(TENANT, RUN_ID)
    cluster.wait_until(
        lambda: (
            (cluster.get("jobs", "attested-replay", name) or {})
            .get("status", {})
            .get("completedIndexes")
            == "0,1"
        )
    )
    capsys.readouterr()
    base = ["--kubeconfig", str(kubeconfig), RUN_ID, "--tenant", TENANT]
    assert cli("status", *base) == 0
    status = json.loads(capsys.readouterr().out)
    release.set()
    assert status["phase"] == "running"
    assert status["shards"] == [
        {"index": 0, "state": "succeeded", "failures": 1, "lastFailure": "exit code 137 (Error)"},
        {"index": 1, "state": "succeeded", "failures": 0},
        {"index": 2, "state": "running", "failures": 0},
    ]


def test_a_deterministic_failure_of_one_index_stops_the_run(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    shard_outputs: ShardOutputs,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster.on_job_created = sharded_script(shard_outputs, fail_once={1: 1})
    code = cli(
        *submit_args(kubeconfig, pods, "--shards", str(SHARDS), run_id=RUN_ID),
        "--wait",
        "--timeout",
        "60",
        "--expected",
        str(shard_outputs.expected),
    )
    captured = capsys.readouterr()
    assert code == SUBMIT_EXIT
    error = error_line(captured.err)
    assert "failed (MaxFailedIndexesExceeded)" in error
    assert "a merge needs every shard" in error
    job = cluster.jobs[("attested-replay", job_name(TENANT, RUN_ID))]
    assert (job["status"]["completedIndexes"], job["status"]["failedIndexes"]) == ("0", "1")
    # index 1 was not retried, and index 2's TEE was stopped
    prefix = job_name(TENANT, RUN_ID)
    assert len([p for (_, p) in cluster.pods if p.startswith(f"{prefix}-1-")]) == 1
    assert not [p for (_, p) in cluster.pods if p.startswith(f"{prefix}-2-")]
    assert "verified" not in captured.out


@pytest.mark.parametrize(
    "other",
    [[], ["--shards", "4"], ["--shards", "3", "--parallelism", "1"]],
    ids=["unsharded", "another-count", "another-parallelism"],
)
def test_one_run_id_is_one_job_sharded_or_not(
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    capsys: pytest.CaptureFixture[str],
    other: list[str],
) -> None:
    first = ["--shards", "3", "--parallelism", "2"]
    assert cli(*submit_args(kubeconfig, pods, *first, run_id=RUN_ID)) == 0
    assert cli(*submit_args(kubeconfig, pods, *first, run_id=RUN_ID)) == 0  # attaches
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["attached"] is True
    assert cli(*submit_args(kubeconfig, pods, *other, run_id=RUN_ID)) == SUBMIT_EXIT
    message = error_line(capsys.readouterr().err)
    assert f"already exists as Job {job_name(TENANT, RUN_ID)} with a different spec" in message
    assert cluster.created[job_name(TENANT, RUN_ID)] == 1


def test_collect_stops_reading_shards_once_the_merged_envelope_cannot_fit(  # noqa: PLR0917 (pytest fixtures)
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    shard_outputs: ShardOutputs,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pods that print 9 MiB shard envelopes (each within the envelope cap): two of them
    already cannot fit one merged envelope, so the third pod's log is never read (collect
    holds about one envelope's worth however many shards there are)."""
    from runner.k8s.collect import EnvelopeCollector
    from runner.pod_output import frame_envelope, framed_payloads, unframe_envelope

    logs = []
    for log in shard_outputs.logs:
        document = json.loads(unframe_envelope(framed_payloads(log).pop()))
        document["result"]["padding"] = "x" * (9 * 1024 * 1024)
        logs.append(f"replaying\n{frame_envelope(json.dumps(document).encode())}\n")
    padded = ShardOutputs(
        logs, shard_outputs.envelopes, shard_outputs.expected, shard_outputs.unsharded_result
    )
    read: list[str] = []
    original = EnvelopeCollector._from_pod_log

    def counting(self: EnvelopeCollector, pod: str) -> bytes:
        read.append(pod)
        return original(self, pod)

    monkeypatch.setattr(EnvelopeCollector, "_from_pod_log", counting)
    cluster.on_job_created = sharded_script(padded)
    code = cli(
        *submit_args(kubeconfig, pods, "--shards", str(SHARDS), run_id=RUN_ID),
        "--wait",
        "--timeout",
        "60",
        "--expected",
        str(shard_outputs.expected),
    )
    captured = capsys.readouterr()
    assert code == 4
    error = error_line(captured.err)
    assert f"Job {job_name(TENANT, RUN_ID)} shard 1: with the 1 shard envelope(s) before it" in (
        error
    )
    assert "over the 16777216-byte envelope limit every verifier applies" in error
    assert len(read) == 2


def test_shards_published_by_their_pods_are_collected_from_the_service(  # noqa: PLR0917 (pytest fixtures)
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    shard_outputs: ShardOutputs,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage = SqliteStorage(tmp_path / "publication.sqlite3")
    storage.initialize()
    signer = CheckpointSigner("publish.test", Ed25519PrivateKey.generate())
    with running_service(storage, signer) as service:

        def publish(index: int) -> None:  # what `run --publish` does in the pod of `index`
            if index != 1:  # shard 1 never reaches the service (its pod's publish failed)
                publish_envelope(
                    service.url,
                    shard_outputs.envelopes[index],
                    tenant=TENANT,
                    run_id=RUN_ID,
                    token=service.token(TENANT),
                    spool_dir=tmp_path / "spool",
                )

        reader = tmp_path / "tenant.token"
        reader.write_text(service.token(TENANT, "tenant") + "\n")
        cluster.on_job_created = sharded_script(shard_outputs, publish=publish)
        publishing = ["--publish-url", service.url, "--publish-token-secret", "acme-publish"]
        code = cli(
            *submit_args(kubeconfig, pods, "--shards", str(SHARDS), *publishing, run_id=RUN_ID),
            "--wait",
            "--timeout",
            "60",
            "--expected",
            str(shard_outputs.expected),
            "--publish-token-file",
            str(reader),
        )
        captured = capsys.readouterr()
        assert code == SUBMIT_EXIT
        assert error_line(captured.err) == (
            f"publication endpoint {service.url}/v1/tenants/{TENANT}/runs/{RUN_ID}/shards/1 "
            "answered HTTP 404"
        )
        job = cluster.jobs[("attested-replay", job_name(TENANT, RUN_ID))]
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--publish") + 1] == service.url
        assert args[args.index("--shard-count") + 1] == str(SHARDS)

        # the spooled shard is delivered later; collect then merges the three from the service
        publish_envelope(
            service.url,
            shard_outputs.envelopes[1],
            tenant=TENANT,
            run_id=RUN_ID,
            token=service.token(TENANT),
            spool_dir=tmp_path / "spool",
        )
        out = tmp_path / "merged.json"
        base = ["--kubeconfig", str(kubeconfig), "--api-retry-delay", "0.01"]
        code = cli(
            "collect",
            RUN_ID,
            "--tenant",
            TENANT,
            *base,
            "--expected",
            str(shard_outputs.expected),
            "--publish-token-file",
            str(reader),
            "--out",
            str(out),
        )
        captured = capsys.readouterr()
        assert code == 0, captured.err
        summary = last_json(captured.out)
        assert (summary["source"], summary["shards"], summary["verified"]) == (
            "publication",
            SHARDS,
            True,
        )
        # the envelopes from the service; from each pod's log only its tails line
        assert cluster.requests["GET log"] == SHARDS
    merged = json.loads(out.read_bytes())
    assert [json.dumps(shard) for shard in merged["shards"]] == [
        json.dumps(json.loads(envelope)) for envelope in shard_outputs.envelopes
    ]
    assert json.dumps(merged["result"], sort_keys=True).encode() == shard_outputs.unsharded_result
