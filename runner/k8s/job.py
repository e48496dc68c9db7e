"""Build the replay Job and its init-data: one pure function of a :class:`ReplaySpec`.

Everything that decides what runs inside the TEE is fixed here, so two submissions of the
same run produce byte-identical specs and the ``spec-digest`` annotation can tell an
idempotent retry (attach) from a conflicting second run under the same run ID (refuse).

:func:`build_replay` makes the pod spec, derives the Kata agent policy from that very pod spec
(:mod:`runner.coco.policy`), wraps it in init-data with the image policy and puts the init-data
into the pod template. ``submit``, ``submit --dry-run``, ``init-data`` and ``expected`` all call
it with the same run parameters, so the Job, its init-data and the HOST_DATA a tenant pins
cannot drift apart.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from attestation.contracts import (
    IDENTIFIER_RULES,
    MAX_MERGEABLE_SHARD_COUNT,
    MAX_SHARD_COUNT,
    NONCE_RULE,
    RUN_ID_PATTERN,
    TENANT_ID_PATTERN,
    is_nonce,
    is_run_id,
    is_sha256_digest,
    is_tenant_id,
    mergeable_shard_count_problem,
    sha256_digest,
)
from attestation.encoding.canonical import canonicalize
from runner.coco import kata
from runner.coco.policy import render_policy
from runner.errors import UsageError
from runner.publish.client import check_target
from runner.reference.initdata import InitData, check_pinned_image, render_initdata

Overlay = Literal["snp", "coco-dev", "peer-pods"]
EvidenceMode = Literal["coco-aa", "configfs-tsm", "sev-guest", "auto", "simulated"]

DOMAIN: Final = "attested-replay.dev"
ANNOTATION_SPEC_DIGEST: Final = f"{DOMAIN}/spec-digest"
ANNOTATION_RUN_ID: Final = f"{DOMAIN}/run-id"
ANNOTATION_TENANT: Final = f"{DOMAIN}/tenant"
ANNOTATION_CORPUS: Final = f"{DOMAIN}/corpus-checksum"
ANNOTATION_PUBLISH_URL: Final = f"{DOMAIN}/publish-url"
LABEL_TENANT: Final = f"{DOMAIN}/tenant"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "attested-replay"
#: Every Job this tool creates carries it; the tracker's one watch selects on it.
TRACKING_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
#: Pods carry the Job name in this label (set here on the pod template); the tracker and
#: the collector select a Job's pods by it.
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"

CONTAINER_NAME: Final = "replay"
OUT_DIR: Final = "/replay/out"
ENVELOPE_PATH: Final = f"{OUT_DIR}/envelope.json"
CORPUS_MOUNT: Final = "/replay/corpus"
PUBLISH_TOKEN_DIR: Final = "/var/run/secrets/attested-replay/publish"  # noqa: S105 - a path
PUBLISH_TOKEN_KEY: Final = "token"  # noqa: S105 - a Secret key name, not a secret
#: Where the pod finds the VCEK/ASK/ARK bundle for ``run --endorsement-bundle`` (Kata hosts
#: send no certificate table): key ``endorsement.pem`` of the operator's Secret.
ENDORSEMENT_DIR: Final = "/etc/attested-replay/endorsement"
ENDORSEMENT_KEY: Final = "endorsement.pem"
#: The Job's activeDeadlineSeconds unless the operator chooses another.
DEFAULT_ACTIVE_DEADLINE_SECONDS: Final = 7200
#: An unprivileged, numeric UID so runAsNonRoot can be checked without reading the image.
RUN_AS_UID: Final = 65532
#: The replay container's process (the image's entrypoint is this plus ``run``:
#: :func:`runner.image.build.image_config`): the image's interpreter in isolated mode. ``-I``
#: makes it ignore every ``PYTHON*`` variable and the user site directory, and keeps the working
#: directory (``/replay/out``, which the process writes) off ``sys.path``, so nothing in the
#: pod's environment or volumes can load code before ours; the agent policy pins these arguments
#: with the rest. ``-B`` and ``-u`` do what ``PYTHONDONTWRITEBYTECODE`` and ``PYTHONUNBUFFERED``
#: did before ``-I`` made them inert: no ``.pyc`` writes on the read-only root, and the log
#: reaches the kubelet line by line.
RUNNER_COMMAND: Final = ("/opt/attested-replay/bin/python", "-I", "-B", "-u", "-m", "runner")
#: The runner image's whole environment (``image build`` writes exactly these into its config).
#: The pod sets each one too, so the container's environment is this list whatever the image says,
#: and the agent policy pins it: a variable the host adds (PYTHONPATH, HTTPS_PROXY, LD_PRELOAD
#: ...) is refused. No ``PYTHON*`` variable: the isolated interpreter would ignore it.
RUNNER_ENV: Final = (
    ("PATH", "/opt/attested-replay/bin:/usr/local/bin:/usr/bin:/bin"),
    ("LANG", "C.UTF-8"),
    ("HOME", "/tmp"),  # noqa: S108 - paths in the container's /tmp emptyDir
    ("TMPDIR", "/tmp"),  # noqa: S108 - paths in the container's /tmp emptyDir
    ("XDG_CACHE_HOME", "/tmp/.cache"),  # noqa: S108 - paths in the container's /tmp emptyDir
    ("ATTESTED_REPLAY_STATE_DIR", "/tmp/attested-replay"),  # noqa: S108 - paths in the container's /tmp emptyDir
)

#: Runner exit codes (runner.exit_codes) that mean "the same input fails the same way":
#: input 1, checksum 2, evidence unavailable 3, verification 4, usage 9. Retrying them
#: would only boot more TEEs. Publication failures (6) and crashes of the process (signals,
#: OOM kills) are retried; an unexpected exception inside the runner also exits 9 (the
#: runner's usage/internal code), so it fails the Job rather than repeating the same bug.
DETERMINISTIC_EXIT_CODES: Final = (1, 2, 3, 4, 9)

#: emptyDir sizing. The replay's scratch space (/tmp: corpus download and unpacking, the
#: simulated PKI) and its output (/replay/out: envelope and result) need this much data.
DEFAULT_SCRATCH_SIZE: Final = "2Gi"
OUT_DATA_SIZE: Final = "64Mi"
#: Under CoCo from kata 3.28 (``emptydir_mode = "block-encrypted"``) each emptyDir is a sparse
#: ``disk.img`` inside the host emptyDir, sized to the whole host filesystem, and the ext4
#: metadata written into it (about 0.08 % of that size, plus encryption and integrity metadata)
#: counts against ``sizeLimit`` before the replay writes a byte (kata ``docs/Limitations.md``
#: "Block-backed Kubernetes emptyDir volumes"; ``container.go`` ``setupEphemeralDisk``). So each
#: ``sizeLimit`` is the data it must hold plus 0.09 % of the kubelet filesystem's size, which
#: the operator states (the node's ``status.capacity.ephemeral-storage``).
DEFAULT_NODE_DISK: Final = "4Ti"
EMPTYDIR_METADATA_PER_100K: Final = 90
_QUANTITY = re.compile(r"^([1-9][0-9]{0,6})(Mi|Gi|Ti)$")
_QUANTITY_UNITS: Final = {"Mi": 2**20, "Gi": 2**30, "Ti": 2**40}

KATA_KERNEL_PARAMS: Final = "io.katacontainers.config.hypervisor.kernel_params"
KATA_INIT_DATA: Final = "io.katacontainers.config.hypervisor.cc_init_data"
#: Turns on the attestation-agent REST API inside the guest (it changes MEASUREMENT).
AA_REST_KERNEL_PARAMS: Final = "agent.guest_components_rest_api=attestation"


@dataclass(frozen=True, slots=True)
class OverlayProfile:
    """What an overlay fixes: runtime class, evidence provider, annotations.

    ``aa_rest_api`` adds the kernel_params annotation that turns the agent's /aa/* endpoints on
    (kata-qemu-snp and -coco-dev list ``kernel_params`` in ``enable_annotations``). Peer pods
    must not carry it: configuration-remote.toml does not enable it, so the shim would refuse the
    sandbox, and the pod VM already serves every feature. No overlay selects nodes itself:
    kata-deploy's RuntimeClass adds the NFD SNP label when NFD is installed.
    """

    runtime_class: str
    evidence: EvidenceMode
    aa_rest_api: bool = False


OVERLAYS: Final[dict[str, OverlayProfile]] = {
    "snp": OverlayProfile(runtime_class="kata-qemu-snp", evidence="coco-aa", aa_rest_api=True),
    "coco-dev": OverlayProfile(runtime_class="kata-qemu-coco-dev", evidence="simulated"),
    # Peer pods: the cloud launches the pod VM, so its SNP HOST_DATA is never the init-data
    # digest; the pod VM image extends it into vTPM PCR 8, which az-snp-vtpm evidence proves
    # (expected --overlay peer-pods pins initDataDigest instead of hostData).
    "peer-pods": OverlayProfile(runtime_class="kata-remote", evidence="coco-aa"),
}


_MEMORY = re.compile(r"^[1-9][0-9]{0,5}(Mi|Gi)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_RUNTIME_CLASS = _DNS_SUBDOMAIN
_CLAIM_PATH = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")

#: A Job name leaves room for what the Job controller appends for an Indexed Job: the pod
#: hostname ``<job>-<index>`` must be a DNS label (<= 63, checked by the API server at create:
#: ``pkg/apis/batch/validation`` ``ValidateJob``) and the pod generateName ``<job>-<index>-``
#: must fit the 58 characters the name generator keeps (``podGenerateNameWithIndex``), so the
#: pod names stay predictable for the agent policy. With at most 3 index digits: 53. Sharded
#: or not, a run ID keeps one name, so one run ID stays one Job.
MAX_NAME: Final = 58 - len(f"-{MAX_SHARD_COUNT - 1}-")
_HASH_CHARS: Final = 10


def quantity_bytes(text: str, *, what: str) -> int:
    """Bytes of a binary quantity such as ``2Gi`` (Mi, Gi or Ti only: exact and unambiguous)."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise UsageError(f"{what} {text!r}: must look like 512Mi, 2Gi or 4Ti")
    return int(match.group(1)) * _QUANTITY_UNITS[match.group(2)]


