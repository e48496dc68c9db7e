"""The generated agent policy admits exactly the replay pod, with the engines kata-agent runs.

Every check runs the policy the builder put into the pod's init-data, through kata-agent's
query protocol (tests/coco/agent.py), on regorus in both Rego dialects and on regopy; the
verdicts must agree. The requests are what kata sends for this pod (tests/coco/requests.py).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.coco import policy as policy_module
from runner.errors import UsageError
from runner.k8s.job import RUNNER_ENV, BuiltReplay, build_replay
from tests.coco.agent import RegorusAgent
from tests.coco.conftest import ENGINES, policy_of, replay_spec
from tests.coco.requests import ReplayPod, copy_file, guest_pull_storage, start_pod

COCO = Path(__file__).parents[1] / "assets" / "coco"
INDEX: list[dict[str, Any]] = json.loads((COCO / "INDEX.json").read_text())

Request = dict[str, Any]
Mutation = Callable[[Request], None]


def upstream_request(entry: dict[str, Any]) -> Any:
    if entry["id"].startswith("kata-"):
        return json.loads((COCO / entry["agent_input_file"]).read_text())
    return json.loads((COCO / entry["file"]).read_text())["request"]


# -- the pod runs ----------------------------------------------------------------------------


@pytest.mark.parametrize("emptydir_mode", ["block", "block-kata3", "local"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_replay_pod_runs_from_start_to_end(
    built: BuiltReplay, engine: str, emptydir_mode: str
) -> None:
    pod = ReplayPod(built.job)
    agent = ENGINES[engine](policy_of(built))
    assert agent.allow_failures is False
    start_pod(agent, pod)
    assert agent.allows("CreateContainerRequest", pod.replay(emptydir_mode))  # type: ignore[arg-type]
    for name, request in pod.lifecycle():
        assert agent.allows(name, request), name
    assert agent.data == {
        "pstate": {
            "sandbox": True,
            f"created-{pod.sandbox_id}": "sandbox",
            f"created-{pod.replay_id}": "replay",
            "sandbox_container": pod.sandbox_id,
            "replay": pod.replay_id,
            "sandbox-name": pod.pod_name,
            "hostname": pod.hostname,
        }
    }


def test_copies_of_other_pods_and_other_names_are_refused(
    snp_policy: str, snp_pod: ReplayPod
) -> None:
    for engine in ENGINES.values():
        agent = engine(snp_policy)
        cid = snp_pod.replay_id
        for name in ("serviceaccount", "foo", "out", "tmp", "corpus"):
            assert not agent.allows(
                "CopyFileRequest", copy_file(snp_pod.shared_path(cid, name), "Regular")
            )
        # sandbox-scoped copies (a copied emptyDir) and the container's own rootfs
        assert not agent.allows(
            "CopyFileRequest",
            copy_file(
                f"/run/kata-containers/shared/containers/sandbox-{'0' * 16}-out", "Directory"
            ),
        )
        assert not agent.allows(
            "CopyFileRequest", copy_file(f"/run/kata-containers/{cid}/rootfs/bin/sh", "Regular")
        )


def test_no_copy_into_a_container_that_exists(snp_policy: str, snp_pod: ReplayPod) -> None:
    """The host cannot swap the publish token (or a corpus file) under a running replay."""
    for engine in ENGINES.values():
        agent = engine(snp_policy)
        start_pod(agent, snp_pod)
        late = snp_pod.replay_copies()
        assert agent.allows("CopyFileRequest", late[-1])  # before the container is created
        assert agent.allows("CreateContainerRequest", snp_pod.replay())
        assert not any(agent.allows("CopyFileRequest", request) for request in late)
        again = snp_pod.sandbox_copies()
        assert not agent.allows("CopyFileRequest", again[0])


# -- everything else is refused ----------------------------------------------------------------


def _set(path: str, value: Any) -> Mutation:
    def mutate(request: Request) -> None:
        *parents, leaf = path.split(".")
        target: Any = request
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(leaf)] = value
        else:
            target[leaf] = value

    return mutate


def _edit(path: str, change: Callable[[Any], Any]) -> Mutation:
    def mutate(request: Request) -> None:
        *parents, leaf = path.split(".")
        target: Any = request
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        index: Any = int(leaf) if isinstance(target, list) else leaf
        target[index] = change(target[index])

    return mutate


def _mount(destination: str, change: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(request: Request) -> None:
        mounts = request["OCI"]["Mounts"]
        [mount] = [m for m in mounts if m["destination"] == destination]
        change(mount)

    return mutate


def _drop_mount(destination: str) -> Mutation:
    def mutate(request: Request) -> None:
        request["OCI"]["Mounts"] = [
            m for m in request["OCI"]["Mounts"] if m["destination"] != destination
        ]

    return mutate


def _annotation(key: str, value: str) -> Mutation:
    def mutate(request: Request) -> None:
        request["OCI"]["Annotations"][key] = value

    return mutate


def _other_image(request: Request) -> None:
    request["OCI"]["Annotations"]["io.kubernetes.cri.image-name"] = OTHER_IMAGE
    request["storages"][0]["source"] = OTHER_IMAGE


def _env(change: Callable[[list[str]], list[str]]) -> Mutation:
    return _edit("OCI.Process.Env", change)


OTHER_IMAGE = "registry.example/attested-replay@sha256:" + "cd" * 32
BIN = "/opt/attested-replay/bin/attested-replay"


def _arg_mutations(pod: ReplayPod) -> dict[str, Mutation]:
    args = [*pod.container["command"], *pod.container["args"]]
    mutations = {
        f"arg {i} ({arg})": _edit(f"OCI.Process.Args.{i}", lambda a: a + "x")
        for i, arg in enumerate(args)
    }
    mutations["arg appended"] = _edit("OCI.Process.Args", lambda a: [*a, "--evidence", "simulated"])
    mutations["arg removed"] = _edit("OCI.Process.Args", lambda a: a[:-1])
    mutations["command replaced"] = _set("OCI.Process.Args.0", "python3")
    # python -I is what keeps PYTHON* variables and the working directory from loading code
    mutations["isolated mode dropped"] = _edit(
        "OCI.Process.Args", lambda a: [item for item in a if item != "-I"]
    )
    mutations["shell instead"] = _set(
        "OCI.Process.Args", ["/bin/sh", "-c", "attested-replay run ..."]
    )
    return mutations


def _changed(entry: str) -> Callable[[list[str]], list[str]]:
    return lambda env: [f"{item}x" if item == entry else item for item in env]


def _removed(entry: str) -> Callable[[list[str]], list[str]]:
    return lambda env: [item for item in env if item != entry]


def _added(entry: str) -> Callable[[list[str]], list[str]]:
    return lambda env: [*env, entry]


def _env_mutations() -> dict[str, Mutation]:
    mutations: dict[str, Mutation] = {}
    for name, value in RUNNER_ENV:
        entry = f"{name}={value}"
        mutations[f"env {name} changed"] = _env(_changed(entry))
        mutations[f"env {name} removed"] = _env(_removed(entry))
    for extra in (
        "PYTHONPATH=/tmp",
        "PYTHONSTARTUP=/tmp/s.py",
        "LD_PRELOAD=/tmp/x.so",
        "HTTPS_PROXY=http://10.0.0.9:3128",
        "REQUESTS_CA_BUNDLE=/tmp/ca.pem",
        "PATH=/tmp:/opt/attested-replay/bin",
        "HOSTNAME=acme-run-7-0123456789-x7k2q",
        "KUBERNETES_SERVICE_HOST=evil.example",
    ):
        mutations[f"env + {extra}"] = _env(_added(extra))
    mutations["env duplicate name"] = _env(lambda env: [*env, env[-1]])
    return mutations


def _mount_mutations(pod: ReplayPod) -> dict[str, Mutation]:
    mutations: dict[str, Mutation] = {}
    destinations = [m["destination"] for m in pod.replay()["OCI"]["Mounts"]]
    for destination in destinations:
        mutations[f"mount {destination} removed"] = _drop_mount(destination)
        mutations[f"mount {destination} moved"] = _mount(
            destination, lambda m: m.update(destination="/opt/attested-replay/bin")
        )
        mutations[f"mount {destination} source"] = _mount(
            destination, lambda m: m.update(source=m["source"] + "x")
        )
        mutations[f"mount {destination} type"] = _mount(
            destination, lambda m: m.update(type_="overlay")
        )
        mutations[f"mount {destination} exec option"] = _mount(
            destination, lambda m: m.update(options=[*m["options"], "exec", "suid"])
        )
    mutations["publish token mounted read-write"] = _mount(
        "/var/run/secrets/attested-replay/publish",
        lambda m: m.update(options=["rbind", "rprivate", "rw"]),
    )
    mutations["hosts file over the runner"] = _edit(
        "OCI.Mounts",
        lambda mounts: [
            *mounts,
            {**next(m for m in mounts if m["destination"] == "/etc/hosts"), "destination": BIN},
        ],
    )
    mutations["host directory"] = _edit(
        "OCI.Mounts",
        lambda mounts: [
            *mounts,
            {"destination": "/mnt", "source": "/", "type_": "bind", "options": ["rbind"]},
        ],
    )
    mutations["/etc/hosts duplicated"] = _edit(
        "OCI.Mounts",
        lambda mounts: [*mounts, next(m for m in mounts if m["destination"] == "/etc/hosts")],
    )
    return mutations


def _other_mutations(pod: ReplayPod) -> dict[str, Mutation]:
    return {
        "image annotation": _annotation("io.kubernetes.cri.image-name", OTHER_IMAGE),
        "image pulled": _set("storages.0.source", OTHER_IMAGE),
        "image": _other_image,
        "rootfs elsewhere": _set(
            "OCI.Root.Path", "/run/kata-containers/shared/containers/x/rootfs"
        ),
        "rootfs storage elsewhere": _set("storages.0.mount_point", "/run/kata-containers/x/rootfs"),
        "rootfs writable": _set("OCI.Root.Readonly", False),
        "second rootfs storage": _edit("storages", lambda s: [*s, s[0]]),
        "plain block emptyDir": _edit(
            "storages", lambda s: [s[0], {**s[1], "driver_options": ["create_filesystem"]}, *s[2:]]
        ),
        "extra storage": _edit(
            "storages",
            lambda s: [*s, {**s[1], "mount_point": "/run/kata-containers/sandbox/storage/eA=="}],
        ),
        "cwd": _set("OCI.Process.Cwd", "/tmp"),
        "uid root": _set("OCI.Process.User.UID", 0),
        "gid root": _set("OCI.Process.User.GID", 0),
        "group root": _edit("OCI.Process.User.AdditionalGids", lambda g: [*g, 0]),
        "username": _set("OCI.Process.User.Username", "root"),
        "capability": _edit("OCI.Process.Capabilities.Effective", lambda c: [*c, "CAP_SYS_ADMIN"]),
        "bounding capability": _edit(
            "OCI.Process.Capabilities.Bounding", lambda c: [*c, "CAP_SYS_PTRACE"]
        ),
        "privilege escalation": _set("OCI.Process.NoNewPrivileges", False),
        "terminal": _set("OCI.Process.Terminal", True),
        "apparmor": _set("OCI.Process.ApparmorProfile", "unconfined"),
        "container name": _annotation("io.kubernetes.cri.container-name", "sidecar"),
        "other job's pod": _annotation(
            "io.kubernetes.cri.sandbox-name", "acme-run-8-0123456789-x7k2q"
        ),
        "pretends to be the sandbox": _annotation("io.kubernetes.cri.container-type", "sandbox"),
        "CRI-O's type beside containerd's": _annotation(
            "io.kubernetes.cri-o.ContainerType", "container"
        ),
        "CRI-O's type says sandbox": _annotation("io.kubernetes.cri-o.ContainerType", "sandbox"),
        "a CRI-O key": _annotation("io.kubernetes.cri-o.TTY", "false"),
        "kata container type": _annotation(
            "io.katacontainers.pkg.oci.container_type", "pod_sandbox"
        ),
        "CDI device annotation": _edit(
            "OCI.Annotations", lambda a: {**a, "cdi.k8s.io/vfio0": "nvidia.com/gpu=0"}
        ),
        "termination message elsewhere": _annotation(
            "io.kubernetes.container.terminationMessagePath", "/etc/hosts"
        ),
        "hooks": _set("OCI.Hooks", {"Prestart": [{"Path": "/bin/sh"}]}),
        "seccomp": _set("OCI.Linux.Seccomp", {"DefaultAction": "SCMP_ACT_ALLOW"}),
        "no mount namespace": _edit(
            "OCI.Linux.Namespaces", lambda ns: [n for n in ns if n["Type"] != "mount"]
        ),
        "host namespace path": _edit(
            "OCI.Linux.Namespaces", lambda ns: [{**ns[0], "Path": "/proc/1/ns/ipc"}, *ns[1:]]
        ),
        "unmasked /proc/kcore": _edit(
            "OCI.Linux.MaskedPaths", lambda p: [x for x in p if x != "/proc/kcore"]
        ),
        "writable /proc/sys": _edit(
            "OCI.Linux.ReadonlyPaths", lambda p: [x for x in p if x != "/proc/sys"]
        ),
        "sysctl": _edit("OCI.Linux.Sysctl", lambda s: {**s, "kernel.core_pattern": "|/tmp/x"}),
        "device": _edit(
            "OCI.Linux.Devices", lambda d: [*d, {"Path": "/dev/sev-guest", "Type": "c"}]
        ),
        "agent device": _edit(
            "devices",
            lambda d: [
                *d,
                {
                    "id": "x",
                    "type_": "blk",
                    "vm_path": "/dev/vdb",
                    "container_path": "/dev/x",
                    "options": [],
                },
            ],
        ),
        "shared pid namespace": _set("sandbox_pidns", True),
        "shared mounts": _set("shared_mounts", [{"name": "x"}]),
        "string user": _set("string_user", {"uid": "0"}),
        "container id": _set("container_id", "../../../etc"),
    }


def _rlimit(kind: str, limit: int) -> Mutation:
    return _set("OCI.Process.Rlimits", [{"Type": kind, "Hard": limit, "Soft": limit}])


def _pull_text(text: str) -> Mutation:
    return _set("storages.0.driver_options", [f"image_guest_pull={text}"])


def _pull_metadata(genuine: str, *, type_: str | None = "container", **changes: str) -> Mutation:
    """The genuine guest-pull JSON with entries of its metadata changed (type_ None: removed)."""
    document = json.loads(genuine)
    metadata = document["metadata"]
    if type_ is None:
        del metadata["io.kubernetes.cri.container-type"]
    else:
        metadata["io.kubernetes.cri.container-type"] = type_
    metadata.update(changes)
    return _pull_text(json.dumps(document, separators=(",", ":"), sort_keys=True))


def _emptydirs_share_one_storage(request: Request) -> None:
    """/tmp mounted from /replay/out's storage: a scratch file could overwrite the output."""
    mounts = {m["destination"]: m for m in request["OCI"]["Mounts"]}
    tmp_source = mounts["/tmp"]["source"]
    mounts["/tmp"]["source"] = mounts["/replay/out"]["source"]
    request["storages"] = [s for s in request["storages"] if s["mount_point"] != tmp_source]


