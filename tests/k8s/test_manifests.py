"""k8s/: rendered by `kubectl kustomize`, validated strictly, equal to the golden files and to
the Job builder's output (init-data included).

Regenerate the golden files, the overlays' init-data and their patches (and review the diff
before committing) with:
    ATTESTED_REPLAY_REGEN_GOLDEN=1 python -m pytest tests/k8s/test_manifests.py
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runner.k8s.job import (
    AA_REST_KERNEL_PARAMS,
    ANNOTATION_SPEC_DIGEST,
    KATA_INIT_DATA,
    KATA_KERNEL_PARAMS,
    CorpusUrl,
    ReplaySpec,
    build_job,
    build_replay,
)
from runner.k8s.job import (
    OVERLAYS as PROFILES,
)
from runner.reference.initdata import init_data_annotation
from tests.k8s.kustomize import kustomize

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
GOLDEN = Path(__file__).parent / "golden"
OVERLAYS = ("snp", "coco-dev", "peer-pods")
ROOTS = ("base", *(f"overlays/{overlay}" for overlay in OVERLAYS))
#: Every Kubernetes minor docs/operator.md supports; kubernetes-validate bundles their schemas.
VERSIONS = ("1.31", "1.32", "1.33", "1.34")
REGENERATE = os.environ.get("ATTESTED_REPLAY_REGEN_GOLDEN") == "1"
#: kustomize's legacy kind order (kustomize api/resid/gvk.go orderFirst/orderLast).
KIND_ORDER = [
    "Namespace",
    "ServiceAccount",
    "ServiceAccount",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "Job",
    "NetworkPolicy",
]


def rendered(overlay: str) -> list[dict[str, Any]]:
    return kustomize(K8S / "overlays" / overlay)


def dump(resources: list[dict[str, Any]]) -> str:
    """Multi-document YAML with sorted keys: stable bytes for golden files."""
    return "".join(
        "---\n" + yaml.safe_dump(resource, sort_keys=True, default_flow_style=False)
        for resource in resources
    )


def by_kind(resources: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in resources if r["kind"] == kind]


@pytest.fixture(scope="module", params=ROOTS)
def root_objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return kustomize(K8S / request.param)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_object_validates_strictly(
    root_objects: list[dict[str, Any]], version: str
) -> None:
    assert [r["kind"] for r in root_objects] == KIND_ORDER
    for resource in root_objects:
        kubernetes_validate.validate(resource, version, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_overlays_match_the_golden_files(overlay: str) -> None:
    text = dump(rendered(overlay))
    golden = GOLDEN / f"{overlay}.yaml"
    if REGENERATE:
        golden.write_text(text)
    assert golden.read_text() == text, (
        f"{golden.name} drifted from k8s/; regenerate with ATTESTED_REPLAY_REGEN_GOLDEN=1"
    )


def example_spec(overlay: str) -> ReplaySpec:
    return ReplaySpec(
        tenant="example",
        run_id="example-run",
        corpus=CorpusUrl("https://publish.example/corpora/example.tar.gz"),
        checksum="sha256:" + "0" * 64,
        image="registry.example/attested-replay@sha256:" + "0" * 64,
        overlay=overlay,  # type: ignore[arg-type]  # parametrised with the overlay names
    )


PATCH_HEADERS = {
    "snp": "# AMD SEV-SNP nodes through the CoCo runtime class, evidence from the attestation agent.\n"
    "# The kernel_params annotation turns the agent's /aa/* endpoints on (it changes MEASUREMENT).\n",
    "coco-dev": "# CoCo without a TEE (kata-qemu-coco-dev): for testing the deployment; simulated evidence,\n"
    "# which no tenant verifier accepts as hardware evidence.\n",
    "peer-pods": "# Peer pods (cloud-api-adaptor, kata-remote): the pod VM serves the agent's REST API\n"
    "# already, and kernel_params is not an enabled annotation there (the shim would refuse it).\n"
    "# On Azure the agent answers with az-snp-vtpm evidence: init-data is pinned through PCR 8\n"
    "# (`expected --overlay peer-pods`, docs/operator.md section 9.3), not HOST_DATA.\n",
}
GENERATED_NOTE = (
    "# cc_init_data = base64(gzip(init-data.toml)): the agent policy in it admits only the example\n"
    "# run of ../../base/job.yaml. Generated with the Job builder; do not edit by hand:\n"
    "#   ATTESTED_REPLAY_REGEN_GOLDEN=1 python -m pytest tests/k8s/test_manifests.py\n"
)


def overlay_patch(overlay: str) -> str:
    """The overlay's JSON 6902 patch of the base Job, annotations from the builder."""
    built = build_replay(example_spec(overlay))
    template = built.job["spec"]["template"]
    ops = [
        {
            "op": "add",
            "path": "/spec/template/spec/runtimeClassName",
            "value": template["spec"]["runtimeClassName"],
        },
        {"op": "test", "path": "/spec/template/spec/containers/0/args/7", "value": "--evidence"},
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/0/args/8",
            "value": PROFILES[overlay].evidence,
        },
        {
            "op": "add",
            "path": "/spec/template/metadata/annotations",
            "value": template["metadata"]["annotations"],
        },
    ]
    body = yaml.safe_dump(ops, sort_keys=False, default_flow_style=False, width=1 << 20)
    return PATCH_HEADERS[overlay] + GENERATED_NOTE + body


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_patches_and_init_data_are_the_builders(overlay: str) -> None:
    directory = K8S / "overlays" / overlay
    init_data = build_replay(example_spec(overlay)).init_data
    if REGENERATE:
        (directory / "job-patch.yaml").write_text(overlay_patch(overlay))
        (directory / "init-data.toml").write_bytes(init_data.toml)
    assert (directory / "job-patch.yaml").read_text() == overlay_patch(overlay)
    assert (directory / "init-data.toml").read_bytes() == init_data.toml


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_job_is_exactly_the_builders_job(overlay: str) -> None:
    (job,) = by_kind(rendered(overlay), "Job")
    built = build_job(example_spec(overlay))
    assert job["spec"] == built["spec"]
    assert job["metadata"]["name"] == built["metadata"]["name"]
    assert job["metadata"]["labels"] == {
        k: v for k, v in built["metadata"]["labels"].items() if k != "app.kubernetes.io/version"
    }
    annotations = dict(built["metadata"]["annotations"])
    del annotations[ANNOTATION_SPEC_DIGEST]  # per submission; the submitter adds it
    assert job["metadata"]["annotations"] == annotations