def emptydir_size_limit(data: str, node_disk: str) -> str:
    """``sizeLimit`` for an emptyDir holding ``data`` on a node whose kubelet filesystem is
    ``node_disk``: the data plus the block-encrypted emptyDir's metadata allowance, in Mi."""
    metadata = -(
        -quantity_bytes(node_disk, what="node disk") * EMPTYDIR_METADATA_PER_100K // 100_000
    )
    total = quantity_bytes(data, what="emptyDir data") + metadata
    return f"{-(-total // 2**20)}Mi"


def job_name(tenant: str, run_id: str) -> str:
    """``<tenant>-<run id, sanitised>-<10 hex of sha256(tenant/run_id)>``, at most
    :data:`MAX_NAME` chars.

    The hash is always present: sanitising (``A.b`` and ``a-b``) and joining (tenant ``a-b``
    run ``c`` versus tenant ``a`` run ``b-c``) both lose information, so the readable part
    alone could map two runs to one Job. The readable part is truncated to fit.
    """
    _check_tenant(tenant)
    _check_run_id(run_id)
    suffix = hashlib.sha256(f"{tenant}/{run_id}".encode()).hexdigest()[:_HASH_CHARS]
    readable = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", f"{tenant}-{run_id}".lower()))
    readable = readable[: MAX_NAME - _HASH_CHARS - 1].strip("-")
    return f"{readable}-{suffix}"