def _field_mutations(pod: ReplayPod) -> dict[str, Mutation]:
    """The fields the red team found admitted (issue 28): each pinned or denied now."""
    genuine = pod.replay()["storages"][0]["driver_options"][0].partition("=")[2]
    return {
        "rlimit nofile": _rlimit("RLIMIT_NOFILE", 3),
        "rlimit fsize": _rlimit("RLIMIT_FSIZE", 4096),
        "rlimit as": _rlimit("RLIMIT_AS", 256 * 1024**2),
        "rlimit cpu": _rlimit("RLIMIT_CPU", 5),
        "rlimit stack": _rlimit("RLIMIT_STACK", 65536),
        "memory limit 16Mi": _set("OCI.Linux.Resources.Memory.Limit", 16 * 1024**2),
        "OOM killer disabled": _set("OCI.Linux.Resources.Memory.DisableOOMKiller", True),
        "cpu quota 1ms per 100ms": _set("OCI.Linux.Resources.CPU.Quota", 1000),
        "cpu period stretched": _set("OCI.Linux.Resources.CPU.Period", 1_000_000_000),
        "cpu pinned to one": _set("OCI.Linux.Resources.CPU.Cpus", "0"),
        "cpu realtime": _set("OCI.Linux.Resources.CPU.RealtimeRuntime", 950000),
        "hugepage limits": _set(
            "OCI.Linux.Resources.HugepageLimits", [{"Pagesize": "2MB", "Limit": 0}]
        ),
        "cgroups path root": _set("OCI.Linux.CgroupsPath", "/"),
        "cgroups path dotdot": _set("OCI.Linux.CgroupsPath", "../../.."),
        "cgroups path of another container": _edit(
            "OCI.Linux.CgroupsPath", lambda p: p.replace(pod.replay_id, pod.sandbox_id)
        ),
        "hostname": _set("OCI.Hostname", "evil"),
        "HOSTNAME of another pod of the job": _env(
            lambda env: [
                f"HOSTNAME={pod.pod_name[:-5]}zzzzz" if e.startswith("HOSTNAME=") else e
                for e in env
            ]
        ),
        "capabilities null": _set("OCI.Process.Capabilities", None),
        "pull metadata says sandbox": _pull_metadata(genuine, type_="sandbox"),
        "pull metadata of the pause image": _pull_metadata(
            genuine, type_="sandbox", **{"io.kubernetes.cri.image-name": "pause"}
        ),
        "pull metadata CRI-O sandbox": _pull_metadata(
            genuine, **{"io.kubernetes.cri-o.ContainerType": "sandbox"}
        ),
        "pull metadata kata type sandbox": _pull_metadata(
            genuine, **{"io.katacontainers.pkg.oci.container_type": "pod_sandbox"}
        ),
        "pull metadata without a type": _pull_metadata(genuine, type_=None),
        "pull metadata key no annotation has": _pull_metadata(genuine, **{"x.example/y": "z"}),
        "pull metadata type twice": _pull_text(
            genuine[:-2] + ',"io.kubernetes.cri.container-type":"sandbox"}}'
        ),
        "pull metadata escaped key": _pull_text(
            genuine[:-2] + ',"io.kubernetes.cri\\u002dcontainer-type":"sandbox"}}'
        ),
        "pull metadata second top-level key": _pull_text(genuine[:-1] + ',"metadata2":{}}'),
        "pull metadata nested value": _pull_text(genuine[:-2] + ',"a":{"b":"c"}}}'),
        "pull metadata garbage": _pull_text("not-json"),
        "pull metadata truncated": _pull_text(genuine[:-1]),
        "/tmp and /replay/out from one storage": _emptydirs_share_one_storage,
    }


