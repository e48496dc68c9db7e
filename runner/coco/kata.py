"""What Kata Containers does to a Kubernetes container before its agent sees it.

Facts from kata-containers 3.28.0-4.1.0 and containerd's CRI defaults, each with its source. The
policy generator (:mod:`runner.coco.policy`) turns a pod spec into the exact requests these
rules produce; the agent policy then admits those and nothing else.
"""

from __future__ import annotations

from typing import Final

#: Where the runtime copies every bind-mounted file when the guest shares no filesystem with
#: the host (``shared_fs = "none"``, the CoCo default since kata 3.6). The copy of a mount is
#: ``<dir><container id>-<16 hex random>-<basename of the mount destination>``
#: (src/runtime/virtcontainers/fs_share_linux.go ``shareFileName``, ``ShareFile``), and the
#: agent writes nowhere else (src/agent/src/rpc.rs ``copy_file``, ``KATA_GUEST_SHARE_DIR``).
SHARED_DIR: Final = "/run/kata-containers/shared/containers/"

#: A container's rootfs pulled inside the guest: ``/run/kata-containers/<id>/rootfs``
#: (fs_share_linux.go ``shareRootFilesystemWithVirtualVolume`` and ``forceGuestPull``, the
#: storage from kata_agent.go ``handleVirtualVolumeStorageObject``).
GUEST_PULL_ROOT: Final = "/run/kata-containers/$(container-id)/rootfs"

#: The sandbox's /dev/shm, which kata bind-mounts into every container (kata_agent.go
#: ``handleShm``); a tmpfs of ``DefaultShmSize`` only when the sandbox has none.
SANDBOX_SHM: Final = "/run/kata-containers/sandbox/shm"
DEFAULT_SHM_SIZE_OPTION: Final = "size=67108864"

#: Block-backed emptyDir (``emptydir_mode = "block-encrypted"``, the CoCo default from kata
#: 3.28.0, Makefile ``DEFEMPTYDIRMODE_COCO``): an ext4 disk encrypted with a key the guest
#: makes, mounted at ``<dir><base64url(device)>`` (kata_agent.go ``handleBlkOCIMounts``;
#: the disk: container.go ``setupEphemeralDisk``; genpolicy-settings.json ``emptyDir_encrypted``).
BLOCK_STORAGE_DIR: Final = "/run/kata-containers/sandbox/storage/"
BLOCK_STORAGE_PATTERN: Final = r"^/run/kata-containers/sandbox/storage/[A-Za-z0-9_-]+={0,2}$"

#: Guest-local emptyDir (``disable_guest_empty_dir = false`` with ``emptydir_mode =
#: "shared-fs"``, e.g. peer pods' configuration-remote.toml): a directory the agent creates in
#: the sandbox rootfs (kata_agent.go ``handleLocalStorage``).
LOCAL_STORAGE_PATTERN: Final = "^/run/kata-containers/shared/containers/[0-9a-f]{64}/rootfs/local/"

#: Mount options containerd gives a bind mount of a volume or of /etc/hosts, /etc/hostname,
#: /etc/resolv.conf and the termination log (genpolicy-settings.json ``other_container``), and
#: CRI-O's non-recursive ``bind`` (v1.37.0 server/container_create.go
#: ``setupBaseContainerMounts``, internal/lib/sandbox/infra.go, server/sandbox_run_linux.go).
BIND_OPTIONS: Final = ("rbind", "bind", "rprivate", "rw", "ro", "nosuid", "nodev", "noexec")

#: The empty file CRI-O creates for every pod and binds read-only at /run/.containerenv in each
#: container (internal/lib/sandbox/sandbox.go ``SetContainerEnvFile``, server/container_create.go
#: ``setupBaseContainerMounts``); kata copies it like any bind mount. containerd has none.
CRIO_CONTAINERENV: Final = ("/run/.containerenv", ".containerenv")
EMPTY_DIR_OPTIONS: Final = ("rbind", "rprivate", "rw")

#: containerd's default mounts of an unprivileged container, with the options it may set
#: (genpolicy src/containerd.rs ``get_mounts``; cgroup extras: genpolicy-settings.json
#: ``cgroup_mount_extras_allowed``). ``ro`` is required where containerd makes them read-only.
KERNEL_MOUNTS: Final = (
    ("/proc", "proc", "proc", ("nosuid", "noexec", "nodev"), ()),
    ("/dev", "tmpfs", "tmpfs", ("nosuid", "strictatime", "mode=755", "size=65536k"), ()),
    (
        "/dev/pts",
        "devpts",
        "devpts",
        ("nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"),
        (),
    ),
    ("/dev/mqueue", "mqueue", "mqueue", ("nosuid", "noexec", "nodev"), ()),
    ("/sys", "sysfs", "sysfs", ("nosuid", "noexec", "nodev", "ro"), ("ro",)),
)
CGROUP_MOUNT: Final = (
    "/sys/fs/cgroup",
    "cgroup",
    "cgroup",
    ("nosuid", "noexec", "nodev", "relatime", "ro", "nsdelegate", "memory_recursiveprot"),
    ("ro",),
)

