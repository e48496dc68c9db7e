"""k8s/ overlays: render, validate strictly, match the golden files and the Job builder.

Regenerate the golden files (and check the diff before committing) with:
    ATTESTED_REPLAY_REGEN_GOLDEN=1 python -m pytest tests/k8s/test_manifests.py
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runner.errors import InputError
from runner.k8s.job import (
    ANNOTATION_SPEC_DIGEST,
    KATA_INIT_DATA,
    CorpusUrl,
    ReplaySpec,
    build_job,
)
from runner.k8s.kustomize import render
from runner.reference.initdata import init_data_annotation

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
GOLDEN = Path(__file__).parent / "golden"
OVERLAYS = ("snp", "coco-dev", "peer-pods")
#: Kubernetes minors whose schemas every object must satisfy (kubernetes-validate 1.37 bundles them).
VERSIONS = ("1.33", "1.34")
REGENERATE = os.environ.get("ATTESTED_REPLAY_REGEN_GOLDEN") == "1"


def rendered(overlay: str) -> list[dict[str, Any]]:
    return render(K8S / "overlays" / overlay)


def dump(resources: list[dict[str, Any]]) -> str:
    """Multi-document YAML with sorted keys: stable bytes for golden files."""
    return "".join(
        "---\n" + yaml.safe_dump(resource, sort_keys=True, default_flow_style=False)
        for resource in resources
    )


def by_kind(resources: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in resources if r["kind"] == kind]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_strictly(overlay: str, version: str) -> None:
    resources = rendered(overlay)
    assert [r["kind"] for r in resources] == [
        "Namespace",
        "ServiceAccount",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "NetworkPolicy",
        "Job",
    ]
    for resource in resources:
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
    init_data = (K8S / "overlays" / "snp" / "init-data.toml").read_bytes()
    return ReplaySpec(
        tenant="example",
        run_id="example-run",
        corpus=CorpusUrl("https://publish.example/corpora/example.tar.gz"),
        checksum="sha256:" + "0" * 64,
        image="registry.example/attested-replay@sha256:" + "0" * 64,
        overlay=overlay,  # type: ignore[arg-type]  # parametrised with the overlay names
        init_data_toml=init_data if overlay == "snp" else None,
    )


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
    text = yaml.safe_dump(build_job(example_spec("snp")), sort_keys=True)
    text = re.sub(r"app.kubernetes.io/version: .*", "app.kubernetes.io/version: VERSION", text)
    golden = GOLDEN / "builder-job-snp.yaml"
    if REGENERATE:
        golden.write_text(text)
    assert golden.read_text() == text


def test_snp_init_data_annotation_is_the_gzip_of_the_template() -> None:
    (job,) = by_kind(rendered("snp"), "Job")
    annotation = job["spec"]["template"]["metadata"]["annotations"][KATA_INIT_DATA]
    assert annotation == init_data_annotation((K8S / "overlays/snp/init-data.toml").read_bytes())


@pytest.mark.parametrize(
    ("overlay", "runtime_class", "evidence", "node_selector"),
    [
        ("snp", "kata-qemu-snp", "coco-aa", {"amd.feature.node.kubernetes.io/snp": "true"}),
        ("coco-dev", "kata-qemu-coco-dev", "simulated", None),
        ("peer-pods", "kata-remote", "coco-aa", None),
    ],
)
def test_overlay_runtime_settings(
    overlay: str, runtime_class: str, evidence: str, node_selector: dict[str, str] | None
) -> None:
    (job,) = by_kind(rendered(overlay), "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == runtime_class
    args = pod["containers"][0]["args"]
    assert args[args.index("--evidence") + 1] == evidence
    assert pod.get("nodeSelector") == node_selector
    kernel_params = job["spec"]["template"]["metadata"]["annotations"].get(
        "io.katacontainers.config.hypervisor.kernel_params"
    )
    expected = None if overlay == "coco-dev" else "agent.guest_components_rest_api=attestation"
    assert kernel_params == expected


def test_operator_role_is_least_privilege_and_job_identity_has_none() -> None:
    resources = rendered("snp")
    (role,) = by_kind(resources, "Role")
    assert role["rules"] == [
        {
            "apiGroups": ["batch"],
            "resources": ["jobs"],
            "verbs": ["create", "get", "list", "watch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
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


def test_network_policy_allows_only_dns_and_the_publication_endpoint() -> None:
    (policy,) = by_kind(rendered("snp"), "NetworkPolicy")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == []
    dns, publication = spec["egress"]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert publication == {
        "to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    (job,) = by_kind(rendered("snp"), "Job")
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()


# -- the renderer's subset fails closed --------------------------------------------------


def write(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: '1'\n"


def test_renderer_rejects_unknown_kustomization_fields(tmp_path: Path) -> None:
    write(
        tmp_path, {"kustomization.yaml": "resources: [c.yaml]\nimages: []\n", "c.yaml": CONFIGMAP}
    )
    with pytest.raises(
        InputError, match=r"fields not supported by this renderer: \['images'\]"
    ) as caught:
        render(tmp_path)
    assert type(caught.value) is InputError


def test_renderer_rejects_strategic_merge_patches(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "kustomization.yaml": "resources: [c.yaml]\npatches:\n- path: p.yaml\n  target: {kind: ConfigMap}\n",
            "c.yaml": CONFIGMAP,
            "p.yaml": "data:\n  a: '2'\n",
        },
    )
    with pytest.raises(InputError, match="only JSON 6902 patches") as caught:
        render(tmp_path)
    assert type(caught.value) is InputError


def test_renderer_json6902_operations_and_failed_test(tmp_path: Path) -> None:
    patch = (
        "- {op: test, path: /data/a, value: '1'}\n"
        "- {op: replace, path: /data/a, value: '2'}\n"
        "- {op: add, path: /data/b~1c, value: '3'}\n"
        "- {op: remove, path: /metadata/name}\n"
        "- {op: add, path: /metadata/name, value: d}\n"
    )
    write(
        tmp_path,
        {
            "kustomization.yaml": "resources: [c.yaml]\nnamespace: ns\nlabels:\n- pairs: {x: y}\n"
            "patches:\n- path: p.yaml\n  target: {kind: ConfigMap, name: c}\n",
            "c.yaml": CONFIGMAP,
            "p.yaml": patch,
        },
    )
    assert render(tmp_path) == [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "d", "namespace": "ns", "labels": {"x": "y"}},
            "data": {"a": "2", "b/c": "3"},
        }
    ]
    (tmp_path / "p.yaml").write_text("- {op: test, path: /data/a, value: '9'}\n")
    with pytest.raises(InputError, match="test at /data/a failed") as caught:
        render(tmp_path)
    assert type(caught.value) is InputError
    (tmp_path / "p.yaml").write_text("- {op: replace, path: /data/zz, value: '9'}\n")
    with pytest.raises(InputError, match="replace at /data/zz: no such member") as caught:
        render(tmp_path)
    assert type(caught.value) is InputError


def test_renderer_rejects_a_patch_that_matches_nothing(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "kustomization.yaml": "resources: [c.yaml]\npatches:\n- path: p.yaml\n  target: {kind: Job}\n",
            "c.yaml": CONFIGMAP,
            "p.yaml": "- {op: add, path: /x, value: 1}\n",
        },
    )
    with pytest.raises(InputError, match="matches no resource") as caught:
        render(tmp_path)
    assert type(caught.value) is InputError
