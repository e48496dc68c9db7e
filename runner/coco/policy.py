"""The Kata agent policy that admits one replay pod and nothing else.

The policy is our rules (``agent_policy.rego``, shipped with the package) followed by
``policy_data := {...}``: a table of the exact values the agent must see for this pod, derived
here from the pod spec the Job builder made, the way Kata's genpolicy derives its table from a
pod's YAML. Deriving it from the built pod spec, never from the run parameters directly, is what
keeps the Job and its policy from drifting apart.

Only what :func:`runner.k8s.job.build_job` can produce is modelled; any other pod feature (a
second container, exec probes, host namespaces, environment from Secrets...) is refused here
rather than silently admitted or silently denied later in the guest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Final

from attestation.contracts import SHARD_INDEX_VARIABLE
from runner.coco import kata
from runner.errors import UsageError

RULES_RESOURCE: Final = "agent_policy.rego"

#: The ``KUBERNETES_*`` variables kubelet sets in every container for the API server's Service,
#: even with ``enableServiceLinks: false`` (kubelet ``getServiceEnvVarMap``), in the formats it
#: writes them (pkg/kubelet/envvars/envvars.go: the ClusterIP as Go prints it, IPv6 in
#: brackets inside the ``tcp://`` URLs, ``net.JoinHostPort``); their values are the cluster's.
_IPV4: Final = r"(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}"
_IPV6: Final = r"[0-9a-f]{0,4}(:[0-9a-f]{0,4}){2,7}"
_IP: Final = f"({_IPV4}|{_IPV6})"
_URL_HOST: Final = rf"({_IPV4}|\[{_IPV6}\])"
_PORT: Final = "[0-9]{1,5}"
KUBELET_SERVICE_ENV_PATTERNS: Final = (
    f"^KUBERNETES_SERVICE_HOST={_IP}$",
    f"^KUBERNETES_SERVICE_PORT={_PORT}$",
    f"^KUBERNETES_SERVICE_PORT_HTTPS={_PORT}$",
    f"^KUBERNETES_PORT=tcp://{_URL_HOST}:{_PORT}$",
    f"^KUBERNETES_PORT_{_PORT}_TCP=tcp://{_URL_HOST}:{_PORT}$",
    f"^KUBERNETES_PORT_{_PORT}_TCP_PROTO=tcp$",
    f"^KUBERNETES_PORT_{_PORT}_TCP_PORT={_PORT}$",
    f"^KUBERNETES_PORT_{_PORT}_TCP_ADDR={_IP}$",
)

_REGEX_SPECIALS: Final = frozenset(".^$*+?()[]{}|\\")


def regex_literal(text: str) -> str:
    """``text`` as a regular expression that matches exactly it (RE2/Rust regex syntax)."""
    return "".join("\\" + char if char in _REGEX_SPECIALS else char for char in text)


def rules() -> str:
    """Our Rego rules, as shipped in the package."""
    return resources.files("runner.coco").joinpath(RULES_RESOURCE).read_text(encoding="utf-8")


def render_policy(
    pod_spec: Mapping[str, Any], *, job_name: str, shard_count: int | None = None
) -> str:
    """``policy.rego`` for the pod template ``pod_spec`` of the Job ``job_name`` (an Indexed
    Job of ``shard_count`` indices when given: one policy, one init-data, for every index)."""
    data = policy_data(pod_spec, job_name=job_name, shard_count=shard_count)
    return f"{rules()}\npolicy_data := {json.dumps(data, indent=2, sort_keys=True)}\n"


def pod_name_pattern(job_name: str, *, shard_count: int | None = None) -> str:
    """The names the API server can give this Job's pods.

    Unsharded: ``<job>-<5 random>`` (generateName ``<job>-``, cut to 58 characters); the pod's
    hostname is its name. An Indexed Job's pods are ``<job>-<index>-<5 random>`` (the Job
    controller's ``podGenerateNameWithIndex``; our Job names leave room, so nothing is cut).
    """
    if shard_count is None:
        prefix = regex_literal(f"{job_name}-"[: kata.GENERATED_NAME_PREFIX_MAX])
    else:
        prefix = f"{regex_literal(job_name)}-{index_pattern(shard_count)}-"
    return f"^{prefix}{kata.GENERATED_NAME_SUFFIX}$"


def hostname_pattern(job_name: str, *, shard_count: int | None = None) -> str:
    """The pod's hostname (the container's ``HOSTNAME``): its name, or for an Indexed Job the
    ``spec.hostname`` the Job controller sets, ``<job>-<index>``."""
    if shard_count is None:
        return pod_name_pattern(job_name)
    return f"^{regex_literal(job_name)}-{index_pattern(shard_count)}$"


def index_pattern(shard_count: int) -> str:
    """Exactly the completion indices 0..shard_count-1, as the controller writes them."""
    return "(" + "|".join(str(index) for index in range(shard_count)) + ")"


def policy_data(
    pod_spec: Mapping[str, Any], *, job_name: str, shard_count: int | None = None
) -> dict[str, Any]:
    """The table the rules read: the replay container, its pod, the sandbox and the network."""
    container = _only_container(pod_spec)
    pod_security = _mapping(pod_spec, "securityContext")
    uid = _int(pod_security, "runAsUser")
    gid = _int(pod_security, "runAsGroup")
    fs_group = _int(pod_security, "fsGroup")
    volumes = {volume["name"]: volume for volume in _list(pod_spec, "volumes")}
    mounts, files, trees, emptydirs = _container_mounts(container, volumes)
    env_patterns = [f"^HOSTNAME={hostname_pattern(job_name, shard_count=shard_count)[1:-1]}$"]
    if shard_count is not None:
        # Added to the container by the Job controller (a fieldRef to the pod's completion
        # index label or annotation): the only thing that differs between the indices' pods.
        env_patterns.append(f"^{SHARD_INDEX_VARIABLE}={index_pattern(shard_count)}$")
    pod: dict[str, str] = {
        "name_regex": pod_name_pattern(job_name, shard_count=shard_count),
        "hostname_regex": hostname_pattern(job_name, shard_count=shard_count),
        "index_variable": SHARD_INDEX_VARIABLE,
    }
    if shard_count is not None:
        pod["index_prefix"] = f"{job_name}-"  # the hostname is "<job>-<index>"
    return {
        "pod": pod,
        "replay": {
            "name": container["name"],
            "image": container["image"],
            "args": [*_strings(container, "command"), *_strings(container, "args")],
            "cwd": container["workingDir"],
            "uid": uid,
            "gid": gid,
            "additional_gids": sorted({gid, fs_group}),
            "fs_group": fs_group,
            "local_storage_options": ["mode=0777", f"fsgid={fs_group}"],
            "env": [f"{item['name']}={item['value']}" for item in _env(container)],
            "env_patterns": [*env_patterns, *KUBELET_SERVICE_ENV_PATTERNS],
            "termination_message_path": container["terminationMessagePath"],
            "mounts": mounts,
            "emptydir_destinations": emptydirs,
        },
        "sandbox": {"mounts": _sandbox_mounts()},
        "linux": {
            "masked_paths": list(kata.MASKED_PATHS),
            "readonly_paths": list(kata.READONLY_PATHS),
            "sysctls": dict(kata.DEFAULT_SYSCTLS),
            "min_memory_limit": kata.MIN_MEMORY_LIMIT,
            "min_cpu_quota_per_period": kata.MIN_CPU_QUOTA_PER_PERIOD,
            "cgroups_path_patterns": list(kata.CGROUPS_PATH_PATTERNS),
        },
        "signals": list(kata.STOP_SIGNALS),
        "copy_file": {"files": sorted(files), "trees": sorted(trees)},
        "network": kata.NETWORK,
    }


# -- the pod spec, checked against what is modelled ----------------------------------------

_POD_KEYS: Final = frozenset(
    {
        "restartPolicy",
        "runtimeClassName",
        "serviceAccountName",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "securityContext",
        "containers",
        "volumes",
        "nodeSelector",
    }
)
_CONTAINER_KEYS: Final = frozenset(
    {
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "workingDir",
        "env",
        "resources",
        "securityContext",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "volumeMounts",
    }
)


def _only_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any]:
    unknown = set(pod_spec) - _POD_KEYS
    if unknown:
        raise UsageError(f"the agent policy does not model pod fields {sorted(unknown)}")
    if pod_spec.get("automountServiceAccountToken") is not False:
        raise UsageError("the agent policy needs automountServiceAccountToken: false")
    if pod_spec.get("enableServiceLinks") is not False:
        raise UsageError("the agent policy needs enableServiceLinks: false")
    containers = _list(pod_spec, "containers")
    if len(containers) != 1:
        raise UsageError(f"the agent policy admits one container, the pod has {len(containers)}")
    container = containers[0]
    if not isinstance(container, Mapping):
        raise UsageError("the pod's container must be an object")
    unknown = set(container) - _CONTAINER_KEYS
    if unknown:
        raise UsageError(f"the agent policy does not model container fields {sorted(unknown)}")
    security = _mapping(container, "securityContext")
    if (
        security.get("allowPrivilegeEscalation") is not False
        or security.get("readOnlyRootFilesystem") is not True
        or security.get("capabilities") != {"drop": ["ALL"]}
    ):
        raise UsageError(
            "the agent policy needs a container without privilege escalation, with a "
            "read-only root filesystem and all capabilities dropped"
        )
    for key in ("image", "workingDir", "terminationMessagePath"):
        if not isinstance(container.get(key), str):
            raise UsageError(f"the agent policy needs the container's {key}")
    return container


def _env(container: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    env = _list(container, "env")
    for item in env:
        if set(item) != {"name", "value"} or "=" in item["name"]:
            raise UsageError(f"the agent policy pins literal environment variables only: {item}")
    return env


def _container_mounts(
    container: Mapping[str, Any], volumes: Mapping[str, Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[str], list[str], list[str]]:
    """Expected mounts, the names of copied files and trees, and the emptyDir destinations."""
    mounts = [_fixed(*mount) for mount in (*kata.KERNEL_MOUNTS, kata.CGROUP_MOUNT)]
    mounts.append(_shm())
    files = [name for _, name in kata.KUBELET_FILES]
    mounts += [_copied(dest, name, read_only=False) for dest, name in kata.KUBELET_FILES]
    termination = container["terminationMessagePath"]
    files.append(_basename(termination))
    mounts.append(_copied(termination, _basename(termination), read_only=False))
    containerenv, containerenv_name = kata.CRIO_CONTAINERENV
    files.append(containerenv_name)
    mounts.append(_copied(containerenv, containerenv_name, read_only=True) | {"optional": True})
    trees: list[str] = []
    emptydirs: list[str] = []
    for mount in _list(container, "volumeMounts"):
        if set(mount) - {"name", "mountPath", "readOnly"}:
            raise UsageError(f"the agent policy does not model volume mount {mount}")
        volume = volumes[mount["name"]]
        destination = mount["mountPath"]
        read_only = mount.get("readOnly", False) is True
        kinds = set(volume) - {"name"}
        if kinds == {"emptyDir"}:
            mounts.append(_emptydir(destination, mount["name"]))
            emptydirs.append(destination)
        elif kinds in ({"secret"}, {"persistentVolumeClaim"}) and read_only:
            trees.append(_basename(destination))
            mounts.append(_copied(destination, _basename(destination), read_only=True))
        else:
            raise UsageError(f"the agent policy does not model volume {volume} at {destination}")
    names = files + trees
    if len(set(names)) != len(names):
        raise UsageError(f"two mounts of the pod would be copied under one name: {names}")
    return mounts, files, trees, emptydirs


def _sandbox_mounts() -> list[dict[str, Any]]:
    """What the pause container may carry; the agent runs its own pause image in it."""
    mounts = [_fixed(*mount) for mount in kata.KERNEL_MOUNTS]
    mounts.append(_shm())
    mounts += [_copied(dest, name, read_only=False) for dest, name in kata.KUBELET_FILES]
    return mounts


def _fixed(
    destination: str, kind: str, source: str, allowed: Sequence[str], required: Sequence[str]
) -> dict[str, Any]:
    return {
        "destination": destination,
        "variants": [_variant(kind, allowed, required, source=source)],
    }


def _shm() -> dict[str, Any]:
    return {
        "destination": "/dev/shm",  # noqa: S108 - the container's mount point, not a temp file
        "variants": [
            _variant("bind", ("rbind",), (), source=kata.SANDBOX_SHM),
            _variant(
                "tmpfs",
                ("noexec", "nosuid", "nodev", "mode=1777", kata.DEFAULT_SHM_SIZE_OPTION),
                (),
                source="shm",
            ),
        ],
    }


def _copied(destination: str, name: str, *, read_only: bool) -> dict[str, Any]:
    pattern = (
        f"^{regex_literal(kata.SHARED_DIR)}$(container-id)-[0-9a-f]{{16}}-{regex_literal(name)}$"
    )
    allowed = [option for option in kata.BIND_OPTIONS if not (read_only and option == "rw")]
    return {
        "destination": destination,
        "variants": [
            _variant("bind", allowed, ("ro",) if read_only else (), source_pattern=pattern)
        ],
    }


def _emptydir(destination: str, volume: str) -> dict[str, Any]:
    return {
        "destination": destination,
        "variants": [
            _variant("bind", kata.EMPTY_DIR_OPTIONS, (), source_pattern=kata.BLOCK_STORAGE_PATTERN),
            _variant(
                "local",
                kata.EMPTY_DIR_OPTIONS,
                (),
                source_pattern=f"{kata.LOCAL_STORAGE_PATTERN}{regex_literal(volume)}$",
            ),
        ],
    }


def _variant(
    kind: str,
    allowed: Sequence[str],
    required: Sequence[str],
    *,
    source: str | None = None,
    source_pattern: str | None = None,
) -> dict[str, Any]:
    variant: dict[str, Any] = {
        "type": kind,
        "options_allowed": list(allowed),
        "options_required": list(required),
    }
    if source is not None:
        variant["source"] = source
    else:
        variant["source_pattern"] = source_pattern
    return variant


def _basename(path: str) -> str:
    return path.rstrip("/").rpartition("/")[2]


def _mapping(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if not isinstance(value, Mapping):
        raise UsageError(f"the agent policy needs {key} in the pod spec")
    return value


def _list(parent: Mapping[str, Any], key: str) -> list[Any]:
    value = parent.get(key, [])
    if not isinstance(value, list):
        raise UsageError(f"{key} in the pod spec must be a list")
    return value


def _strings(parent: Mapping[str, Any], key: str) -> list[str]:
    value = _list(parent, key)
    if not all(isinstance(item, str) for item in value):
        raise UsageError(f"{key} of the container must be strings")
    return value


def _int(parent: Mapping[str, Any], key: str) -> int:
    value = parent.get(key)
    if type(value) is not int:
        raise UsageError(f"the agent policy needs securityContext.{key} as a number")
    return value