def _mutations(pod: ReplayPod) -> dict[str, Mutation]:
    return {
        **_arg_mutations(pod),
        **_env_mutations(),
        **_mount_mutations(pod),
        **_other_mutations(pod),
        **_field_mutations(pod),
    }


def test_every_single_field_mutation_of_the_replay_container_is_denied(
    snp_policy: str, snp_pod: ReplayPod
) -> None:
    genuine = snp_pod.replay()
    mutations = _mutations(snp_pod)
    assert len(mutations) > 120
    verdicts: dict[str, dict[str, bool]] = {}
    for engine, factory in ENGINES.items():
        agent = factory(snp_policy)
        start_pod(agent, snp_pod)
        assert agent.allows("CreateContainerRequest", copy.deepcopy(genuine))
        agent = factory(snp_policy)  # a fresh VM: the replay container is created only once
        start_pod(agent, snp_pod)
        for name, mutation in mutations.items():
            if engine == "regopy" and name in REGOPY_CANNOT_ANSWER:
                continue
            request = copy.deepcopy(genuine)
            mutation(request)
            assert request != genuine, name
            verdicts.setdefault(name, {})[engine] = agent.allows("CreateContainerRequest", request)
    allowed = {name: v for name, v in verdicts.items() if any(v.values())}
    assert allowed == {}
    assert all(len(verdicts[name]) == 2 for name in REGOPY_CANNOT_ANSWER)