@dataclass(frozen=True, slots=True)
class CorpusUrl:
    """An ``https://`` URL of the corpus ``.tar.gz``; the pod fetches and re-verifies it."""

    url: str

    def __post_init__(self) -> None:
        if not self.url.startswith("https://") or any(c.isspace() for c in self.url):
            raise UsageError(f"corpus URL must be an https:// URL, got {self.url!r}")


@dataclass(frozen=True, slots=True)
class CorpusVolume:
    """A corpus directory at ``path`` inside PersistentVolumeClaim ``claim`` (mounted read-only)."""

    claim: str
    path: str

    def __post_init__(self) -> None:
        if not _DNS_SUBDOMAIN.fullmatch(self.claim):
            raise UsageError(f"corpus claim {self.claim!r} is not a valid PVC name")
        if not _CLAIM_PATH.fullmatch(self.path) or ".." in self.path.split("/"):
            raise UsageError(
                f"corpus path {self.path!r} must be a relative path inside the claim "
                "(letters, digits, '.', '_', '-', separated by '/', no '..')"
            )


CorpusSource = CorpusUrl | CorpusVolume


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """Everything that defines one replay Job. Validates on construction."""

    tenant: str
    run_id: str
    corpus: CorpusSource
    checksum: str
    image: str
    overlay: Overlay
    namespace: str = "attested-replay"
    runtime_class: str | None = None
    cpu: int = 2
    memory: str = "4Gi"
    backoff_limit: int = 2
    active_deadline_seconds: int = DEFAULT_ACTIVE_DEADLINE_SECONDS
    ttl_seconds_after_finished: int = 86400
    publish_url: str | None = None
    publish_token_secret: str | None = None
    endorsement_secret: str | None = None
    service_account: str = "attested-replay-job"
    #: Split the replay into this many shards: one Indexed Job, one pod (one TEE) per index.
    #: None: an ordinary one-pod Job (whose spec, init-data and HOST_DATA are unchanged).
    shards: int | None = None
    #: How many indices run at once (default: all of them). Not part of the pod or its policy.
    parallelism: int | None = None
    #: The tenant's nonce, bound into REPORT_DATA (``run --nonce``): its freshness pin.
    nonce: str | None = None
    #: Data the /tmp emptyDir must hold (the corpus download and its unpacked copy).
    scratch_size: str = DEFAULT_SCRATCH_SIZE
    #: Size of the kubelet filesystem on the replay nodes (block-encrypted emptyDir overhead).
    node_disk: str = DEFAULT_NODE_DISK

    def __post_init__(self) -> None:
        _check_tenant(self.tenant)
        _check_run_id(self.run_id)
        if self.overlay not in OVERLAYS:
            raise UsageError(f"--overlay {self.overlay!r}: choose one of {sorted(OVERLAYS)}")
        if not is_sha256_digest(self.checksum):
            raise UsageError(
                f"--checksum {self.checksum!r}: must be 'sha256:' followed by 64 lowercase hex "
                "digits"
            )
        check_pinned_image(self.image)
        if not _DNS_LABEL.fullmatch(self.namespace):
            raise UsageError(f"--namespace {self.namespace!r}: is not a DNS-1123 label")
        if self.runtime_class is not None and not _RUNTIME_CLASS.fullmatch(self.runtime_class):
            raise UsageError(f"--runtime-class {self.runtime_class!r}: is not a valid name")
        if self.nonce is not None and not is_nonce(self.nonce):
            raise UsageError(f"--nonce {self.nonce[:80]!r}: must be {NONCE_RULE}")
        if type(self.cpu) is not int or not 1 <= self.cpu <= 64:
            raise UsageError(
                f"--cpu {self.cpu!r}: must be a whole number of vCPUs from 1 to 64 "
                "(the vCPU count is part of the SNP launch measurement)"
            )
        if not _MEMORY.fullmatch(self.memory):
            raise UsageError(f"--memory {self.memory!r}: must look like 4Gi or 512Mi")
        if quantity_bytes(self.memory, what="--memory") < kata.MIN_MEMORY_LIMIT:
            raise UsageError(
                f"--memory {self.memory!r}: must be at least "
                f"{kata.MIN_MEMORY_LIMIT // 1024**2}Mi (the agent policy's floor)"
            )
        quantity_bytes(self.scratch_size, what="--scratch-size")
        quantity_bytes(self.node_disk, what="--node-disk")
        for option, value, low in (
            ("--backoff-limit", self.backoff_limit, 0),
            ("--active-deadline", self.active_deadline_seconds, 1),
            ("--ttl", self.ttl_seconds_after_finished, 0),
        ):
            if type(value) is not int or value < low:
                raise UsageError(f"{option} {value!r}: must be an integer >= {low}")
        if self.publish_url is not None:
            if not self.publish_url.startswith(("https://", "http://")):
                raise UsageError(f"--publish-url {self.publish_url!r}: must be http(s)://")
            # The pod's publisher would refuse these only after the whole replay, with an
            # exit code the podFailurePolicy treats as final: refuse them before submitting.
            check_target(self.publish_url)
            if self.publish_token_secret is None:
                raise UsageError(
                    "--publish-url needs --publish-token-secret (a Secret with key 'token' "
                    "holding an operator token): the publication service refuses anonymous "
                    "writes, so the pod could not publish"
                )
        if self.publish_token_secret is not None:
            if self.publish_url is None:
                raise UsageError("--publish-token-secret needs --publish-url")
            if not _DNS_SUBDOMAIN.fullmatch(self.publish_token_secret):
                raise UsageError(
                    f"--publish-token-secret {self.publish_token_secret!r}: not a Secret name"
                )
        if self.endorsement_secret is not None:
            if not _DNS_SUBDOMAIN.fullmatch(self.endorsement_secret):
                raise UsageError(
                    f"--endorsement-secret {self.endorsement_secret!r}: not a Secret name"
                )
            if OVERLAYS[self.overlay].evidence != "coco-aa":
                raise UsageError(
                    f"--endorsement-secret is for SEV-SNP evidence from the attestation agent; "
                    f"the {self.overlay} overlay's evidence is {OVERLAYS[self.overlay].evidence}"
                )
        if self.shards is not None:
            if type(self.shards) is not int:
                raise UsageError(
                    f"--shards {self.shards!r}: must be a whole number from 1 to "
                    f"{MAX_MERGEABLE_SHARD_COUNT}"
                )
            # Before anything is created: a split whose shards could not merge is refused
            # here, not after every shard has run.
            problem = mergeable_shard_count_problem(self.shards, "--shards")
            if problem is not None:
                raise UsageError(problem)
        if self.parallelism is not None:
            if self.shards is None:
                raise UsageError("--parallelism needs --shards (an unsharded Job runs one pod)")
            if type(self.parallelism) is not int or not 1 <= self.parallelism <= self.shards:
                raise UsageError(
                    f"--parallelism {self.parallelism!r}: must be a whole number from 1 to the "
                    f"{self.shards} shards"
                )

    @property
    def profile(self) -> OverlayProfile:
        return OVERLAYS[self.overlay]

    @property
    def image_digest(self) -> str:
        """The ``sha256:<hex>`` part of the digest-pinned image reference."""
        return self.image.rpartition("@")[2]

    @property
    def name(self) -> str:
        return job_name(self.tenant, self.run_id)


