"""What the agent policy pins beyond one CreateContainerRequest (issue 28, "no loose fields"):
the order and number of containers, the signals, loopback addresses on the pod's interfaces,
and the IPv6 forms of the kubelet's service variables. Every check runs on each engine of
tests/coco/conftest.py through kata-agent's query protocol.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.coco.conftest import ENGINES
from tests.coco.requests import (
    NYDUS_PULL_LABELS,
    UPDATE_INTERFACE,
    UPDATE_ROUTES,
    ReplayPod,
    container_id,
    guest_pull_storage,
    start_pod,
)

ENGINE_NAMES = list(ENGINES)


def _started(policy: str, pod: ReplayPod, engine: str) -> Any:
    agent = ENGINES[engine](policy)
    start_pod(agent, pod)
    assert agent.allows("CreateContainerRequest", pod.replay())
    return agent


# -- containers: one pause, then one replay, each once ---------------------------------------


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_replay_container_is_created_once(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    agent = _started(snp_policy, snp_pod, engine)
    second = snp_pod.replay()
    other_id = container_id("second replay")
    second["container_id"] = second["exec_id"] = other_id
    second["OCI"]["Root"]["Path"] = f"/run/kata-containers/{other_id}/rootfs"
    second["storages"][0]["mount_point"] = second["OCI"]["Root"]["Path"]
    second["OCI"]["Linux"]["CgroupsPath"] = second["OCI"]["Linux"]["CgroupsPath"].replace(
        snp_pod.replay_id, other_id
    )
    # the same emptyDir storages as the running replay: it would share /tmp and /replay/out
    assert not agent.allows("CreateContainerRequest", second)
    assert not agent.allows("CreateContainerRequest", snp_pod.replay())  # the same id again
    assert agent.allows("RemoveContainerRequest", {"container_id": snp_pod.replay_id, "timeout": 0})
    assert not agent.allows("CreateContainerRequest", snp_pod.replay())  # nor after removal
    assert not agent.allows("CreateContainerRequest", snp_pod.pause())  # nor a second pause


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_replay_container_needs_the_pause_container_first(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    agent = ENGINES[engine](snp_policy)
    assert agent.allows("CreateSandboxRequest", snp_pod.create_sandbox())
    for request in [*snp_pod.sandbox_copies(), *snp_pod.replay_copies()]:
        assert agent.allows("CopyFileRequest", request)
    assert not agent.allows("CreateContainerRequest", snp_pod.replay())
    assert agent.allows("CreateContainerRequest", snp_pod.pause())
    assert agent.allows("CreateContainerRequest", snp_pod.replay())


# -- signals: what the kubelet's StopContainer sends -------------------------------------------


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_only_the_stop_signals_reach_only_this_pod_s_containers(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    agent = _started(snp_policy, snp_pod, engine)

    def signal(cid: str, number: int, exec_id: str = "") -> bool:
        request = {"container_id": cid, "exec_id": exec_id, "signal": number}
        return bool(agent.allows("SignalProcessRequest", request))

    replay, pause = snp_pod.replay_id, snp_pod.sandbox_id
    assert signal(replay, 15)
    assert signal(replay, 9)
    assert signal(replay, 15, exec_id=replay)
    assert signal(pause, 9)
    # SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGSTOP, SIGTSTP, SIGHUP, 0 (probe), 64
    assert [n for n in (2, 3, 10, 12, 18, 19, 20, 1, 0, 64) if signal(replay, n)] == []
    assert not signal(container_id("another"), 9)
    assert not signal(replay, 9, exec_id="e" * 64)
    assert not signal("", 9)


# -- network: nothing may reach the guest's loopback services ---------------------------------


def _interface(address: str, mask: str) -> dict[str, Any]:
    request: dict[str, Any] = copy.deepcopy(UPDATE_INTERFACE)
    request["interface"]["IPAddresses"].append({"family": 1, "address": address, "mask": mask})
    return request


def _route(dest: str, gateway: str = "", source: str = "") -> dict[str, Any]:
    request: dict[str, Any] = copy.deepcopy(UPDATE_ROUTES)
    request["routes"]["Routes"].append(
        {
            "dest": dest,
            "gateway": gateway,
            "device": "eth0",
            "source": source,
            "scope": 0,
            "family": 0,
            "flags": 0,
            "mtu": 0,
        }
    )
    return request


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_loopback_addresses_and_routes_on_the_pod_interface_are_denied(
    snp_policy: str, engine: str
) -> None:
    """The attestation agent's REST API on 127.0.0.1:8006 signs whatever it is asked."""
    agent = ENGINES[engine](snp_policy)
    assert agent.allows("UpdateInterfaceRequest", UPDATE_INTERFACE)
    assert agent.allows("UpdateInterfaceRequest", _interface("fd00:10:244:1::11", "64"))
    assert agent.allows("UpdateRoutesRequest", UPDATE_ROUTES)
    assert agent.allows("UpdateRoutesRequest", _route("10.96.0.0/12", gateway="10.244.1.1"))
    assert not agent.allows("UpdateInterfaceRequest", _interface("127.0.0.2", "8"))
    assert not agent.allows("UpdateInterfaceRequest", _interface("127.0.0.1", "32"))
    assert not agent.allows("UpdateInterfaceRequest", _interface("::1", "128"))
    assert not agent.allows("UpdateRoutesRequest", _route("127.0.0.0/8"))
    assert not agent.allows("UpdateRoutesRequest", _route("127.0.0.1/32"))
    assert not agent.allows("UpdateRoutesRequest", _route("::1/128"))
    assert not agent.allows("UpdateRoutesRequest", _route("10.0.0.0/8", gateway="127.0.0.1"))
    assert not agent.allows("UpdateRoutesRequest", _route("", source="127.0.0.1"))