#: rego-cpp 1.5.2 (regopy) returns output its own Python binding cannot parse when the
#: policy decodes a JSON string holding a \u escape; the agent's regorus answers these.
REGOPY_CANNOT_ANSWER = frozenset({"pull metadata escaped key"})


@pytest.fixture(scope="module")
def snp_agent(snp_policy: str, snp_pod: ReplayPod) -> RegorusAgent:
    agent = RegorusAgent(snp_policy, rego_v0=False)
    start_pod(agent, snp_pod)
    witness = RegorusAgent(snp_policy, rego_v0=False)  # the unmutated request passes here
    start_pod(witness, snp_pod)
    assert witness.allows("CreateContainerRequest", snp_pod.replay())
    return agent


@given(
    name=st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,30}\Z"),
    value=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40),
)
def test_no_unpinned_environment_variable_is_admitted(
    snp_agent: RegorusAgent, snp_pod: ReplayPod, name: str, value: str
) -> None:
    """A denial changes no state, so one agent answers every example."""
    request = snp_pod.replay()
    request["OCI"]["Process"]["Env"].append(f"{name}={value}")
    before = copy.deepcopy(snp_agent.data)
    assert not snp_agent.allows("CreateContainerRequest", request)
    assert snp_agent.data == before
    assert "replay" not in before["pstate"]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_exec_is_denied(snp_policy: str, snp_pod: ReplayPod, engine: str) -> None:
    agent = ENGINES[engine](snp_policy)
    start_pod(agent, snp_pod)
    assert agent.allows("CreateContainerRequest", snp_pod.replay())
    args = [*snp_pod.container["command"], *snp_pod.container["args"]]
    for command in (["/bin/sh"], ["python3", "-c", "print(1)"], args):
        assert not agent.allows("ExecProcessRequest", snp_pod.exec_process(command))
    for name in (
        "WriteStreamRequest",
        "CloseStdinRequest",
        "TtyWinResizeRequest",
        "SetPolicyRequest",
    ):
        assert not agent.allows(
            name, {"container_id": snp_pod.replay_id, "exec_id": snp_pod.replay_id}
        )
    assert not agent.allows(
        "GetDiagnosticDataRequest", {"container_id": snp_pod.replay_id, "log_type": "console"}
    )


