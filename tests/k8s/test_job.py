"""The pure Job builder: names, digests, security settings, and refusals."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.contracts import RUN_ID_PATTERN
from attestation.encoding.canonical import canonicalize
from runner.errors import UsageError
from runner.k8s.collect import read_termination_message
from runner.k8s.errors import EnvelopeMismatchError
from runner.k8s.job import (
    ANNOTATION_SPEC_DIGEST,
    RUNNER_ENV,
    CorpusUrl,
    CorpusVolume,
    ReplaySpec,
    build_job,
    emptydir_size_limit,
    job_name,
    spec_digest,
)
from runner.k8s.state import (
    event_count,
    event_stall,
    events_span,
    job_outcome,
    pod_failure,
    pod_stall,
)

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TENANTS = st.from_regex(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", fullmatch=True)
RUN_IDS = st.from_regex(RUN_ID_PATTERN, fullmatch=True)


def spec(**changes: Any) -> ReplaySpec:
    base = ReplaySpec(
        tenant="acme",
        run_id="Run_2026.11.29",
        corpus=CorpusUrl("https://corpora.example/acme.tar.gz"),
        checksum="sha256:" + "1" * 64,
        image="registry.example/attested-replay@sha256:" + "2" * 64,
        overlay="snp",
    )
    return replace(base, **changes)


@given(TENANTS, RUN_IDS)
def test_job_names_are_dns_labels_of_at_most_63_chars_with_a_hash(tenant: str, run_id: str) -> None:
    name = job_name(tenant, run_id)
    assert len(name) <= 63
    assert DNS_1123_LABEL.match(name)
    assert name.endswith("-" + hashlib.sha256(f"{tenant}/{run_id}".encode()).hexdigest()[:10])
    assert job_name(tenant, run_id) == name


def test_names_that_sanitise_or_join_alike_still_differ() -> None:
    assert job_name("acme", "A.b") != job_name("acme", "a-b")
    assert job_name("a-b", "c") != job_name("a", "b-c")
    assert job_name("acme", "run-1") == "acme-run-1-865eaba9b6"


@pytest.mark.parametrize("version", ["1.31", "1.32", "1.33", "1.34"])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"overlay": "coco-dev"},
        {"overlay": "peer-pods", "runtime_class": "kata-remote-custom"},
        {"corpus": CorpusVolume("corpora", "acme/2026-11")},
        {"publish_url": "https://publish.example", "publish_token_secret": "acme-publish"},
        {"run_id": "a" * 128},
    ],
)
def test_built_jobs_validate_strictly(changes: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(build_job(spec(**changes)), version, strict=True)


def test_spec_digest_is_sha256_of_the_canonical_job_spec() -> None:
    job = build_job(spec())
    expected = "sha256:" + hashlib.sha256(canonicalize(job["spec"])).hexdigest()
    assert (
        job["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST]
        == expected
        == spec_digest(job["spec"])
    )
    assert build_job(spec()) == job
    assert build_job(spec(cpu=4))["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST] != expected


@pytest.mark.parametrize(
    ("data", "node_disk", "limit"),
    [
        ("64Mi", "4Ti", "3839Mi"),  # 64 MiB + ceil(4 TiB * 0.0009) rounded up to MiB
        ("2Gi", "320Gi", "2343Mi"),  # a 320 GiB kubelet disk already needs ~295 MiB of metadata
        ("1Mi", "1Mi", "2Mi"),
    ],
)
def test_emptydir_size_limits_allow_for_block_encrypted_metadata(
    data: str, node_disk: str, limit: str
) -> None:
    assert emptydir_size_limit(data, node_disk) == limit


@pytest.mark.parametrize("value", ["2G", "0Gi", "1.5Gi", "2048Ki", "10Pi", ""])
def test_scratch_and_node_disk_sizes_are_binary_quantities(value: str) -> None:
    with pytest.raises(UsageError, match="must look like 512Mi, 2Gi or 4Ti"):
        spec(scratch_size=value)
    with pytest.raises(UsageError, match=r"--node-disk '.*': must look like"):
        spec(node_disk=value)


def test_pod_security_resources_and_failure_policy() -> None:
    job = build_job(spec(cpu=3, memory="6Gi"))
    job_spec = job["spec"]
    pod = job_spec["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["resources"] == {
        "requests": {"cpu": "3", "memory": "6Gi"},
        "limits": {"cpu": "3", "memory": "6Gi"},
    }
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/replay/out", "/tmp"}
    # data + 0.09 % of the default 4Ti kubelet filesystem (block-encrypted emptyDir metadata)
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in pod["volumes"]} == {
        "out": "3839Mi",
        "tmp": "5823Mi",
    }
    assert container["imagePullPolicy"] == "Always"
    assert container["workingDir"] == "/replay/out"
    assert [(item["name"], item["value"]) for item in container["env"]] == list(RUNNER_ENV)
    assert container["terminationMessagePolicy"] == "File"
    assert job_spec["podReplacementPolicy"] == "Failed"
    assert job_spec["backoffLimit"] == 2
    assert job_spec["activeDeadlineSeconds"] == 7200
    assert job_spec["ttlSecondsAfterFinished"] == 86400
    assert job_spec["podFailurePolicy"]["rules"] == [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "replay", "operator": "In", "values": [1, 2, 3, 4, 9]},
        },
        # disruptions count: every attempt is a new VM, bounded by backoffLimit
        {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
    assert container["args"] == [
        "run",
        "--corpus",
        "https://corpora.example/acme.tar.gz",
        "--run-id",
        "Run_2026.11.29",
        "--tenant",
        "acme",
        "--evidence",
        "coco-aa",
        "--out",
        "/replay/out/envelope.json",
        "--expect-checksum",
        "sha256:" + "1" * 64,
        "--image-digest",
        "sha256:" + "2" * 64,
        "--termination-log",
        "/dev/termination-log",
        "--frame-envelope",
    ]


def test_volume_corpus_is_mounted_read_only_and_the_pod_rechecks_the_checksum() -> None:
    job = build_job(spec(corpus=CorpusVolume("corpora", "acme/2026-11")))
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {
        "name": "corpus",
        "persistentVolumeClaim": {"claimName": "corpora", "readOnly": True},
    } in pod["volumes"]
    assert {"name": "corpus", "mountPath": "/replay/corpus", "readOnly": True} in container[
        "volumeMounts"
    ]
    args = container["args"]
    assert args[args.index("--corpus") + 1] == "/replay/corpus/acme/2026-11"
    assert args[args.index("--expect-checksum") + 1] == "sha256:" + "1" * 64


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"image": "registry.example/attested-replay:v1"},
            "must be pinned by digest with its registry",
        ),
        (
            {"image": "registry.example/attested-replay@sha256:abc"},
            "must be pinned by digest with its registry",
        ),
        ({"cpu": 0}, "--cpu 0: must be a whole number of vCPUs from 1 to 64"),
        ({"cpu": 1.5}, "--cpu 1.5: must be a whole number of vCPUs from 1 to 64"),
        ({"cpu": True}, "--cpu True: must be a whole number of vCPUs from 1 to 64"),
        ({"memory": "4G"}, "--memory '4G': must look like 4Gi or 512Mi"),
        (
            {"checksum": "sha256:" + "A" * 64},
            "--checksum 'sha256:AAAA",  # ... 'sha256:' followed by 64 lowercase hex digits
        ),
        ({"tenant": "Acme"}, "tenant 'Acme': must be a DNS label: 1 to 63 lowercase letters"),
        ({"run_id": "a" * 129}, "': must be 1 to 128 letters, digits, '.', '_' or '-'"),
        ({"overlay": "tdx"}, "--overlay 'tdx': choose one of"),
        ({"active_deadline_seconds": 0}, "--active-deadline 0: must be an integer >= 1"),
        ({"publish_token_secret": "tok"}, "--publish-token-secret needs --publish-url"),
        (
            {"publish_url": "https://publish.example"},
            "the publication service refuses anonymous writes",
        ),
        (
            {"publish_url": "http://publish.example", "publish_token_secret": "tok"},
            "plain http:// is allowed only for loopback hosts, not publish.example",
        ),
        (
            {"publish_url": "dir:///srv/envelopes", "publish_token_secret": "tok"},
            "--publish-url 'dir:///srv/envelopes': must be http(s)://",
        ),
        ({"namespace": "Bad_NS"}, "--namespace 'Bad_NS': is not a DNS-1123 label"),
        # `$` in a pattern also matches before a final newline: the whole value must match.
        ({"tenant": "acme\n"}, "tenant 'acme\\n': must be a DNS label"),
        ({"namespace": "ns\n"}, "is not a DNS-1123 label"),
        (
            {"checksum": "sha256:" + "1" * 64 + "\n"},
            "\\n': must be 'sha256:' followed by 64 lowercase hex digits",
        ),
    ],
)
def test_invalid_specs_are_refused_with_the_reason(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        spec(**changes)


@pytest.mark.parametrize(
    "value",
    ["http://corpora.example/a.tar.gz", "file:///etc/passwd", "https://x/a b.tar.gz"],
)
def test_corpus_urls_must_be_https(value: str) -> None:
    with pytest.raises(UsageError, match="corpus URL must be an https:// URL"):
        CorpusUrl(value)


@pytest.mark.parametrize("path", ["../etc", "a/../b", "/abs", "a//b", ""])
def test_corpus_volume_paths_stay_inside_the_claim(path: str) -> None:
    with pytest.raises(UsageError, match="must be a relative path inside the claim"):
        CorpusVolume("corpora", path)


def condition(kind: str, status: str = "True", reason: str | None = None) -> dict[str, Any]:
    result = {"type": kind, "status": status}
    if reason:
        result["reason"] = reason
    return result


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        # 1.31+: SuccessCriteriaMet (CompletionsReached) precedes Complete; the pod is done
        ([condition("SuccessCriteriaMet")], ("succeeded", "Complete")),
        ([condition("Complete", "False")], None),
        ([condition("SuccessCriteriaMet"), condition("Complete")], ("succeeded", "Complete")),
        ([condition("Failed", reason="DeadlineExceeded")], ("failed", "DeadlineExceeded")),
        ([condition("FailureTarget", reason="PodFailurePolicy")], ("failed", "PodFailurePolicy")),
        ([condition("Failed")], ("failed", "Failed")),
    ],
)
def test_job_outcome_from_conditions(
    conditions: list[dict[str, Any]], expected: tuple[str, str] | None
) -> None:
    outcome = job_outcome({"metadata": {"name": "j"}, "status": {"conditions": conditions}})
    assert (None if outcome is None else (outcome.state, outcome.reason)) == expected


def pending(
    *containers: dict[str, Any], conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "conditions": conditions or [],
            "containerStatuses": list(containers),
        },
    }


def waiting(reason: str, message: str = "m") -> dict[str, Any]:
    return {"name": "replay", "state": {"waiting": {"reason": reason, "message": message}}}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({"status": {"phase": "Running"}}, None),
        (pending(waiting("ContainerCreating")), None),  # a sandbox failure shows only in events
        (pending(waiting("ErrImagePull")), ("ErrImagePull", "m", "image-pull")),
        (pending(waiting("ImagePullBackOff")), ("ImagePullBackOff", "m", "image-pull")),
        (
            pending(waiting("CreateContainerConfigError")),
            ("CreateContainerConfigError", "m", "start"),
        ),
        (pending(waiting("InvalidImageName")), ("InvalidImageName", "m", "final")),
        (
            pending(conditions=[condition("PodScheduled", "False", "Unschedulable")]),
            ("Unschedulable", "", "schedule"),
        ),
    ],
)
def test_pod_stalls_and_how_they_heal(
    pod: dict[str, Any], expected: tuple[str, str, str] | None
) -> None:
    stall = pod_stall(pod)
    assert (None if stall is None else (stall.reason, stall.message, stall.kind)) == expected


@pytest.mark.parametrize(
    ("message", "reason", "kind"),
    [
        (
            "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to start VM",
            "FailedCreatePodSandBox",
            "sandbox",
        ),
        (
            'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to create shim task: "CreateSandboxRequest is blocked by policy: "',
            "AgentPolicyDenied",
            "final",
        ),
        (
            "Failed to create pod sandbox: rpc error: code = Unknown desc = annotation io.katacontainers.config.hypervisor.kernel_params is not enabled",
            "FailedCreatePodSandBox",
            "final",
        ),
    ],
)
def test_sandbox_events_are_stalls_final_when_retrying_cannot_help(
    message: str, reason: str, kind: str
) -> None:
    event = {"reason": "FailedCreatePodSandBox", "type": "Warning", "message": message}
    stall = event_stall(event)
    assert stall is not None
    assert (stall.reason, stall.message, stall.kind) == (reason, message, kind)
    assert event_stall({**event, "reason": "BackOff"}) is None


def test_event_count_and_span_from_either_recorder() -> None:
    legacy = {
        "count": 7,
        "firstTimestamp": "2026-12-01T10:00:00Z",
        "lastTimestamp": "2026-12-01T10:01:30Z",
    }
    assert (event_count(legacy), events_span([legacy])) == (7, 90.0)
    series = {
        "eventTime": "2026-12-01T10:00:00.000000Z",
        "series": {"count": 3, "lastObservedTime": "2026-12-01T10:00:20.500000Z"},
    }
    assert (event_count(series), events_span([series])) == (3, 20.5)
    assert (event_count({}), events_span([{}])) == (1, 0.0)


def failed_pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "status": {"phase": "Failed", **status}}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (
            failed_pod(
                conditions=[
                    {
                        **condition("DisruptionTarget", "True", "TerminationByKubelet"),
                        "message": "low memory",
                    }
                ]
            ),
            ("TerminationByKubelet", "low memory", True, False),
        ),
        (
            failed_pod(
                reason="Evicted",
                message='Usage of EmptyDir volume "tmp" exceeds the limit "256Mi". ',
            ),
            ("Evicted", 'Usage of EmptyDir volume "tmp" exceeds the limit "256Mi". ', True, False),
        ),
        (
            failed_pod(
                containerStatuses=[
                    {
                        "name": "replay",
                        "state": {
                            "terminated": {
                                "exitCode": 128,
                                "reason": "StartError",
                                "message": "x: CreateContainerRequest is blocked by policy: y",
                            }
                        },
                    }
                ]
            ),
            ("AgentPolicyDenied", "x: CreateContainerRequest is blocked by policy: y", False, True),
        ),
        (
            failed_pod(
                containerStatuses=[
                    {
                        "name": "replay",
                        "state": {
                            "terminated": {
                                "exitCode": 128,
                                "reason": "StartError",
                                "message": "image pull failed",
                            }
                        },
                    }
                ]
            ),
            ("StartError", "image pull failed", False, False),
        ),
        (
            failed_pod(
                containerStatuses=[
                    {"name": "replay", "state": {"terminated": {"exitCode": 6, "reason": "Error"}}}
                ]
            ),
            ("exit code 6", "Error", False, False),
        ),
        ({"metadata": {"name": "p"}, "status": {"phase": "Running"}}, None),
    ],
)
def test_failed_pods_tell_what_the_attempt_was(
    pod: dict[str, Any], expected: tuple[str, str, bool, bool] | None
) -> None:
    failure = pod_failure(pod)
    assert (
        None
        if failure is None
        else (failure.reason, failure.message, failure.disruption, failure.final)
    ) == expected


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)


@given(st.one_of(JSON.map(json.dumps), st.text(max_size=200)))
def test_termination_messages_either_parse_exactly_or_fail_as_a_mismatch(text: str) -> None:
    failure = None
    try:
        report = read_termination_message(text, where="pod p")
    except EnvelopeMismatchError as exc:
        failure = str(exc)
    if failure is not None:
        assert failure.startswith("pod p: termination message")
        return
    data = json.loads(text)
    assert data["v"] == 1
    assert (report.run_id, report.envelope, report.result, report.corpus_checksum) == (
        data["runId"],
        data["envelope"],
        data["result"],
        data["corpusChecksum"],
    )


@given(
    st.fixed_dictionaries(
        {
            "v": st.just(1),
            "runId": st.text(max_size=10),
            "envelope": st.from_regex(r"^sha256:[0-9a-f]{64}$", fullmatch=True),
            "result": st.from_regex(r"^sha256:[0-9a-f]{64}$", fullmatch=True),
            "corpusChecksum": st.from_regex(r"^sha256:[0-9a-f]{64}$", fullmatch=True),
        }
    )
)
def test_well_formed_termination_messages_round_trip(data: dict[str, Any]) -> None:
    report = read_termination_message(json.dumps(data), where="pod p")
    assert report.envelope == data["envelope"]
    assert report.corpus_checksum == data["corpusChecksum"]
