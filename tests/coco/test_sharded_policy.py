"""One init-data for every index of a sharded replay: its policy admits each index's pod.

The pods of an Indexed Job differ only by what the Job controller gives them: the name
``<job>-<index>-<random>``, the hostname ``<job>-<index>`` and ``JOB_COMPLETION_INDEX``. The
policy admits exactly the indices 0..N-1 and still nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest

from runner.k8s.job import BuiltReplay, build_replay
from tests.coco.conftest import ENGINES, policy_of, replay_spec
from tests.coco.requests import ReplayPod, start_pod

SHARDS = 3


@pytest.fixture(scope="module")
def sharded() -> BuiltReplay:
    return build_replay(replay_spec(shards=SHARDS, publish_url=None, publish_token_secret=None))


def run(agent: Any, pod: ReplayPod) -> bool:
    start_pod(agent, pod)
    allowed: bool = agent.allows("CreateContainerRequest", pod.replay())
    return allowed


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("index", range(SHARDS))
def test_every_index_runs_under_the_one_policy(
    sharded: BuiltReplay, engine: str, index: int
) -> None:
    agent = ENGINES[engine](policy_of(sharded))
    pod = ReplayPod(sharded.job, index=index)
    assert run(agent, pod)
    for name, request in pod.lifecycle():
        assert agent.allows(name, request), name


@pytest.mark.parametrize("engine", list(ENGINES))
def test_an_index_outside_the_job_is_refused(sharded: BuiltReplay, engine: str) -> None:
    agent = ENGINES[engine](policy_of(sharded))
    pod = ReplayPod(sharded.job, index=SHARDS)
    assert agent.allows("CreateSandboxRequest", pod.create_sandbox())
    # the sandbox name is not one of this Job's pods
    assert not agent.allows("CreateContainerRequest", pod.pause())


@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_index_variable_must_match_the_pod(sharded: BuiltReplay, engine: str) -> None:
    agent = ENGINES[engine](policy_of(sharded))
    pod = ReplayPod(sharded.job, index=1)
    start_pod(agent, pod)
    request = pod.replay()
    env = request["OCI"]["Process"]["Env"]
    request["OCI"]["Process"]["Env"] = [
        f"JOB_COMPLETION_INDEX={SHARDS}" if entry.startswith("JOB_COMPLETION_INDEX=") else entry
        for entry in env
    ]
    assert not agent.allows("CreateContainerRequest", request)


def _with_env(request: dict[str, Any], name: str, value: str) -> dict[str, Any]:
    env = request["OCI"]["Process"]["Env"]
    request["OCI"]["Process"]["Env"] = [
        f"{name}={value}" if entry.startswith(f"{name}=") else entry for entry in env
    ]
    return request


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_pod_runs_its_own_index_only(sharded: BuiltReplay, engine: str) -> None:
    """Red team x-shard-index-other: the pod of index 2 running index 1 (or 0), or with the
    HOSTNAME of another index's pod, is refused; its own index runs."""
    pod = ReplayPod(sharded.job, index=2)
    name = sharded.job["metadata"]["name"]
    for variable, value in [
        ("JOB_COMPLETION_INDEX", "1"),
        ("JOB_COMPLETION_INDEX", "0"),
        ("HOSTNAME", f"{name}-1"),
    ]:
        agent = ENGINES[engine](policy_of(sharded))
        start_pod(agent, pod)
        assert not agent.allows("CreateContainerRequest", _with_env(pod.replay(), variable, value))
    agent = ENGINES[engine](policy_of(sharded))
    assert run(agent, pod)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_pause_container_has_its_own_pod_s_hostname(sharded: BuiltReplay, engine: str) -> None:
    pod = ReplayPod(sharded.job, index=2)
    other = ReplayPod(sharded.job, index=1)
    agent = ENGINES[engine](policy_of(sharded))
    assert agent.allows("CreateSandboxRequest", pod.create_sandbox())
    pause = pod.pause()
    pause["OCI"]["Hostname"] = other.hostname
    assert not agent.allows("CreateContainerRequest", pause)
    assert agent.allows("CreateContainerRequest", pod.pause())


def test_unsharded_pods_are_not_admitted_by_a_sharded_policy_nor_the_reverse(
    sharded: BuiltReplay,
) -> None:
    agent = ENGINES["regorus-v1"](policy_of(sharded))
    pod = ReplayPod(sharded.job)
    assert agent.allows("CreateSandboxRequest", pod.create_sandbox())
    assert not agent.allows("CreateContainerRequest", pod.pause())
    unsharded = build_replay(replay_spec(publish_url=None, publish_token_secret=None))
    agent = ENGINES["regorus-v1"](policy_of(unsharded))
    pod = ReplayPod(unsharded.job, index=0)
    assert agent.allows("CreateSandboxRequest", pod.create_sandbox())
    assert not agent.allows("CreateContainerRequest", pod.pause())


def test_the_pods_args_name_the_shard_count_and_the_init_data_differs(
    sharded: BuiltReplay,
) -> None:
    args = sharded.job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--shard-count", str(SHARDS)]
    assert "--shard-index" not in args
    unsharded = build_replay(replay_spec(publish_url=None, publish_token_secret=None))
    assert sharded.init_data.host_data != unsharded.init_data.host_data