ALWAYS_DENIED = (
    "AddSwapPathRequest",
    "AddSwapRequest",
    "CloseStdinRequest",
    "ExecProcessRequest",
    "GetIPTablesRequest",
    "GetMetricsRequest",
    "ListInterfacesRequest",
    "ListRoutesRequest",
    "MemAgentCompactConfig",
    "MemAgentMemcgConfig",
    "MemHotplugByProbeRequest",
    "PauseContainerRequest",
    "PullImageRequest",
    "ReseedRandomDevRequest",
    "ResizeVolumeRequest",
    "ResumeContainerRequest",
    "SetGuestDateTimeRequest",
    "SetIPTablesRequest",
    "SetPolicyRequest",
    "StartTracingRequest",
    "StopTracingRequest",
    "TtyWinResizeRequest",
    "UpdateContainerRequest",
    "UpdateEphemeralMountsRequest",
    "VolumeStatsRequest",
    "WriteStreamRequest",
    "AnUnknownFutureRequest",
)


def test_requests_the_pod_never_needs_are_denied(snp_policy: str) -> None:
    for factory in ENGINES.values():
        agent = factory(snp_policy)
        assert [name for name in ALWAYS_DENIED if agent.allows(name, {})] == []


# -- upstream requests ---------------------------------------------------------------------


