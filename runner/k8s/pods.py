"""The pods of one run: the single pod listing of status, collect and the wait."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from attestation.tenant.http import RetryPolicy
from runner.k8s.job import INSTANCE_LABEL
from runner.k8s.retry import call, read_json


def list_run_pods(
    core: client.CoreV1Api, policy: RetryPolicy, namespace: str, name: str
) -> list[dict[str, Any]]:
    """Every pod of Job ``name`` (by its instance label), oldest first: one list call,
    retried while the failure is transient."""
    listing = read_json(
        call(
            policy,
            "list pods",
            core.list_namespaced_pod,
            namespace,
            label_selector=f"{INSTANCE_LABEL}={name}",
            _preload_content=False,
        )
    )
    pods: list[dict[str, Any]] = listing.get("items") or []
    pods.sort(key=lambda pod: str(pod["metadata"].get("creationTimestamp", "")))
    return pods
