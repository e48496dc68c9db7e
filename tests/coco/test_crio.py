"""The agent policy under CRI-O: the pod runs, and what CRI-O states about it is pinned.

CRI-O (v1.37.0) writes its own annotations instead of containerd's, copies every pod annotation
and the kubelet's labels into the spec, sets ``container=crio``, binds resolv.conf, hostname and
``/run/.containerenv`` with ``bind`` and names the cgroup ``<slice>:crio:<id>``
(tests/coco/requests.py ``ReplayPod._to_crio``); kata 4.1.0 pulls the image CRI-O names in
``io.kubernetes.cri-o.ImageName`` and puts every annotation into the guest-pull metadata. Every
check runs on each engine of tests/coco/conftest.py through kata-agent's query protocol.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from runner.k8s.job import BuiltReplay, build_replay
from tests.coco.conftest import ENGINES, policy_of, replay_spec
from tests.coco.requests import ReplayPod, container_id, guest_pull_storage, start_pod

Request = dict[str, Any]
OTHER_IMAGE = "registry.example/attested-replay@sha256:" + "cd" * 32


def _crio_pod(built: BuiltReplay, index: int | None = None) -> ReplayPod:
    return ReplayPod(built.job, runtime="cri-o", index=index)


def _annotations(changes: Mapping[str, str | None]) -> Callable[[Request], None]:
    """Annotations changed (None: removed) as CRI-O would hand them to kata, which merges them
    into the guest-pull metadata and pulls the image their ImageName names."""

    def mutate(request: Request) -> None:
        annotations = request["OCI"]["Annotations"]
        for key, value in changes.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        pull = request["storages"][0]
        source = pull["source"]
        if annotations.get("io.kubernetes.cri-o.ContainerType") == "container":
            source = annotations.get("io.kubernetes.cri-o.ImageName", source)
        request["storages"][0] = guest_pull_storage(request["container_id"], source, annotations)

    return mutate


@pytest.mark.parametrize("emptydir_mode", ["block", "local"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_crio_pod_runs_from_start_to_end(
    snp: BuiltReplay, engine: str, emptydir_mode: str
) -> None:
    pod = _crio_pod(snp)
    replay = pod.replay(emptydir_mode)  # type: ignore[arg-type]
    annotations = replay["OCI"]["Annotations"]
    assert not [key for key in annotations if key.startswith("io.kubernetes.cri.")]
    assert annotations["io.kubernetes.cri-o.ContainerType"] == "container"
    assert {"container=crio", "TERM=xterm"} <= set(replay["OCI"]["Process"]["Env"])
    agent = ENGINES[engine](policy_of(snp))
    start_pod(agent, pod)
    assert agent.allows("CreateContainerRequest", replay)
    for name, request in pod.lifecycle():
        assert agent.allows(name, request), name
    assert agent.data["pstate"]["sandbox-name"] == pod.pod_name
    assert agent.data["pstate"]["hostname"] == pod.hostname


@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_index_of_a_sharded_job_runs_under_crio(engine: str) -> None:
    sharded = build_replay(replay_spec(shards=3, publish_url=None, publish_token_secret=None))
    for index in range(3):
        agent = ENGINES[engine](policy_of(sharded))
        pod = _crio_pod(sharded, index)
        start_pod(agent, pod)
        assert agent.allows("CreateContainerRequest", pod.replay())


def _replay_mutations(pod: ReplayPod) -> dict[str, Callable[[Request], None]]:
    other_pod = f"{pod.pod_name[:-5]}zzzzz"
    mutations: dict[str, Callable[[Request], None]] = {
        "says sandbox": _annotations({"io.kubernetes.cri-o.ContainerType": "sandbox"}),
        "no container type": _annotations({"io.kubernetes.cri-o.ContainerType": None}),
        "containerd's type too": _annotations({"io.kubernetes.cri.container-type": "container"}),
        "pulls another image": _annotations({"io.kubernetes.cri-o.ImageName": OTHER_IMAGE}),
        "asked for another image": _annotations({"io.kubernetes.cri-o.Image": OTHER_IMAGE}),
        "no requested image": _annotations({"io.kubernetes.cri-o.Image": None}),
        "another container name": _annotations({"io.kubernetes.container.name": "sidecar"}),
        "no container name": _annotations({"io.kubernetes.container.name": None}),
        "another pod": _annotations({"io.kubernetes.pod.name": other_pod}),
        "another container id": _annotations(
            {"io.kubernetes.cri-o.ContainerID": container_id("other")}
        ),
        "another sandbox": _annotations({"io.kubernetes.cri-o.SandboxID": container_id("other")}),
        "a terminal": _annotations({"io.kubernetes.cri-o.TTY": "true"}),
        "stdin": _annotations({"io.kubernetes.cri-o.Stdin": "true"}),
        "stdin once": _annotations({"io.kubernetes.cri-o.StdinOnce": "true"}),
        "another manager": _annotations({"io.container.manager": "libpod"}),
        "termination message elsewhere": _annotations(
            {"io.kubernetes.container.terminationMessagePath": "/etc/hosts"}
        ),
        "kata type sandbox": _annotations(
            {"io.katacontainers.pkg.oci.container_type": "pod_sandbox"}
        ),
    }
    # Keys of namespaces CRI-O, kata, the CDI, OCI image spec, containers or systemd act on.
    for key in (
        "io.kubernetes.cri-o.Devices",
        "io.kubernetes.cri-o.Spoofed",
        "io.kubernetes.cri-o.UnifiedCgroup.replay",
        "userns-mode.crio.io",
        "unified-cgroup.crio.io/replay",
        "spoofed.crio.io",
        "cdi.k8s.io/vfio0",
        "org.opencontainers.image.stopSignal",
        "io.containers.trace-syscall",
        "org.systemd.property.KillSignal",
        "io.kubernetes.cri.sandbox-name",
        "io.kubernetes.container.preStopHandler",
        "nvidia.com/gpu",
        "not a key",
    ):
        mutations[f"key {key}"] = _annotations({key: "x"})
    mutations["container=crio twice"] = lambda r: r["OCI"]["Process"]["Env"].append(
        "container=crio"
    )
    mutations["TERM twice"] = lambda r: r["OCI"]["Process"]["Env"].append("TERM=xterm")
    mutations["TERM=dumb"] = lambda r: r["OCI"]["Process"]["Env"].__setitem__(
        r["OCI"]["Process"]["Env"].index("TERM=xterm"), "TERM=dumb"
    )
    mutations["container=docker"] = lambda r: r["OCI"]["Process"]["Env"].__setitem__(
        r["OCI"]["Process"]["Env"].index("container=crio"), "container=docker"
    )

    def containerenv_writable(request: Request) -> None:
        [mount] = [m for m in request["OCI"]["Mounts"] if m["destination"] == "/run/.containerenv"]
        mount["options"] = ["rw", "bind"]

    mutations["/run/.containerenv writable"] = containerenv_writable

    def cgroupfs_other(request: Request) -> None:
        request["OCI"]["Linux"]["CgroupsPath"] = "kubepods.slice:crio:" + container_id("x")

    mutations["cgroup of another container"] = cgroupfs_other
    return mutations


def test_what_crio_states_about_the_replay_is_pinned(snp: BuiltReplay) -> None:
    pod = _crio_pod(snp)
    genuine = pod.replay()
    mutations = _replay_mutations(pod)
    verdicts: dict[str, dict[str, bool]] = {}
    for engine, factory in ENGINES.items():
        witness = factory(policy_of(snp))
        start_pod(witness, pod)
        assert witness.allows("CreateContainerRequest", copy.deepcopy(genuine))
        agent = factory(policy_of(snp))
        start_pod(agent, pod)
        for name, mutation in mutations.items():
            request = copy.deepcopy(genuine)
            mutation(request)
            assert request != genuine, name
            verdicts.setdefault(name, {})[engine] = agent.allows("CreateContainerRequest", request)
    assert {name: v for name, v in verdicts.items() if any(v.values())} == {}


@pytest.mark.parametrize(
    "changes",
    [
        {"io.kubernetes.cri-o.ContainerType": "container"},
        {"io.kubernetes.cri-o.HostNetwork": "true"},
        {"io.kubernetes.cri-o.PrivilegedRuntime": "true"},
        {"io.kubernetes.cri-o.KubeName": "another-pod"},
        {"io.kubernetes.cri-o.HostName": "another-host"},
        {"io.kubernetes.cri-o.SandboxID": container_id("other")},
        {"io.kubernetes.container.name": "replay"},
        {"io.kubernetes.pod.name": "acme-run-8-0123456789-x7k2q"},
        {"cdi.k8s.io/vfio0": "nvidia.com/gpu=0"},
    ],
)
@pytest.mark.parametrize("engine", list(ENGINES))
def test_what_crio_states_about_the_pause_is_pinned(
    snp: BuiltReplay, engine: str, changes: dict[str, str | None]
) -> None:
    pod = _crio_pod(snp)
    agent = ENGINES[engine](policy_of(snp))
    assert agent.allows("CreateSandboxRequest", pod.create_sandbox())
    pause = pod.pause()
    assert not [key for key in pause["OCI"]["Annotations"] if key.startswith("io.kubernetes.cri.")]
    _annotations(changes)(pause)
    assert not agent.allows("CreateContainerRequest", pause)
    assert agent.allows("CreateContainerRequest", pod.pause())


@pytest.mark.parametrize("engine", list(ENGINES))
def test_pod_annotations_pass_under_crio_only(snp: BuiltReplay, engine: str) -> None:
    """CRI-O copies every pod annotation into the spec (an admission chain adds its own, e.g.
    OpenShift's openshift.io/scc); containerd passes only kata-deploy's io.katacontainers.*."""
    extra = {"openshift.io/scc": "restricted-v2", "k8s.ovn.org/pod-networks": '{"default":{}}'}
    for runtime in ("cri-o", "containerd"):
        pod = ReplayPod(snp.job, runtime=runtime)
        agent = ENGINES[engine](policy_of(snp))
        start_pod(agent, pod)
        replay = pod.replay()
        _annotations(extra)(replay)
        assert agent.allows("CreateContainerRequest", replay) is (runtime == "cri-o")


@pytest.mark.parametrize("engine", list(ENGINES))
def test_crio_s_variables_are_refused_under_containerd(snp: BuiltReplay, engine: str) -> None:
    pod = ReplayPod(snp.job)
    for entry in ("container=crio", "TERM=xterm"):
        agent = ENGINES[engine](policy_of(snp))
        start_pod(agent, pod)
        replay = pod.replay()
        replay["OCI"]["Process"]["Env"].append(entry)
        assert not agent.allows("CreateContainerRequest", replay)