def test_upstream_containers_and_execs_are_denied(snp_policy: str, snp_pod: ReplayPod) -> None:
    """Kata's and regorus' real container and exec requests: none is this replay."""
    samples = [e for e in INDEX if e["kind"] in {"CreateContainerRequest", "ExecProcessRequest"}]
    assert len(samples) == 66
    for engine in ("regorus-v1", "regorus-v0"):
        agent = ENGINES[engine](snp_policy)
        assert agent.allows("CreateSandboxRequest", snp_pod.create_sandbox())
        admitted = [e["id"] for e in samples if agent.allows(e["kind"], upstream_request(e))]
        assert admitted == []


def test_upstream_copies_refused_upstream_are_refused(snp_policy: str) -> None:
    refused = [e for e in INDEX if e["kind"] == "CopyFileRequest" and not e["upstream_verdict"]]
    assert len(refused) == 9
    for factory in ENGINES.values():
        agent = factory(snp_policy)
        for entry in refused:
            request = upstream_request(entry)
            assert not agent.allows("CopyFileRequest", request), entry["id"]
            # The same request aimed at one of this pod's copied trees: still refused.
            ours = {**request, "path": request["path"].replace("-foo", "-publish")}
            assert not agent.allows("CopyFileRequest", ours), entry["id"]


