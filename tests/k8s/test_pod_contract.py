"""The Job's container command is exactly what the runner accepts, end to end.

The builder writes the pod's command line and ``attested-replay run`` parses it; nothing else
ties the two together, so a renamed flag would only show on a live cluster. Here the real
``run`` parser reads the builder's (and every overlay's) arguments, and a minimal kubelet
executes them (mount paths mapped to local directories): the real ``run`` publishes to the real
publication service on loopback, and ``collect`` fetches that envelope back from the service.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.envelope.model import Envelope
from runner.cli import build_parser
from runner.commands import run as run_command
from runner.errors import UsageError
from runner.k8s.job import (
    CORPUS_MOUNT,
    ENDORSEMENT_DIR,
    ENDORSEMENT_KEY,
    ENVELOPE_PATH,
    OVERLAYS,
    PUBLISH_TOKEN_DIR,
    RUNNER_COMMAND,
    CorpusSource,
    CorpusUrl,
    CorpusVolume,
    ReplaySpec,
    build_job,
)
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import SqliteStorage
from tests.k8s.cluster import FakeCluster
from tests.k8s.conftest import (
    EXAMPLE_CORPUS,
    IMAGE,
    RUN_ID,
    TENANT,
    Pods,
    cli,
    error_line,
    last_json,
    name_of,
)
from tests.k8s.kustomize import kustomize
from tests.publish.conftest import running_service

K8S = Path(__file__).resolve().parents[2] / "k8s"
CHECKSUM = "sha256:" + "1" * 64
IMAGE_DIGEST = "sha256:" + "2" * 64
URL_CORPUS = CorpusUrl("https://corpora.example/acme.tar.gz")
VOLUME_CORPUS = CorpusVolume("corpora", "acme/2026-11")


def container_of(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def replay_spec(overlay: str, **changes: Any) -> ReplaySpec:
    return ReplaySpec(
        tenant="acme",
        run_id="Run_2026.11.29",
        checksum=CHECKSUM,
        image="registry.example/attested-replay@" + IMAGE_DIGEST,
        overlay=overlay,  # type: ignore[arg-type]  # parametrised with the overlay names
        **{"corpus": URL_CORPUS, **changes},
    )


def parse_pod_command(job: dict[str, Any]) -> argparse.Namespace:
    """The container's command line as the runner image's ``attested-replay`` parses it."""
    container = container_of(job)
    assert container["command"] == list(RUNNER_COMMAND)
    return build_parser().parse_args(container["args"])


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
@pytest.mark.parametrize("corpus", [URL_CORPUS, VOLUME_CORPUS], ids=["url", "volume"])
@pytest.mark.parametrize("publish", [False, True], ids=["no-publish", "publish"])
def test_builder_args_are_accepted_by_the_real_run_parser(
    overlay: str, corpus: CorpusSource, publish: bool
) -> None:
    spec = replay_spec(
        overlay,
        corpus=corpus,
        publish_url="https://publish.example" if publish else None,
        publish_token_secret="acme-publish" if publish else None,
    )
    args = parse_pod_command(build_job(spec))
    assert args.handler is run_command.handle
    assert args.corpus == (
        "https://corpora.example/acme.tar.gz"
        if corpus is URL_CORPUS
        else f"{CORPUS_MOUNT}/acme/2026-11"
    )
    assert args.run_id == "Run_2026.11.29"
    assert args.tenant == "acme"
    assert args.evidence == OVERLAYS[overlay].evidence
    assert args.out == Path(ENVELOPE_PATH)
    assert args.result_out is None
    assert args.expect_checksum == CHECKSUM
    assert args.image_digest == IMAGE_DIGEST
    assert args.termination_log == Path("/dev/termination-log")
    assert args.frame_envelope is True
    assert args.publish == ("https://publish.example" if publish else None)
    assert args.publish_token_file == (Path(PUBLISH_TOKEN_DIR) / "token" if publish else None)
    assert args.nonce is None
    assert args.omit_result is False


@pytest.mark.parametrize("overlay", ["snp", "peer-pods"])
def test_the_endorsement_bundle_is_mounted_and_passed_to_run(overlay: str) -> None:
    job = build_job(replay_spec(overlay, endorsement_secret="vcek-bundle"))
    args = parse_pod_command(job)
    assert args.endorsement_bundle == Path(ENDORSEMENT_DIR) / ENDORSEMENT_KEY
    pod = job["spec"]["template"]["spec"]
    assert {"name": "endorsement", "mountPath": ENDORSEMENT_DIR, "readOnly": True} in container_of(
        job
    )["volumeMounts"]
    assert {
        "name": "endorsement",
        "secret": {"secretName": "vcek-bundle", "defaultMode": 0o440},
    } in pod["volumes"]


def test_an_endorsement_bundle_with_simulated_evidence_is_refused() -> None:
    with pytest.raises(UsageError, match="the coco-dev overlay's evidence is simulated"):
        replay_spec("coco-dev", endorsement_secret="vcek-bundle")


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_overlays_job_args_are_accepted_by_the_real_run_parser(overlay: str) -> None:
    (job,) = [r for r in kustomize(K8S / "overlays" / overlay) if r["kind"] == "Job"]
    args = parse_pod_command(job)
    assert args.handler is run_command.handle
    assert args.evidence == OVERLAYS[overlay].evidence
    assert args.image_digest == "sha256:" + "0" * 64
    assert container_of(job)["image"].endswith("@" + args.image_digest)


def _plant_code(directory: Path, where: str) -> None:
    """A ``runner`` package and a ``sitecustomize`` module that announce being loaded."""
    (directory / "runner").mkdir(parents=True)
    for module in (directory / "runner" / "__init__.py", directory / "sitecustomize.py"):
        module.write_text(f"raise SystemExit('code loaded from {where}')\n")


def test_the_pods_interpreter_loads_no_code_from_its_environment_or_working_directory(
    tmp_path: Path,
) -> None:
    """The container's command is ``python -I``: PYTHONPATH, the user site and the working
    directory (an emptyDir the run writes) cannot put code in front of the installed runner.
    The same command without ``-I`` loads the planted code, so the test can fail."""
    _plant_code(tmp_path / "pythonpath", "PYTHONPATH")
    _plant_code(tmp_path / "workdir", "the working directory")
    user_site = tmp_path / "userbase" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (user_site / "site-packages").mkdir(parents=True)
    (user_site / "site-packages" / "usercustomize.py").write_text(
        "raise SystemExit('code loaded from the user site')\n"
    )
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(tmp_path / "pythonpath"),
        "PYTHONUSERBASE": str(tmp_path / "userbase"),
        "PYTHONINSPECT": "1",
    }

    def pod_process(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *command[1:], "run", "--help"],
            cwd=tmp_path / "workdir",
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    isolated = pod_process(list(RUNNER_COMMAND))
    assert isolated.returncode == 0, isolated.stderr
    assert "--evidence" in isolated.stdout
    assert "code loaded" not in isolated.stdout + isolated.stderr
    assert RUNNER_COMMAND[1] == "-I"
    plain = pod_process([RUNNER_COMMAND[0], *RUNNER_COMMAND[2:]])
    assert plain.returncode != 0
    assert "code loaded from PYTHONPATH" in plain.stderr


def writable_paths(pod: dict[str, Any]) -> list[str]:
    """Where a read-only-root pod can write: writable mounts and the termination message."""
    (container,) = pod["containers"]
    mounts = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    return [*mounts, container["terminationMessagePath"]]


def execute_pod(
    job: dict[str, Any], work: Path, volumes: dict[str, Path], secrets: dict[str, str]
) -> tuple[int, Path]:
    """A minimal kubelet: map every mount to a local directory and run the container's command.

    Returns the exit code and the local file standing for the termination message path.
    Any absolute path in the arguments outside a mount would be unreachable (or unwritable
    under readOnlyRootFilesystem) in the real pod, so it fails the test here.
    """
    pod = job["spec"]["template"]["spec"]
    container = container_of(job)
    by_name = {v["name"]: v for v in pod["volumes"]}
    mapping: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        volume = by_name[mount["name"]]
        if "emptyDir" in volume:
            local = work / "emptydir" / mount["name"]
            local.mkdir(parents=True)
        elif "persistentVolumeClaim" in volume:
            local = volumes[volume["persistentVolumeClaim"]["claimName"]]
        else:
            local = work / "secret" / mount["name"]
            local.mkdir(parents=True)
            secret = volume["secret"]["secretName"]
            (local / "token").write_text(secrets[secret] + "\n")
        mapping[mount["mountPath"]] = local
    termination = work / "termination-log"
    mapping[container["terminationMessagePath"]] = termination

    def local_path(argument: str) -> str:
        if not argument.startswith("/"):
            return argument
        for mount_path, local in sorted(mapping.items(), key=lambda m: -len(m[0])):
            if argument == mount_path or argument.startswith(mount_path + "/"):
                return str(local) + argument[len(mount_path) :]
        raise AssertionError(f"pod argument {argument} is outside every mount")

    # Under readOnlyRootFilesystem the run can write only into writable mounts.
    parsed = parse_pod_command(job)
    for output in (parsed.out, parsed.termination_log):
        assert any(str(output).startswith(p) for p in writable_paths(pod)), output
    return cli(*[local_path(a) for a in container["args"]]), termination


def test_pod_publishes_to_the_real_service_and_collect_fetches_it_from_there(  # noqa: PLR0917
    cluster: FakeCluster,
    kubeconfig: Path,
    pods: Pods,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The pod's simulated evidence must chain to the root the expected-values file trusts.
    monkeypatch.setenv("ATTESTED_REPLAY_STATE_DIR", str(pods.state_dir))
    storage = SqliteStorage(tmp_path / "publication.sqlite3")
    storage.initialize()
    signer = CheckpointSigner("publish.test", Ed25519PrivateKey.generate())
    with running_service(storage, signer) as service:
        # submit asks the service whether the run ID was published, with a token of the tenant
        reader = tmp_path / "tenant-token"
        reader.write_text(service.token(TENANT, "tenant") + "\n")
        submit = (
            "submit",
            "--kubeconfig",
            str(kubeconfig),
            "--api-retry-delay",
            "0.01",
            "--corpus",
            EXAMPLE_CORPUS.name,
            "--corpus-claim",
            "corpora",
            "--checksum",
            pods.checksum,
            "--run-id",
            RUN_ID,
            "--tenant",
            TENANT,
            "--image",
            IMAGE,
            "--overlay",
            "coco-dev",
            "--publish-url",
            service.url,
            "--publish-token-secret",
            "acme-publish",
            "--publish-token-file",
            str(reader),
        )
        submitted = cli(*submit)
        assert submitted == 0, capsys.readouterr().err
        name = name_of()
        job = cluster.jobs[("attested-replay", name)]

        exit_code, termination = execute_pod(
            job,
            tmp_path / "pod",
            volumes={"corpora": EXAMPLE_CORPUS.parent},
            secrets={"acme-publish": service.token(TENANT, "operator")},
        )
        assert exit_code == 0, capsys.readouterr().err
        capsys.readouterr()
        published = (tmp_path / "pod" / "emptydir" / "out" / "envelope.json").read_bytes()
        digest = "sha256:" + hashlib.sha256(published).hexdigest()
        assert json.loads(termination.read_text())["envelope"] == digest
        assert (
            Envelope.model_validate_json(published).binding.image_digest
            == (IMAGE.rpartition("@")[2])
        )
        assert storage.run_digest(TENANT, RUN_ID) == digest
        assert len(storage.log_entries(TENANT, 0, 10)) == 1

        # The kubelet reports the exit; the log is empty, as under a CoCo policy blocking reads.
        pod = cluster.start_pod(name)
        # kata >= 3.29 with GetDiagnosticData allowed: the host sees the message, which then
        # corroborates the envelope collected from the service
        cluster.succeed(pod, log="", termination_message=termination.read_text())

        collect = (
            "collect",
            RUN_ID,
            "--tenant",
            TENANT,
            "--kubeconfig",
            str(kubeconfig),
            "--api-retry-delay",
            "0.01",
            "--expected",
            str(pods.base.expected),
        )
        out = tmp_path / "collected.json"
        code = cli(*collect, "--publish-token-file", str(reader), "--out", str(out))
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert last_json(captured.out) == {
            "job": name,
            "runId": RUN_ID,
            "tenant": TENANT,
            "envelope": digest,
            "result": json.loads(termination.read_text())["result"],
            "source": "publication",
            "terminationMessage": "matched",
            "verified": True,
            "path": str(out),
        }
        assert out.read_bytes() == published
        assert cluster.requests["GET log"] == 0

        # Another tenant's valid token learns nothing, not even that the run exists.
        other = tmp_path / "other-token"
        other.write_text(service.token("globex", "tenant") + "\n")
        code = cli(*collect, "--publish-token-file", str(other))
        assert code == 5
        assert error_line(capsys.readouterr().err) == (
            f"publication endpoint {service.url}/v1/tenants/{TENANT}/runs/{RUN_ID} "
            "answered HTTP 404"
        )
        code = cli(*collect)
        assert code == 5
        assert error_line(capsys.readouterr().err) == (
            f"publication endpoint {service.url}/v1/tenants/{TENANT}/runs/{RUN_ID} "
            "answered HTTP 401"
        )

        # Its Job expires, the run ID stays published: the service would refuse a rerun's
        # envelope after the TEE ran, so submit refuses first, --rerun or not.
        cluster.expire(name)
        assert cli(*submit, "--rerun", "the envelope was lost") == 5
        assert error_line(capsys.readouterr().err) == (
            f"run '{RUN_ID}' of tenant '{TENANT}' was published before: the publication service "
            f"has an envelope of it ({service.url}/v1/tenants/{TENANT}/runs/{RUN_ID}) and keeps "
            "one per run ID, so it would refuse this run's envelope after the TEE ran (--rerun "
            "does not change that). Use a new run ID, or collect the published envelope"
        )
        assert cluster.created[name] == 1