def test_builder_job_golden() -> None:
    text = yaml.safe_dump(build_job(example_spec("snp")), sort_keys=True, width=1 << 20)
    text = re.sub(r"app.kubernetes.io/version: .*", "app.kubernetes.io/version: VERSION", text)
    golden = GOLDEN / "builder-job-snp.yaml"
    if REGENERATE:
        golden.write_text(text)
    assert golden.read_text() == text


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_init_data_annotation_is_the_gzip_of_the_overlays_init_data(overlay: str) -> None:
    (job,) = by_kind(rendered(overlay), "Job")
    annotation = job["spec"]["template"]["metadata"]["annotations"][KATA_INIT_DATA]
    toml = (K8S / "overlays" / overlay / "init-data.toml").read_bytes()
    assert annotation == init_data_annotation(toml)


@pytest.mark.parametrize(
    ("overlay", "runtime_class", "evidence", "kernel_params"),
    [
        ("snp", "kata-qemu-snp", "coco-aa", AA_REST_KERNEL_PARAMS),
        ("coco-dev", "kata-qemu-coco-dev", "simulated", None),
        ("peer-pods", "kata-remote", "coco-aa", None),
    ],
)
def test_overlay_runtime_settings(
    overlay: str, runtime_class: str, evidence: str, kernel_params: str | None
) -> None:
    (job,) = by_kind(rendered(overlay), "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == runtime_class
    args = pod["containers"][0]["args"]
    assert args[args.index("--evidence") + 1] == evidence
    assert "nodeSelector" not in pod  # NFD is optional: k8s/components/snp-node-label
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations.get(KATA_KERNEL_PARAMS) == kernel_params
    assert set(annotations) == {KATA_INIT_DATA} | ({KATA_KERNEL_PARAMS} if kernel_params else set())


def test_the_nfd_node_label_is_an_opt_in_component(tmp_path: Path) -> None:
    shutil.copytree(K8S, tmp_path / "k8s")  # kustomize only reads below the kustomization
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources:\n  - k8s/overlays/snp\ncomponents:\n  - k8s/components/snp-node-label\n"
    )
    objects = kustomize(tmp_path)
    (job,) = by_kind(objects, "Job")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        "amd.feature.node.kubernetes.io/snp": "true"
    }
    for version in VERSIONS:
        kubernetes_validate.validate(job, version, strict=True)


def test_operator_role_is_least_privilege_and_job_identity_has_none() -> None:
    resources = rendered("snp")
    (role,) = by_kind(resources, "Role")
    assert role["rules"] == [
        {
            "apiGroups": ["batch"],
            "resources": ["jobs"],
            "verbs": ["create", "get", "list", "watch", "delete"],
        },
        # status, collect and the wait list pods; nothing reads one pod by name
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        # sandbox failures are visible only as events (the pod just says ContainerCreating)
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get", "update"]},
    ]
    (binding,) = by_kind(resources, "RoleBinding")
    subjects = {(s["kind"], s["name"]) for s in binding["subjects"]}
    assert subjects == {
        ("ServiceAccount", "attested-replay-operator"),
        ("Group", "attested-replay:operators"),
    }
    (cluster_role,) = by_kind(resources, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["get"]}
    ]
    (cluster_binding,) = by_kind(resources, "ClusterRoleBinding")
    assert {(s["kind"], s["name"]) for s in cluster_binding["subjects"]} == subjects
    assert "namespace" not in cluster_role["metadata"]
    for account in by_kind(resources, "ServiceAccount"):
        assert account["automountServiceAccountToken"] is False
    (job,) = by_kind(resources, "Job")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "attested-replay-job"
    assert ("ServiceAccount", "attested-replay-job") not in subjects


def test_network_policy_allows_only_dns_the_publication_endpoint_and_the_registry() -> None:
    (policy,) = by_kind(rendered("snp"), "NetworkPolicy")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == []
    dns, publication, registry = spec["egress"]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert publication == {
        "to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    assert registry == {
        "to": [{"ipBlock": {"cidr": "198.51.100.0/24"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    (job,) = by_kind(rendered("snp"), "Job")
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_namespace_enforces_warns_and_audits_the_restricted_standard(overlay: str) -> None:
    # enforce alone judges pods, never a Job's template: warn makes the create of a Job whose
    # template breaks the standard answer with a Warning that submit logs.
    (namespace,) = by_kind(rendered(overlay), "Namespace")
    labels = namespace["metadata"]["labels"]
    assert {key: value for key, value in labels.items() if key.startswith("pod-security.")} == {
        f"pod-security.kubernetes.io/{mode}{suffix}": value
        for mode in ("enforce", "warn", "audit")
        for suffix, value in (("", "restricted"), ("-version", "latest"))
    }
