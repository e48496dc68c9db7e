"""Every verdict the 2026-12-05 red team of the agent policy found wrong, by its scenario ID.

The review ran 438 scenarios (tables A, B and C: every agent.proto request of a running pod,
the replay's CreateContainerRequest genuine and mutated, CopyFile, network and CreateSandbox
variants) on four regorus builds. It found 27 requests wrongly allowed and one genuine request
wrongly denied; each is below, rebuilt from this project's request builders exactly as the
review describes it, with the verdict it must get now, on every engine kata-agent could run.
``cc-hostname`` (OCI.Hostname set), which the review judged harmless, is pinned since issue 28
and listed too.
Some are also covered where their field is tested (test_agent_policy.py mutation list,
test_policy_pins.py, test_sharded_policy.py); this file is the index by ID.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from runner.k8s.job import BuiltReplay, build_replay
from tests.coco.conftest import ENGINES, policy_of, replay_spec
from tests.coco.requests import (
    UPDATE_INTERFACE,
    UPDATE_ROUTES,
    ReplayPod,
    container_id,
    guest_pull_storage,
    start_pod,
)

Request = dict[str, Any]
Agent = Any


def _replay_with(
    change: Callable[[Request, ReplayPod], None],
) -> Callable[[Agent, ReplayPod], bool]:
    """The replay's CreateContainerRequest after the genuine start of the pod, changed once."""

    def scenario(agent: Agent, pod: ReplayPod) -> bool:
        start_pod(agent, pod)
        request = pod.replay()
        change(request, pod)
        return bool(agent.allows("CreateContainerRequest", request))

    return scenario


def _after_start(
    requests: Callable[[ReplayPod], list[tuple[str, Request]]],
) -> Callable[[Agent, ReplayPod], bool]:
    """Requests after the replay was created and started: allowed only if every one is."""

    def scenario(agent: Agent, pod: ReplayPod) -> bool:
        start_pod(agent, pod)
        assert agent.allows("CreateContainerRequest", pod.replay())
        assert agent.allows("StartContainerRequest", {"container_id": pod.replay_id})
        return all(agent.allows(name, request) for name, request in requests(pod))

    return scenario


def _signal(number: int) -> Callable[[Agent, ReplayPod], bool]:
    return _after_start(
        lambda pod: [
            (
                "SignalProcessRequest",
                {"container_id": pod.replay_id, "exec_id": "", "signal": number},
            )
        ]
    )


def _rlimit(kind: str, limit: int) -> Callable[[Request, ReplayPod], None]:
    def change(request: Request, _pod: ReplayPod) -> None:
        request["OCI"]["Process"]["Rlimits"] = [{"Type": kind, "Hard": limit, "Soft": limit}]

    return change


def _set(path: str, value: Any) -> Callable[[Request, ReplayPod], None]:
    def change(request: Request, _pod: ReplayPod) -> None:
        *parents, leaf = path.split(".")
        target = request
        for key in parents:
            target = target[key]
        target[leaf] = value

    return change


def _pull_metadata(extra: dict[str, str]) -> Callable[[Request, ReplayPod], None]:
    def change(request: Request, _pod: ReplayPod) -> None:
        pull = request["storages"][0]
        metadata = {**request["OCI"]["Annotations"], **extra}
        request["storages"][0] = guest_pull_storage(
            request["container_id"], pull["source"], metadata
        )

    return change


def _pull_text(text: str) -> Callable[[Request, ReplayPod], None]:
    def change(request: Request, _pod: ReplayPod) -> None:
        request["storages"][0]["driver_options"] = [f"image_guest_pull={text}"]

    return change


def _shared_out_tmp(request: Request, _pod: ReplayPod) -> None:
    mounts = {m["destination"]: m for m in request["OCI"]["Mounts"]}
    tmp_source = mounts["/tmp"]["source"]
    mounts["/tmp"]["source"] = mounts["/replay/out"]["source"]
    request["storages"] = [s for s in request["storages"] if s["mount_point"] != tmp_source]