def spec_digest(job_spec: dict[str, Any]) -> str:
    """``sha256:`` of the RFC 8785 canonical JSON of a Job's ``spec``."""
    return sha256_digest(canonicalize(job_spec))


@dataclass(frozen=True, slots=True)
class BuiltReplay:
    """A replay Job (wire form) and the init-data its pod template carries."""

    job: dict[str, Any]
    init_data: InitData


def build_job(spec: ReplaySpec) -> dict[str, Any]:
    """The batch/v1 Job for ``spec`` in wire form (camelCase keys)."""
    return build_replay(spec).job


def build_replay(spec: ReplaySpec) -> BuiltReplay:
    """The Job for ``spec`` and its init-data, whose agent policy admits exactly its pod."""
    name = spec.name
    profile = spec.profile
    pod_spec = _pod_spec(spec, profile)
    init_data = render_initdata(
        image=spec.image,
        policy_rego=render_policy(pod_spec, job_name=name, shard_count=spec.shards),
    )
    pod_annotations = {KATA_INIT_DATA: init_data.annotation_value}
    if profile.aa_rest_api:
        pod_annotations[KATA_KERNEL_PARAMS] = AA_REST_KERNEL_PARAMS
    pod_labels = {
        "app.kubernetes.io/name": "attested-replay",
        INSTANCE_LABEL: name,
        "app.kubernetes.io/component": "replay",
        "app.kubernetes.io/part-of": "attested-replay",
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TENANT: spec.tenant,
    }
    job_spec: dict[str, Any] = {
        **_completion(spec),
        "activeDeadlineSeconds": spec.active_deadline_seconds,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                {
                    # Sharded: the index fails (no retry of the same failure), and with
                    # maxFailedIndexes 0 the Job with it, stopping the other TEEs.
                    "action": "FailJob" if spec.shards is None else "FailIndex",
                    "onExitCodes": {
                        "containerName": CONTAINER_NAME,
                        "operator": "In",
                        "values": list(DETERMINISTIC_EXIT_CODES),
                    },
                },
                # Disruptions (preemption, node-pressure and API evictions, taint-based
                # deletion) count against backoffLimit like any failed attempt: each attempt is
                # a new confidential VM, and only counting bounds them without a client
                # watching. (Ignore would retry them until the deadline; kubelet local-storage
                # evictions carry no DisruptionTarget and count anyway.)
                {
                    "action": "Count",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
            ]
        },
        "template": {
            "metadata": {"labels": pod_labels, "annotations": pod_annotations},
            "spec": pod_spec,
        },
    }
    annotations = {
        ANNOTATION_RUN_ID: spec.run_id,
        ANNOTATION_TENANT: spec.tenant,
        ANNOTATION_CORPUS: spec.checksum,
        ANNOTATION_SPEC_DIGEST: spec_digest(job_spec),
    }
    if spec.publish_url is not None:
        annotations[ANNOTATION_PUBLISH_URL] = spec.publish_url
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            "labels": {**pod_labels, "app.kubernetes.io/version": _version()},
            "annotations": annotations,
        },
        "spec": job_spec,
    }
    return BuiltReplay(job, init_data)