#: The files kubelet bind-mounts into every container (kuberuntime ``makeMounts``), named by
#: the basename kata uses for their copies.
KUBELET_FILES: Final = (
    ("/etc/hosts", "hosts"),
    ("/etc/hostname", "hostname"),
    ("/etc/resolv.conf", "resolv.conf"),
)

#: Paths containerd masks or makes read-only in an unprivileged container (genpolicy
#: src/containerd.rs ``get_linux``). More is fine; fewer is not.
MASKED_PATHS: Final = (
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
)
READONLY_PATHS: Final = (
    "/proc/asound",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)

#: The namespaced sysctls containerd sets for pods (genpolicy-settings.json ``pause_container``
#: and ``other_container``); a pod spec without ``sysctls`` gets nothing else (CRI-O sets none
#: unless configured: a subset is admitted).
DEFAULT_SYSCTLS: Final = {
    "net.ipv4.ip_unprivileged_port_start": "0",
    "net.ipv4.ping_group_range": "0 2147483647",
}

#: containerd's default PATH, set before the image's own environment (genpolicy
#: src/containerd.rs ``get_default_unix_env``).
CONTAINERD_DEFAULT_PATH: Final = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: What genpolicy allows for the pod network (genpolicy-settings.json ``request_defaults``):
#: no interface, route or neighbour on ``lo``, no route source and no neighbour in loopback
#: addresses, only IFF_NOARP among the interface flags, ARP states NUD_REACHABLE (2) and
#: NUD_PERMANENT (128), and (rules.rego ``AddARPNeighborsRequest``) neighbour flags within
#: NTF_PROXY | NTF_ROUTER (136). attested-replay also refuses loopback interface addresses and
#: route destinations and gateways (the attestation agent listens on 127.0.0.1:8006).
NETWORK: Final = {
    "forbidden_devices": ["lo"],
    "interface_raw_flags": 128,
    "loopback_address_patterns": [
        r"^(?:0{0,4}:){0,7}0{0,3}1$",
        r"^127\.(?:[0-9]{1,3}\.){2}[0-9]{1,3}$",
    ],
    "neighbor_states": [2, 128],
    "neighbor_flags": 136,
}

#: The smallest memory limit a replay container may get (``--memory`` refuses less): the
#: policy's floor for ``Linux.Resources.Memory.Limit``, so that the host cannot starve it.
MIN_MEMORY_LIMIT: Final = 256 * 1024 * 1024

#: The smallest CPU quota per CFS period (one vCPU; ``--cpu`` is a whole number >= 1).
MIN_CPU_QUOTA_PER_PERIOD: Final = 1

#: ``Linux.CgroupsPath`` as the kubelet names it for a container of a pod, with the systemd
#: driver (``<slice>:<prefix>:<id>``: containerd ``cri-containerd``, CRI-O ``crio``) or the
#: cgroupfs driver (``/kubepods[/<qos>]/pod<uid>/<id>``, CRI-O ``.../crio-<id>``); kubelet
#: cm/cgroup_manager_linux.go, containerd internal/cri/server/helpers_linux.go, cri-o v1.37.0
#: internal/config/cgmgr (systemd_linux.go, cgroupfs_linux.go ``ContainerCgroupPath``).
CGROUPS_PATH_PATTERNS: Final = (
    (
        r"^kubepods(-besteffort|-burstable)?-pod[0-9a-f_]{36}\.slice:(cri-containerd|crio):"
        r"$(container-id)$"
    ),
    r"^/kubepods(/besteffort|/burstable)?/pod[0-9a-f-]{36}/(crio-)?$(container-id)$",
)

#: Signals the kubelet has a container's runtime send to stop it: containerd's StopContainer
#: sends the image's stop signal, SIGTERM when it names none (our image names none), then
#: SIGKILL after the grace period (internal/cri/server/container_stop.go); kata's shim stops
#: a sandbox's containers with SIGKILL (virtcontainers container.go stop -> signalProcess).
STOP_SIGNALS: Final = (9, 15)

#: The pod name the API server generates from a Job's ``<name>-``: at most 58 characters of
#: it, then 5 random ones (apiserver ``names.SimpleNameGenerator``; job controller
#: ``podGenerateName``). It is also the pod's hostname.
GENERATED_NAME_PREFIX_MAX: Final = 58
GENERATED_NAME_SUFFIX: Final = "[a-z0-9]{5}"