def _second_replay(pod: ReplayPod) -> list[tuple[str, Request]]:
    second = pod.replay()
    other = container_id("second replay")
    second["container_id"] = second["exec_id"] = other
    second["OCI"]["Root"]["Path"] = f"/run/kata-containers/{other}/rootfs"
    second["OCI"]["Linux"]["CgroupsPath"] = second["OCI"]["Linux"]["CgroupsPath"].replace(
        pod.replay_id, other
    )
    second["storages"][0] = guest_pull_storage(
        other, second["storages"][0]["source"], second["OCI"]["Annotations"]
    ) | {"mount_point": second["OCI"]["Root"]["Path"]}
    return [("CreateContainerRequest", second)]


def _replay_before_pause(agent: Agent, pod: ReplayPod) -> bool:
    assert agent.allows("CreateSandboxRequest", pod.create_sandbox())
    for request in [*pod.sandbox_copies(), *pod.replay_copies()]:
        assert agent.allows("CopyFileRequest", request)
    return bool(agent.allows("CreateContainerRequest", pod.replay()))


def _interface_address(address: str, mask: str) -> Callable[[Agent, ReplayPod], bool]:
    def scenario(agent: Agent, _pod: ReplayPod) -> bool:
        request: Request = copy.deepcopy(UPDATE_INTERFACE)
        request["interface"]["IPAddresses"].append({"family": 0, "address": address, "mask": mask})
        return bool(agent.allows("UpdateInterfaceRequest", request))

    return scenario


def _route(dest: str) -> Callable[[Agent, ReplayPod], bool]:
    def scenario(agent: Agent, _pod: ReplayPod) -> bool:
        request: Request = copy.deepcopy(UPDATE_ROUTES)
        route = {**request["routes"]["Routes"][1], "dest": dest, "source": ""}
        request["routes"]["Routes"].append(route)
        return bool(agent.allows("UpdateRoutesRequest", request))

    return scenario


IPV6_SERVICE_ENV = (
    "KUBERNETES_SERVICE_HOST=fd00::1",
    "KUBERNETES_PORT=tcp://[fd00::1]:443",
    "KUBERNETES_PORT_443_TCP=tcp://[fd00::1]:443",
    "KUBERNETES_PORT_443_TCP_ADDR=fd00::1",
)


def _ipv6_cluster(request: Request, _pod: ReplayPod) -> None:
    names = {entry.partition("=")[0] for entry in IPV6_SERVICE_ENV}
    env = request["OCI"]["Process"]["Env"]
    request["OCI"]["Process"]["Env"] = [e for e in env if e.partition("=")[0] not in names] + list(
        IPV6_SERVICE_ENV
    )


