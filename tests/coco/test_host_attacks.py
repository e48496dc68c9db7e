"""Requests a hostile host sends to get a genuine report for something the replay never computed.

Each test is one attack found by reviewing the policy against kata-containers 3.28-4.1 and
guest-components 0.18-0.21 (the upstream behaviour each relies on is cited where it is used),
evaluated through kata-agent's query protocol on every engine of tests/coco/conftest.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.coco.conftest import ENGINES
from tests.coco.requests import ReplayPod, start_pod

COCO = Path(__file__).parents[1] / "assets" / "coco"
GUEST_DEFAULT_POLICY = Path(__file__).parents[2] / "k8s" / "guest" / "default-policy.rego"

#: The second CreateSandboxRequest of the attack: what kata sends for a pod (the same as the
#: first one), replayed by the host while the replay runs.
SECOND_SANDBOX: dict[str, Any] = {
    "hostname": "attacker",
    "dns": ["nameserver 10.96.0.10"],
    "storages": [
        {
            "driver": "ephemeral",
            "driver_options": [],
            "source": "shm",
            "fstype": "tmpfs",
            "options": ["noexec", "nosuid", "nodev", "mode=1777", "size=67108864"],
            "mount_point": "/run/kata-containers/sandbox/shm",
            "fs_group": None,
            "shared": False,
        }
    ],
    "sandbox_pidns": False,
    "sandbox_id": "",
    "guest_hook_path": "",
    "kernel_modules": [],
}


# -- a second sandbox ----------------------------------------------------------------------
#
# kata-agent's create_sandbox (src/agent/src/rpc.rs, 3.28.0 and 4.1.0) starts with
# `fs::remove_dir_all(CONTAINER_BASE)` = /run/kata-containers: the bundles and root
# filesystems of running containers, the guest-pulled image layers
# (/run/kata-containers/image), the emptyDirs (/run/kata-containers/sandbox/storage) and the
# copied files, then resets hostname, DNS and the shared namespaces. Nothing in the agent
# refuses a second call, and genpolicy's CreateSandboxRequest rule is stateless too. Allowed,
# it lets the host delete files under a running replay.


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_second_sandbox_is_refused_while_the_replay_runs(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    agent = ENGINES[engine](snp_policy)
    start_pod(agent, snp_pod)
    assert agent.allows("CreateContainerRequest", snp_pod.replay())
    assert agent.allows("StartContainerRequest", {"container_id": snp_pod.replay_id})
    assert not agent.allows("CreateSandboxRequest", snp_pod.create_sandbox())
    assert not agent.allows("CreateSandboxRequest", SECOND_SANDBOX)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_sandbox_is_created_once_and_before_any_container(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    agent = ENGINES[engine](snp_policy)
    # No container before the sandbox: a later CreateSandbox would wipe it.
    assert not agent.allows("CreateContainerRequest", snp_pod.pause())
    assert not agent.allows("CreateContainerRequest", snp_pod.replay())
    assert agent.allows("CreateSandboxRequest", snp_pod.create_sandbox())
    assert not agent.allows("CreateSandboxRequest", SECOND_SANDBOX)
    assert agent.allows("CreateContainerRequest", snp_pod.pause())
    assert not agent.allows("CreateSandboxRequest", snp_pod.create_sandbox())


# -- masking files of the measured image ---------------------------------------------------
#
# rustjail (src/agent/rustjail/src/mount.rs mask_path, readonly_path; 3.29.0 and 4.1.0)
# bind-mounts /dev/null over every file in Linux.MaskedPaths (a directory is left alone: the
# ENOTDIR of that mount is ignored) and remounts every ReadonlyPaths entry read-only. Its only
# check refuses relative paths and "..": mount(2) follows symlinks, magic links included. Extra
# entries outside the kernel's /proc and /sys, or through /proc/self/root and its kin, let the
# host empty files of the replay image (a module, the CA bundle) or freeze its output directory
# under the pinned command. genpolicy admits extra masked paths; containerd and CRI-O only ever
# add /proc and /sys ones.

Mutation = Callable[[dict[str, Any]], None]


def _masked(path: str) -> Mutation:
    def mutate(request: dict[str, Any]) -> None:
        request["OCI"]["Linux"]["MaskedPaths"].append(path)

    return mutate


def _readonly(path: str) -> Mutation:
    def mutate(request: dict[str, Any]) -> None:
        request["OCI"]["Linux"]["ReadonlyPaths"].append(path)

    return mutate


IMAGE_FILE = "/opt/attested-replay/lib/python3.11/site-packages/certifi/cacert.pem"

HIDING = {
    "masked image file": _masked(IMAGE_FILE),
    "masked through /proc/self/root": _masked(f"/proc/self/root{IMAGE_FILE}"),
    "masked through /proc/1/root": _masked(f"/proc/1/root{IMAGE_FILE}"),
    "masked through /proc/thread-self/root": _masked(f"/proc/thread-self/root{IMAGE_FILE}"),
    "masked through /proc/..": _masked("/proc/../opt/attested-replay/bin/attested-replay"),
    "masked relative": _masked("opt/attested-replay/bin/attested-replay"),
    "masked device": _masked("/dev/sev-guest"),
    "read-only output": _readonly("/replay/out"),
    "read-only output through /proc/self/cwd": _readonly("/proc/self/cwd"),
    "read-only tmp through /sys/..": _readonly("/sys/../tmp"),
}
#: Paths containerd 2.x (/sys/devices/virtual/powercap) and CRI-O/runc (/proc/interrupts) mask
#: on top of genpolicy's list: still a genuine replay.
RUNTIME_EXTRAS = ("/proc/interrupts", "/sys/devices/virtual/powercap")


@pytest.mark.parametrize("engine", list(ENGINES))
def test_masking_or_freezing_image_files_is_refused(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    agent = ENGINES[engine](snp_policy)
    start_pod(agent, snp_pod)
    genuine = snp_pod.replay()
    verdicts = {}
    for name, mutate in HIDING.items():
        request = copy.deepcopy(genuine)
        mutate(request)
        verdicts[name] = agent.allows("CreateContainerRequest", request)
    assert verdicts == dict.fromkeys(HIDING, False)
    with_extras = copy.deepcopy(genuine)
    with_extras["OCI"]["Linux"]["MaskedPaths"] += list(RUNTIME_EXTRAS)
    with_extras["OCI"]["Linux"]["ReadonlyPaths"].append("/proc/asound")
    assert agent.allows("CreateContainerRequest", with_extras)


# -- versions -------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", list(ENGINES))
def test_kata_3_28_copy_requests_are_refused(
    snp_policy: str, snp_pod: ReplayPod, engine: str
) -> None:
    """kata 3.28 asks the policy with the raw CopyFileRequest (file bytes, no file type: the
    agent's PolicyCopyFileRequest arrived in 3.29.0, commit 639ff357), and resolves symlinks
    in the kernel, outside any root. The policy refuses those requests, so a 3.28 guest cannot
    start the pod: kata 3.29.0 is the floor (docs/operator.md)."""
    agent = ENGINES[engine](snp_policy)
    assert agent.allows("CreateSandboxRequest", snp_pod.create_sandbox())
    converted = snp_pod.sandbox_copies()[0]
    raw = {
        key: converted[key]
        for key in ("path", "file_size", "file_mode", "dir_mode", "uid", "gid", "offset")
    }
    raw["data"] = list(b"nameserver 10.96.0.10\n")
    assert agent.allows("CopyFileRequest", converted)
    assert not agent.allows("CopyFileRequest", raw)


# -- a guest without init-data ---------------------------------------------------------------
#
# HOST_DATA is whatever the host passes to QEMU (`host-data=` of sev-snp-guest), and the agent
# reads init-data only from a block device the host attaches (src/agent/src/initdata.rs
# detect_initdata_device: "Initdata device not found, skip initdata initialization"). Without
# the device the agent keeps the default policy of the guest image
# (/etc/kata-opa/default-policy.rego) and starts the attestation agent without --initdata-toml,
# so nothing in the guest compares HOST_DATA with anything. kata's stock images install
# allow-all.rego there (tools/osbuilder/rootfs-builder/rootfs.sh, 4.1.0). A tenant's
# MEASUREMENT must therefore be of a guest whose default policy refuses every request.

AGENT_REQUESTS = (
    # Every request of kata's agent.proto (4.1.0), and the debug switch.
    "AddARPNeighborsRequest",
    "AddSwapPathRequest",
    "AddSwapRequest",
    "CloseStdinRequest",
    "CopyFileRequest",
    "CreateContainerRequest",
    "CreateSandboxRequest",
    "DestroySandboxRequest",
    "ExecProcessRequest",
    "GetDiagnosticDataRequest",
    "GetIPTablesRequest",
    "GetMetricsRequest",
    "GetOOMEventRequest",
    "GuestDetailsRequest",
    "ListInterfacesRequest",
    "ListRoutesRequest",
    "MemAgentCompactConfig",
    "MemAgentMemcgConfig",
    "MemHotplugByProbeRequest",
    "OnlineCPUMemRequest",
    "PauseContainerRequest",
    "ReadStreamRequest",
    "RemoveContainerRequest",
    "RemoveStaleVirtiofsShareMountsRequest",
    "ReseedRandomDevRequest",
    "ResizeVolumeRequest",
    "ResumeContainerRequest",
    "SetGuestDateTimeRequest",
    "SetIPTablesRequest",
    "SetPolicyRequest",
    "SignalProcessRequest",
    "StartContainerRequest",
    "StatsContainerRequest",
    "TtyWinResizeRequest",
    "UpdateContainerRequest",
    "UpdateEphemeralMountsRequest",
    "UpdateInterfaceRequest",
    "UpdateRoutesRequest",
    "VolumeStatsRequest",
    "WaitProcessRequest",
    "WriteStreamRequest",
    "AllowRequestsFailingPolicy",
)


def _hijack(pod: ReplayPod) -> list[tuple[str, Any]]:
    """The host's own container in a guest it booted without init-data: the pinned image
    with a command that asks the attestation agent for a report over data it chose."""
    hijacked = pod.replay()
    hijacked["OCI"]["Process"]["Env"].append("AA=http://127.0.0.1:8006/aa/")
    hijacked["OCI"]["Process"]["Args"] = [
        "python3",
        "-c",
        "import os, urllib.request as u; print(u.urlopen(os.environ['AA'] + 'evidence').read())",
    ]
    steps: list[tuple[str, Any]] = [
        ("CreateSandboxRequest", pod.create_sandbox()),
        ("CreateContainerRequest", pod.pause()),
        ("CreateContainerRequest", hijacked),
        ("StartContainerRequest", {"container_id": pod.replay_id}),
        (
            "SetPolicyRequest",
            {"policy": "package agent_policy\ndefault CreateContainerRequest := true"},
        ),
    ]
    return steps


@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_guest_default_policy_refuses_everything(snp_pod: ReplayPod, engine: str) -> None:
    agent = ENGINES[engine](GUEST_DEFAULT_POLICY.read_text())
    assert agent.allow_failures is False
    assert [name for name in AGENT_REQUESTS if agent.allows(name, {})] == []
    steps = _hijack(snp_pod)
    assert [name for name, request in steps if agent.allows(name, request)] == []
    assert not agent.allows("CopyFileRequest", snp_pod.sandbox_copies()[0])


def test_the_stock_default_policy_runs_the_host_s_container(snp_pod: ReplayPod) -> None:
    """Why a stock image's MEASUREMENT is not enough: its default policy admits the attack."""
    stock = ENGINES["regorus-v1"]((COCO / "policies" / "kata-opa" / "allow-all.rego").read_text())
    steps = _hijack(snp_pod)
    assert all(stock.allows(name, request) for name, request in steps)