def _completion(spec: ReplaySpec) -> dict[str, Any]:
    """How many pods, and the retry budget: one pod, or one Indexed pod per shard.

    Sharded (an Indexed Job, Kubernetes >= 1.29 with the gates on by default, GA 1.33):
    ``backoffLimitPerIndex`` gives every index the retries an unsharded run gets, and
    ``maxFailedIndexes: 0`` fails the Job as soon as one index fails for good (a merge needs
    every shard, so the other TEEs are stopped). ``backoffLimit`` is left to the server's
    default for per-index Jobs (MaxInt32): the per-index limits bound the pods.
    """
    if spec.shards is None:
        return {"backoffLimit": spec.backoff_limit, "completions": 1, "parallelism": 1}
    return {
        "completionMode": "Indexed",
        "completions": spec.shards,
        "parallelism": spec.parallelism or spec.shards,
        "backoffLimitPerIndex": spec.backoff_limit,
        "maxFailedIndexes": 0,
    }


def _pod_spec(spec: ReplaySpec, profile: OverlayProfile) -> dict[str, Any]:
    args = [
        "run",
        "--corpus",
        spec.corpus.url
        if isinstance(spec.corpus, CorpusUrl)
        else f"{CORPUS_MOUNT}/{spec.corpus.path}",
        "--run-id",
        spec.run_id,
        "--tenant",
        spec.tenant,
        "--evidence",
        profile.evidence,
        "--out",
        ENVELOPE_PATH,
        "--expect-checksum",
        spec.checksum,
        # Bound into REPORT_DATA so the envelope names the image the Job pinned; the TEE
        # cannot see its own image digest (init-data's image policy is what enforces it).
        "--image-digest",
        spec.image_digest,
        "--termination-log",
        "/dev/termination-log",
        "--frame-envelope",
    ]
    if spec.nonce is not None:
        args += ["--nonce", spec.nonce]
    if spec.shards is not None:
        # The same for every index: each pod's index is JOB_COMPLETION_INDEX, which the Job
        # controller adds to the container (the agent policy admits exactly 0..shards-1).
        args += ["--shard-count", str(spec.shards)]
    volumes: list[dict[str, Any]] = [
        {
            "name": "out",
            "emptyDir": {"sizeLimit": emptydir_size_limit(OUT_DATA_SIZE, spec.node_disk)},
        },
        {
            "name": "tmp",
            "emptyDir": {"sizeLimit": emptydir_size_limit(spec.scratch_size, spec.node_disk)},
        },
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "out", "mountPath": OUT_DIR},
        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - the pod's own emptyDir
    ]
    if isinstance(spec.corpus, CorpusVolume):
        volumes.append(
            {
                "name": "corpus",
                "persistentVolumeClaim": {"claimName": spec.corpus.claim, "readOnly": True},
            }
        )
        mounts.append({"name": "corpus", "mountPath": CORPUS_MOUNT, "readOnly": True})
    if spec.publish_url is not None:
        args += ["--publish", spec.publish_url]
        if spec.publish_token_secret is not None:
            args += ["--publish-token-file", f"{PUBLISH_TOKEN_DIR}/{PUBLISH_TOKEN_KEY}"]
            volumes.append(
                {
                    "name": "publish-token",
                    "secret": {"secretName": spec.publish_token_secret, "defaultMode": 0o440},
                }
            )
            mounts.append(
                {"name": "publish-token", "mountPath": PUBLISH_TOKEN_DIR, "readOnly": True}
            )
    if spec.endorsement_secret is not None:
        args += ["--endorsement-bundle", f"{ENDORSEMENT_DIR}/{ENDORSEMENT_KEY}"]
        volumes.append(
            {
                "name": "endorsement",
                "secret": {"secretName": spec.endorsement_secret, "defaultMode": 0o440},
            }
        )
        mounts.append({"name": "endorsement", "mountPath": ENDORSEMENT_DIR, "readOnly": True})
    quantity = {"cpu": str(spec.cpu), "memory": spec.memory}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "runtimeClassName": spec.runtime_class or profile.runtime_class,
        "serviceAccountName": spec.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_UID,
            "runAsGroup": RUN_AS_UID,
            "fsGroup": RUN_AS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": spec.image,
                "imagePullPolicy": "Always",
                "command": list(RUNNER_COMMAND),
                "args": args,
                "workingDir": OUT_DIR,
                "env": [{"name": name, "value": value} for name, value in RUNNER_ENV],
                "resources": {"requests": dict(quantity), "limits": dict(quantity)},
                "securityContext": {
                    "runAsNonRoot": True,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    return pod


def _version() -> str:
    from runner import __version__

    return __version__


def _check_tenant(tenant: str) -> None:
    if not is_tenant_id(tenant):
        raise UsageError(f"tenant {tenant!r}: must be {IDENTIFIER_RULES[TENANT_ID_PATTERN]}")


def _check_run_id(run_id: str) -> None:
    if not is_run_id(run_id):
        raise UsageError(f"run ID {run_id!r}: must be {IDENTIFIER_RULES[RUN_ID_PATTERN]}")
