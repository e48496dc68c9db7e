"""Find the cluster the way kubectl does: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from runner.errors import UsageError

IN_CLUSTER_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True)
class ClusterConnection:
    api_client: client.ApiClient
    #: The namespace of the kubeconfig context (or the pod's), if any.
    namespace: str | None
    source: str


def connect(kubeconfig: str | None = None, context: str | None = None) -> ClusterConnection:
    """An ``ApiClient`` for the first configuration kubectl would use.

    ``$KUBECONFIG`` may list several files (``os.pathsep``); the client merges them as
    kubectl does. In-cluster configuration is used only when no kubeconfig exists.
    """
    source = kubeconfig or os.environ.get("KUBECONFIG") or ""
    if kubeconfig is None and source:
        # Like kubectl, files of $KUBECONFIG that do not exist are skipped; none at all is a
        # typo, said in the user's words (the client would call it an invalid file).
        listed = [Path(part).expanduser() for part in source.split(os.pathsep) if part]
        if not any(path.is_file() for path in listed):
            raise UsageError(f"$KUBECONFIG {source}: no such file")
    if not source:
        default = Path.home() / ".kube" / "config"
        source = str(default) if default.is_file() else ""
    if source:
        try:
            api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]  # untyped library
                config_file=source, context=context
            )
            contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]  # untyped
                config_file=source
            )
        except (ConfigException, OSError, ValueError) as exc:
            raise UsageError(f"kubeconfig {source}: {exc}") from exc
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        namespace = (chosen or {}).get("context", {}).get("namespace")
        return ClusterConnection(api_client, namespace, f"kubeconfig {source}")
    if context:
        raise UsageError(f"--context {context} given but no kubeconfig was found")
    configuration = client.Configuration()
    try:
        config.load_incluster_config(  # type: ignore[no-untyped-call]  # untyped library
            client_configuration=configuration
        )
    except ConfigException as exc:
        raise UsageError(
            "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, create "
            f"~/.kube/config or run inside a cluster ({exc})"
        ) from exc
    namespace = None
    if IN_CLUSTER_NAMESPACE_FILE.is_file():
        namespace = IN_CLUSTER_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or None
    return ClusterConnection(client.ApiClient(configuration), namespace, "in-cluster")
