"""Fixtures: a loopback Kubernetes API, real envelopes from genuine simulated runs, kubelet scripts.

The "pod" output is produced by the real ``attested-replay run`` entrypoint with simulated
evidence (framed stdout line, termination log), once per session; whether the host sees the
termination message and the log is the scenario's choice (see :func:`succeed`); envelopes for many run IDs
(the 200-run test) are built from the same replay outcome with the real simulated signer.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from attestation.envelope.model import Envelope
from runner.cli import main as runner_main
from runner.k8s.job import job_name
from tests.k8s.apiserver import ApiServer
from tests.k8s.cluster import FakeCluster
from tests.k8s.control_plane import ControlPlane, control_plane

EXAMPLE_CORPUS = Path(str(resources.files("runner") / "examples" / "corpus"))
TENANT = "acme"
RUN_ID = "run-1"
IMAGE = "registry.example/attested-replay@sha256:" + "ab" * 32
FRAME = "ATTESTED-ENVELOPE "


@dataclass(frozen=True)
class PodOutput:
    """What the replay container left behind for one run."""

    run_id: str
    envelope: bytes
    termination_message: str
    log: str
    expected: Path


@dataclass
class Pods:
    state_dir: Path
    directory: Path
    base: PodOutput
    checksum: str
    _cache: dict[str, PodOutput]

    def for_run(self, run_id: str) -> PodOutput:
        """A genuine envelope for ``run_id``: same replay, new binding, new simulated report."""
        if run_id in self._cache:
            return self._cache[run_id]
        from attestation.endorsement.trust import TrustStore
        from runner.evidence.simulated import SimulatedProvider, load_or_create_simulated_amd
        from runner.pipeline.envelope import assemble_envelope, endorse, envelope_json_bytes

        base = Envelope.model_validate_json(self.base.envelope)
        binding = base.binding.model_copy(update={"run_id": run_id})
        evidence = SimulatedProvider(state_dir=self.state_dir).obtain(binding.canonical_bytes())
        root = load_or_create_simulated_amd(self.state_dir).ark_certificate
        endorsed = endorse(
            evidence,
            evidence.cert_chain,
            trust=TrustStore.amd().with_simulated_root(root),
            now=datetime.now(UTC),
        )
        envelope = envelope_json_bytes(assemble_envelope(binding, endorsed, result=base.result))
        message = json.loads(self.base.termination_message)
        message["runId"] = run_id
        message["envelope"] = "sha256:" + hashlib.sha256(envelope).hexdigest()
        expected = json.loads(self.base.expected.read_text())
        expected["runId"] = run_id
        expected_path = self.directory / f"{run_id}.json"
        expected_path.write_text(json.dumps(expected))
        output = PodOutput(
            run_id,
            envelope,
            json.dumps(message, sort_keys=True),
            f"replaying\n{FRAME}{base64.b64encode(envelope).decode()}\ndone\n",
            expected_path,
        )
        self._cache[run_id] = output
        return output


@pytest.fixture(scope="session")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Pods:
    work = tmp_path_factory.mktemp("pod")
    state = work / "state"
    termination = work / "termination-log"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
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
                str(state),
                "--out",
                str(work / "envelope.json"),
                "--termination-log",
                str(termination),
                "--frame-envelope",
            ]
        )
    assert code == 0
    expected_dir = work / "expected"
    expected_dir.mkdir()
    expected = expected_dir / f"{RUN_ID}.json"
    assert (
        runner_main(
            [
                "expected",
                "--run-id",
                RUN_ID,
                "--corpus",
                str(EXAMPLE_CORPUS),
                "--tenant",
                TENANT,
                "--this-workload",
                "--trust-local-simulated-root",
                "--state-dir",
                str(state),
                "--out",
                str(expected),
            ]
        )
        == 0
    )
    message = termination.read_text()
    base = PodOutput(
        RUN_ID, (work / "envelope.json").read_bytes(), message, stdout.getvalue(), expected
    )
    checksum = json.loads(message)["corpusChecksum"]
    return Pods(state, expected_dir, base, checksum, {RUN_ID: base})


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    """A fresh cluster per test; afterwards, no run ID may ever have had two Jobs."""
    state = FakeCluster()
    yield state
    created = [
        (event.obj["metadata"]["annotations"]["attested-replay.dev/tenant"], run_id_of(event.obj))
        for event in state.history
        if event.kind == "jobs" and event.type == "ADDED"
    ]
    reruns = [
        (record["tenant"], record["runId"])
        for config_map in state.configmaps.values()
        for record in [json.loads(config_map["data"]["record.json"])]
        for event in record["history"]
        if event["event"] == "rerun"
    ]
    for run in set(created):
        assert created.count(run) <= 1 + reruns.count(run), f"second Job for {run} without --rerun"


@pytest.fixture(scope="session")
def control_plane_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The real control plane (tests/k8s/control_plane.py), once per session."""
    with control_plane(tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


@pytest.fixture
def real_cluster(control_plane_session: ControlPlane) -> Iterator[ControlPlane]:
    """The real control plane; afterwards every Job is deleted with its pods, so a test's
    leftovers never meet the next."""
    yield control_plane_session
    control_plane_session.delete_jobs()


@pytest.fixture
def apiserver(cluster: FakeCluster) -> Iterator[ApiServer]:
    with ApiServer(cluster) as server:
        yield server


@pytest.fixture
def kubeconfig(apiserver: ApiServer, tmp_path: Path) -> Path:
    path: Path = apiserver.kubeconfig(tmp_path / "kubeconfig")
    return path


Script = Callable[[FakeCluster, dict[str, Any]], None]


def run_id_of(job: dict[str, Any]) -> str:
    return str(job["metadata"]["annotations"]["attested-replay.dev/run-id"])


def succeed(pods: Pods, *, termination_message: bool = False, log: bool = True) -> Script:
    """Controller and kubelet: the pod runs the replay and the Job completes.

    As on a CoCo node, the host sees no termination message unless ``termination_message``
    (kata >= 3.29 with GetDiagnosticData allowed); ``log=False`` is an agent policy that denies
    ReadStreamRequest (the agent then returns empty log data).
    """

    def script(cluster: FakeCluster, job: dict[str, Any]) -> None:
        output = pods.for_run(run_id_of(job))
        pod = cluster.start_pod(job["metadata"]["name"])
        cluster.running(pod)
        cluster.succeed(
            pod,
            log=output.log if log else "",
            termination_message=output.termination_message if termination_message else None,
        )

    return script


PUBLISH_TOKEN = "read-token-for-acme"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """A token file for submit/collect's --publish-token-file (the tenant's read token)."""
    path = tmp_path / "token"
    path.write_text(PUBLISH_TOKEN + "\n")
    return path


def publishing_args(url: str, token_file: Path) -> list[str]:
    """submit's options for a run that publishes to ``url`` (token Secret acme-publish)."""
    return [
        "--publish-url",
        url,
        "--publish-token-secret",
        "acme-publish",
        "--publish-token-file",
        str(token_file),
    ]


def unpublished_service(
    httpserver: HTTPServer, *, owner: str = TENANT, shards: tuple[int, ...] | list[int] = ()
) -> str:
    """The publication service as submit's check sees it before the run (its URL): the token
    is ``owner``'s (the tenant's listing answers 200, or 404 as for another tenant), no whole or
    merged envelope of RUN_ID (a one-shot 404, so a test's own handler answers later reads of
    the run), ``shards`` as the run's shard parts."""
    listing = httpserver.expect_request(f"/v1/tenants/{TENANT}/envelopes")
    if owner == TENANT:
        listing.respond_with_json({"envelopes": [], "next": None})
    else:
        listing.respond_with_json({"error": "not found", "reason": "not-found"}, status=404)
    run = f"/v1/tenants/{TENANT}/runs/{RUN_ID}"
    httpserver.expect_oneshot_request(run).respond_with_json(
        {"error": "not found", "reason": "not-found"}, status=404
    )
    httpserver.expect_request(f"{run}/shards").respond_with_json({"shards": list(shards)})
    return str(httpserver.url_for("/")).rstrip("/")


def cli(*argv: str) -> int:
    return runner_main(list(argv))


def submit_args(kubeconfig: Path, pods: Pods, *extra: str, run_id: str = RUN_ID) -> list[str]:
    return [
        "submit",
        "--kubeconfig",
        str(kubeconfig),
        "--watch-timeout",
        "2",
        "--api-retry-delay",
        "0.01",
        "--corpus",
        "https://corpora.example/acme/corpus.tar.gz",
        "--checksum",
        pods.checksum,
        "--run-id",
        run_id,
        "--tenant",
        TENANT,
        "--image",
        IMAGE,
        "--overlay",
        "coco-dev",
        *extra,
    ]


def name_of(run_id: str = RUN_ID) -> str:
    return job_name(TENANT, run_id)


def last_json(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def error_line(text: str) -> str:
    match = re.search(r"^error: (.*)$", text, re.MULTILINE)
    assert match is not None, text
    return match.group(1)