def test_upstream_copies_of_pod_infrastructure_are_allowed(snp_policy: str) -> None:
    """resolv.conf as the runtime copies it; a tree's directory and a symlink inside it."""
    by_id = {e["id"]: e for e in INDEX}
    resolv = upstream_request(by_id["kata-copyfile-00-CopyFileRequest"])
    directory = upstream_request(by_id["kata-copyfile-10-CopyFileRequest"])
    symlink = upstream_request(by_id["kata-copyfile-12-CopyFileRequest"])
    for factory in ENGINES.values():
        agent = factory(snp_policy)
        assert agent.allows("CopyFileRequest", resolv)
        for request in (directory, symlink):
            assert not agent.allows("CopyFileRequest", request)  # "-foo" is not a tree of ours
            ours = {**request, "path": request["path"].replace("-foo", "-publish")}
            assert agent.allows("CopyFileRequest", ours)


def test_upstream_network_and_sandbox_requests_get_upstream_verdicts(snp_policy: str) -> None:
    kinds = {
        "AddARPNeighborsRequest",
        "UpdateInterfaceRequest",
        "UpdateRoutesRequest",
        "CreateSandboxRequest",
    }
    samples = [e for e in INDEX if e["kind"] in kinds]
    assert len(samples) == 19
    for factory in ENGINES.values():
        # Each CreateSandboxRequest sample is the first of its own sandbox (a second one is
        # refused: tests/coco/test_host_attacks.py); the other kinds keep no state.
        verdicts = {
            e["id"]: factory(snp_policy).allows(e["kind"], upstream_request(e)) for e in samples
        }
        assert verdicts == {e["id"]: e["upstream_verdict"] for e in samples}


def test_an_upstream_pause_container_runs_when_kata_pulls_it_in_the_guest(
    snp_policy: str, snp_pod: ReplayPod
) -> None:
    """regorus' logged pause container comes from a Kata that shares the host's rootfs; under
    CoCo kata pulls "pause" in the guest and runs the guest's own pause (kata_agent.go
    handleImageGuestPullBlockVolume, agent confidential_data_hub/image.rs): DERIVED by applying
    exactly that to the logged request, with this Job's pod name."""
    entry = next(
        e for e in INDEX if e["id"] == "regorus-k8s-policy-job-L005-CreateContainerRequest"
    )
    logged = upstream_request(entry)
    cid = logged["container_id"]
    guest_pulled = copy.deepcopy(logged)
    guest_pulled["OCI"]["Root"]["Path"] = f"/run/kata-containers/{cid}/rootfs"
    annotations = guest_pulled["OCI"]["Annotations"]
    annotations["io.kubernetes.cri.sandbox-name"] = snp_pod.pod_name
    guest_pulled["storages"] = [guest_pull_storage(cid, "pause", annotations)]
    guest_pulled["OCI"]["Hostname"] = snp_pod.hostname  # the logged one is its pod's name too
    for factory in ENGINES.values():
        agent = factory(snp_policy)
        assert agent.allows("CreateSandboxRequest", snp_pod.create_sandbox())
        assert not agent.allows("CreateContainerRequest", logged)
        assert agent.allows("CreateContainerRequest", guest_pulled)


# -- the policies this project shipped before --------------------------------------------


@pytest.mark.parametrize("name", ["builtin-default", "snp-overlay"])
def test_the_previous_allow_all_policies_fail_these_assertions(
    snp_pod: ReplayPod, name: str
) -> None:
    previous = (COCO / "previous" / f"{name}.policy.rego").read_text()
    agent = ENGINES["regorus-v1"](previous)
    hijacked = snp_pod.replay()
    hijacked["OCI"]["Process"]["Args"] = ["python3", "-c", "import urllib.request ..."]
    hijacked["OCI"]["Process"]["Env"].append("PYTHONPATH=/tmp")
    assert agent.allows("CreateContainerRequest", hijacked)  # any container runs
    into_rootfs = next(e for e in INDEX if e["id"] == "kata-copyfile-04-CopyFileRequest")
    standard_copy = snp_pod.replay_copies()[0]
    if name == "builtin-default":
        assert agent.allows("CopyFileRequest", upstream_request(into_rootfs))  # /bin/sh replaced
    else:
        assert not agent.allows("CopyFileRequest", standard_copy)  # the pod could not start