# -- the kubelet's service variables on an IPv6 cluster ----------------------------------------

IPV6_SERVICE_ENV = (
    "KUBERNETES_SERVICE_PORT_HTTPS=443",
    "KUBERNETES_SERVICE_PORT=443",
    "KUBERNETES_PORT_443_TCP=tcp://[fd00:10:96::1]:443",
    "KUBERNETES_PORT_443_TCP_PROTO=tcp",
    "KUBERNETES_PORT_443_TCP_ADDR=fd00:10:96::1",
    "KUBERNETES_SERVICE_HOST=fd00:10:96::1",
    "KUBERNETES_PORT=tcp://[fd00:10:96::1]:443",
    "KUBERNETES_PORT_443_TCP_PORT=443",
)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_an_ipv6_cluster_s_service_variables_are_admitted(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    """kubelet pkg/kubelet/envvars/envvars.go: the ClusterIP as is, bracketed in the URLs."""
    request = snp_pod.replay()
    env = request["OCI"]["Process"]["Env"]
    kubelet_names = {entry.partition("=")[0] for entry in IPV6_SERVICE_ENV}
    env[:] = [e for e in env if e.partition("=")[0] not in kubelet_names] + list(IPV6_SERVICE_ENV)
    for wrong in (
        "KUBERNETES_PORT=tcp://fd00:10:96::1:443",  # unbracketed in a URL
        "KUBERNETES_SERVICE_HOST=[fd00:10:96::1]",  # bracketed outside one
        "KUBERNETES_PORT_443_TCP_ADDR=fd00::1/evil",
    ):
        name = wrong.partition("=")[0]
        mutated = copy.deepcopy(request)
        mutated["OCI"]["Process"]["Env"] = [
            wrong if e.partition("=")[0] == name else e for e in env
        ]
        denying = ENGINES[engine](snp_policy)
        start_pod(denying, snp_pod)
        assert not denying.allows("CreateContainerRequest", mutated), wrong
    agent = ENGINES[engine](snp_policy)
    start_pod(agent, snp_pod)
    assert agent.allows("CreateContainerRequest", request)


# -- runtime-rs: not supported, and refused rather than half admitted -------------------------


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_rust_runtime_s_cgroup_namespace_is_refused(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    """kata 4.1.0 runtime-rs ``amend_spec`` keeps a cgroup namespace (with an empty path) that
    the Go runtime's ``constrainGRPCSpec`` drops; docs/operator.md says runtime-rs classes are
    not supported, and the policy refuses the spec it would send."""
    agent = ENGINES[engine](snp_policy)
    start_pod(agent, snp_pod)
    request = snp_pod.replay()
    request["OCI"]["Linux"]["Namespaces"].append({"Type": "cgroup", "Path": ""})
    assert not agent.allows("CreateContainerRequest", request)
    assert agent.allows("CreateContainerRequest", snp_pod.replay())


# -- the guest-pull metadata of both pull paths ------------------------------------------------


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_guest_pull_metadata_of_either_pull_path_is_admitted_and_nothing_else(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    """nydus-snapshotter's guest pull adds its layer digest and proxy-mode labels before kata
    merges the annotations; experimental_force_guest_pull adds none. Other labels, or these
    with other values, are refused."""

    def verdict(labels: dict[str, str]) -> bool:
        agent = ENGINES[engine](snp_policy)
        start_pod(agent, snp_pod)
        request = snp_pod.replay()
        pull = request["storages"][0]
        request["storages"][0] = guest_pull_storage(
            request["container_id"], pull["source"], request["OCI"]["Annotations"], labels=labels
        )
        return bool(agent.allows("CreateContainerRequest", request))

    assert verdict(dict(NYDUS_PULL_LABELS))
    assert verdict({})
    digest = "containerd.io/snapshot/cri.layer-digest"
    proxy = "containerd.io/snapshot/nydus-proxy-mode"
    for labels in (
        {digest: "sha256:xyz"},
        {proxy: "false"},
        {"containerd.io/snapshot/cri.image-ref": "registry.example/other:latest"},
        {"containerd.io/snapshot/nydus-tarfs": "x"},
    ):
        assert not verdict(labels), labels