#: (scenario ID of the review, what it must get now: True = allowed, the scenario).
UNSHARDED: dict[str, tuple[bool, Callable[[Agent, ReplayPod], bool]]] = {
    "A-34 SIGSTOP": (False, _signal(19)),
    "A-35 SIGINT": (False, _signal(2)),
    "A-36 SIGUSR1": (False, _signal(10)),
    "cc-rlimit-nofile": (False, _replay_with(_rlimit("RLIMIT_NOFILE", 3))),
    "cc-rlimit-fsize": (False, _replay_with(_rlimit("RLIMIT_FSIZE", 4096))),
    "cc-rlimit-as": (False, _replay_with(_rlimit("RLIMIT_AS", 256 * 1024**2))),
    "cc-rlimit-cpu": (False, _replay_with(_rlimit("RLIMIT_CPU", 5))),
    "cc-rlimit-stack": (False, _replay_with(_rlimit("RLIMIT_STACK", 64 * 1024))),
    "cc-caps-null": (False, _replay_with(_set("OCI.Process.Capabilities", None))),
    "cc-pull-meta-sandbox": (
        False,
        _replay_with(_pull_metadata({"io.kubernetes.cri.container-type": "sandbox"})),
    ),
    "cc-pull-meta-crio-sandbox": (
        False,
        _replay_with(_pull_metadata({"io.kubernetes.cri-o.ContainerType": "sandbox"})),
    ),
    "cc-pull-meta-garbage": (False, _replay_with(_pull_text("not-json"))),
    "cc-cgroup-path-root": (False, _replay_with(_set("OCI.Linux.CgroupsPath", "/"))),
    "cc-cgroup-path-dotdot": (False, _replay_with(_set("OCI.Linux.CgroupsPath", "../../.."))),
    "cc-res-memory": (
        False,
        _replay_with(_set("OCI.Linux.Resources.Memory.Limit", 16 * 1024**2)),
    ),
    "cc-res-cpu": (False, _replay_with(_set("OCI.Linux.Resources.CPU.Quota", 1000))),
    "cc-res-hugepages": (
        False,
        _replay_with(
            _set("OCI.Linux.Resources.HugepageLimits", [{"Pagesize": "2MB", "Limit": 4194304}])
        ),
    ),
    "cc-hostname": (False, _replay_with(_set("OCI.Hostname", "evil"))),
    "cc-emptydir-shared-out-tmp": (False, _replay_with(_shared_out_tmp)),
    "cc-second-replay-same-emptydirs": (False, _after_start(_second_replay)),
    "cc-second-pause": (False, _after_start(lambda pod: [("CreateContainerRequest", pod.pause())])),
    "cc-same-id-again": (
        False,
        _after_start(lambda pod: [("CreateContainerRequest", pod.replay())]),
    ),
    "cc-replay-before-pause": (False, _replay_before_pause),
    "x-remove-recreate-genuine": (
        False,
        _after_start(
            lambda pod: [
                ("RemoveContainerRequest", {"container_id": pod.replay_id, "timeout": 0}),
                ("CreateContainerRequest", pod.replay()),
            ]
        ),
    ),
    "net-01 127.0.0.2/8 on eth0": (False, _interface_address("127.0.0.2", "8")),
    "net-07 route to 127.0.0.0/8": (False, _route("127.0.0.0/8")),
    "cc-env-kube-ipv6 (wrongly denied)": (True, _replay_with(_ipv6_cluster)),
}


@pytest.mark.parametrize("scenario", list(UNSHARDED))
@pytest.mark.parametrize("engine", list(ENGINES))
def test_red_team_scenario(snp_policy: str, snp_pod: ReplayPod, engine: str, scenario: str) -> None:
    expected, run = UNSHARDED[scenario]
    assert run(ENGINES[engine](snp_policy), snp_pod) is expected


@pytest.fixture(scope="module")
def four_shards() -> BuiltReplay:
    return build_replay(replay_spec(shards=4, publish_url=None, publish_token_secret=None))


def _with_index(request: Request, index: int) -> Request:
    env = request["OCI"]["Process"]["Env"]
    request["OCI"]["Process"]["Env"] = [
        f"JOB_COMPLETION_INDEX={index}" if e.startswith("JOB_COMPLETION_INDEX=") else e for e in env
    ]
    return request


@pytest.mark.parametrize("engine", list(ENGINES))
def test_red_team_x_shard_index_other(four_shards: BuiltReplay, engine: str) -> None:
    """The pod of index 2 of 4 running JOB_COMPLETION_INDEX=3."""
    pod = ReplayPod(four_shards.job, index=2)
    agent = ENGINES[engine](policy_of(four_shards))
    start_pod(agent, pod)
    assert not agent.allows("CreateContainerRequest", _with_index(pod.replay(), 3))


@pytest.mark.parametrize("engine", list(ENGINES))
def test_red_team_x_shard_second_in_vm(four_shards: BuiltReplay, engine: str) -> None:
    """A second replay (index 1) in the same VM after index 2 started."""
    pod = ReplayPod(four_shards.job, index=2)
    agent = ENGINES[engine](policy_of(four_shards))
    start_pod(agent, pod)
    assert agent.allows("CreateContainerRequest", pod.replay())
    assert agent.allows("StartContainerRequest", {"container_id": pod.replay_id})
    [(_, second)] = _second_replay(pod)
    assert not agent.allows("CreateContainerRequest", _with_index(second, 1))