# -- what the generator will not model ----------------------------------------------------


def _pod_spec(built: BuiltReplay) -> dict[str, Any]:
    return copy.deepcopy(built.job["spec"]["template"]["spec"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda p: p["containers"].append(copy.deepcopy(p["containers"][0])),
            "admits one container",
        ),
        (lambda p: p.update(initContainers=[{"name": "init"}]), "does not model pod fields"),
        (lambda p: p.update(shareProcessNamespace=True), "does not model pod fields"),
        (lambda p: p.update(automountServiceAccountToken=True), "automountServiceAccountToken"),
        (lambda p: p.update(enableServiceLinks=True), "enableServiceLinks"),
        (
            lambda p: p["containers"][0].update(livenessProbe={"exec": {"command": ["true"]}}),
            "container fields",
        ),
        (
            lambda p: p["containers"][0]["env"].append(
                {"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
            ),
            "literal environment variables",
        ),
        (
            lambda p: p["containers"][0]["securityContext"].update(readOnlyRootFilesystem=False),
            "read-only root",
        ),
        (
            lambda p: (
                p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
                p["containers"][0]["volumeMounts"].append({"name": "h", "mountPath": "/host"}),
            ),
            "does not model volume",
        ),
    ],
)
def test_pod_features_the_policy_does_not_model_are_refused(
    snp: BuiltReplay, change: Callable[[dict[str, Any]], Any], message: str
) -> None:
    pod_spec = _pod_spec(snp)
    change(pod_spec)
    with pytest.raises(UsageError, match=message):
        policy_module.render_policy(pod_spec, job_name=snp.job["metadata"]["name"])


# -- the policy text itself ----------------------------------------------------------------

#: Builtins of regorus' core and of the features kata builds it with (arc, base64, base64url,
#: regex, std: src/agent/policy/Cargo.toml; json.* and trim_prefix are core in regorus 0.2.8 and
#: at kata's rev 898643129e, src/builtins/encoding.rs, strings.rs), none of which can fail on
#: well-formed input (json.unmarshal only runs on what json.is_valid accepted).
ALLOWED_BUILTINS = {
    "array.concat",
    "base64url.encode",
    "bits.and",
    "bits.negate",
    "bits.or",
    "concat",
    "count",
    "is_null",
    "is_object",
    "is_string",
    "json.is_valid",
    "json.unmarshal",
    "object.keys",
    "regex.find_all_string_submatch_n",
    "regex.match",
    "replace",
    "split",
    "startswith",
    "trim_prefix",
}


def test_the_rules_call_only_builtins_kata_builds_in() -> None:
    rules = policy_module.rules()
    code = "\n".join(line.split("#", 1)[0] for line in rules.splitlines())
    code = re.sub(r'`[^`]*`|"(?:[^"\\]|\\.)*"', '""', code)  # string literals call nothing
    defined = set(re.findall(r"^([a-z_][a-z0-9_]*)\(", code, re.MULTILINE))
    called = set(re.findall(r"\b([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)\(", code))
    assert called - defined == ALLOWED_BUILTINS
    assert "AllowRequestsFailingPolicy := false" in rules


def test_the_policy_depends_only_on_what_runs() -> None:
    """Resources, deadlines and namespace do not change the init-data; run parameters do."""
    base = replay_spec()
    same = [
        replay_spec(
            cpu=8, memory="16Gi", namespace="other", backoff_limit=0, ttl_seconds_after_finished=60
        ),
        replay_spec(runtime_class="kata-qemu-snp-custom"),
    ]
    different = [
        replay_spec(run_id="run-8"),
        replay_spec(checksum="sha256:" + "22" * 32),
        replay_spec(image=OTHER_IMAGE),
        replay_spec(overlay="coco-dev"),
        replay_spec(publish_url=None, publish_token_secret=None),
    ]
    base_host_data = build_replay(base).init_data.host_data
    assert all(build_replay(spec).init_data.host_data == base_host_data for spec in same)
    assert all(build_replay(spec).init_data.host_data != base_host_data for spec in different)
