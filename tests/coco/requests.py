"""The agent requests Kata sends for a replay pod (shared_fs = none, guest pull), as JSON.

DERIVED from upstream behaviour, not captured on a cluster (no SEV-SNP cluster here). Each
piece cites where it comes from; the field layout is the agent's serde form of the kata
protocol structs (every field present, ``type_`` for ``type``), as in the upstream samples under
tests/assets/coco/requests. Sources (kata-containers 3.28.0-4.1.0, containerd CRI):

* CopyFile: one request per file, directory and symlink of each bind mount, into
  ``/run/kata-containers/shared/containers/<container id>-<16 hex>-<basename(destination)>``
  (fs_share_linux.go ``ShareFile``), as the agent's ``PolicyCopyFileRequest``
  (src/agent/policy/src/policy.rs). Secrets are kubelet's atomic-writer layout:
  ``..<timestamp>/`` holding the files, ``..data -> ..<timestamp>``, ``<key> -> ..data/<key>``.
* CreateContainer: guest-pull rootfs storage (kata_agent.go ``handleImageGuestPullBlockVolume``:
  source = the ``io.kubernetes.cri.image-name`` annotation, or ``pause`` for the sandbox),
  emptyDirs as encrypted block storage (``emptydir_mode = block-encrypted``) or as guest-local
  directories (``handleLocalStorage``), the spec as ``constrainGRPCSpec`` leaves it (no hooks,
  seccomp or network namespace; ipc, uts and mount with empty paths), containerd's default
  mounts, masked paths and sysctls, kubelet's environment (HOSTNAME, KUBERNETES_*).
* Under CRI-O (``runtime="cri-o"``, CRI-O v1.37.0): its annotations (internal/factory/container/
  container.go, server/sandbox_run_linux.go), ``container=crio`` and the spec generator's
  ``TERM=xterm``, ``bind`` options on resolv.conf, hostname and /run/.containerenv
  (server/container_create.go setupBaseContainerMounts, internal/lib/sandbox/infra.go), the
  cgroup ``<slice>:crio:<id>`` (internal/config/cgmgr); the rest as under containerd, which
  CRI-O matches for this pod (kubelet's masked and read-only paths, no rlimits after
  ClearProcessRlimits). Values CRI-O derives from the host (paths, timestamps, JSON records)
  are plausible stand-ins: the guest never reads them.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol

from runner.k8s.job import quantity_bytes

#: How kata backs an emptyDir: "block" = ``emptydir_mode = block-encrypted`` on kata >= 4.0
#: (driver options ``encryption_key=ephemeral`` and ``create_filesystem``), "block-kata3" = the
#: same mode on kata 3.28-3.32, whose runtime sends ``encryption_key=ephemeral`` alone
#: (kata_agent.go ``handleDeviceBlockVolume`` before 4.0.0 has no ``BlockDeviceCreateFs``),
#: "local" = guest-local directories (peer pods).
EmptyDirMode = Literal["block", "block-kata3", "local"]

#: The container runtime on the node: containerd (kata-deploy's default) or CRI-O (OpenShift
#: sandboxed containers and other CRI-O platforms), whose specs differ in annotations, one
#: environment variable, bind-mount options, the cgroup path and /run/.containerenv.
Runtime = Literal["containerd", "cri-o"]

POD_UID: Final = "392939d5-72a0-4421-9cd7-1e89c3f86256"
SECRET_TIMESTAMP_DIR: Final = "..2026_11_30_10_00_00.123456789"
CONTAINERD_PATH: Final = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SERVICE_ENV: Final = (
    "KUBERNETES_SERVICE_PORT_HTTPS=443",
    "KUBERNETES_SERVICE_PORT=443",
    "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
    "KUBERNETES_PORT_443_TCP_PROTO=tcp",
    "KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
    "KUBERNETES_SERVICE_HOST=10.96.0.1",
    "KUBERNETES_PORT=tcp://10.96.0.1:443",
    "KUBERNETES_PORT_443_TCP_PORT=443",
)
KERNEL_MOUNTS: Final = (
    {
        "destination": "/proc",
        "source": "proc",
        "type_": "proc",
        "options": ["nosuid", "noexec", "nodev"],
    },
    {
        "destination": "/dev",
        "source": "tmpfs",
        "type_": "tmpfs",
        "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
    },
    {
        "destination": "/dev/pts",
        "source": "devpts",
        "type_": "devpts",
        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
    },
    {
        "destination": "/dev/mqueue",
        "source": "mqueue",
        "type_": "mqueue",
        "options": ["nosuid", "noexec", "nodev"],
    },
    {
        "destination": "/sys",
        "source": "sysfs",
        "type_": "sysfs",
        "options": ["nosuid", "noexec", "nodev", "ro"],
    },
)
DEFAULT_CAPS: Final = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
S_IFREG: Final = 0o100000
S_IFDIR: Final = 0o040000
S_IFLNK: Final = 0o120000


def container_id(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


class ReplayPod:
    """One pod of a replay Job as the agent sees it: its IDs, copies and containers."""

    def __init__(
        self,
        job: Mapping[str, Any],
        *,
        pod_suffix: str = "x7k2q",
        index: int | None = None,
        runtime: Runtime = "containerd",
    ) -> None:
        self.job = job
        self.runtime = runtime
        self.pod_spec: Mapping[str, Any] = job["spec"]["template"]["spec"]
        self.container: Mapping[str, Any] = self.pod_spec["containers"][0]
        name = job["metadata"]["name"]
        #: The completion index of a pod of an Indexed Job: the Job controller names it
        #: ``<job>-<index>-<random>``, sets ``spec.hostname`` to ``<job>-<index>`` (kubelet's
        #: sandbox hostname, hence HOSTNAME) and adds ``JOB_COMPLETION_INDEX`` to the container.
        self.index = index
        if index is None:
            self.pod_name = f"{name}-"[:58] + pod_suffix
            self.hostname = self.pod_name
        else:
            self.pod_name = f"{name}-{index}-{pod_suffix}"
            self.hostname = f"{name}-{index}"
        self.namespace = job["metadata"]["namespace"]
        self.sandbox_id = container_id(f"{self.pod_name}/sandbox")
        self.replay_id = container_id(f"{self.pod_name}/replay")

    # -- CopyFile ---------------------------------------------------------------------------

    def shared_path(self, cid: str, name: str) -> str:
        random = hashlib.sha256(f"{cid}/{name}".encode()).hexdigest()[:16]
        return f"/run/kata-containers/shared/containers/{cid}-{random}-{name}"

    def sandbox_copies(self) -> list[dict[str, Any]]:
        names = ["resolv.conf"] if self.runtime == "containerd" else ["resolv.conf", "hostname"]
        return [copy_file(self.shared_path(self.sandbox_id, name), "Regular") for name in names]

    def replay_copies(self) -> list[dict[str, Any]]:
        copies = [
            copy_file(self.shared_path(self.replay_id, name), "Regular")
            for name in ("hosts", "termination-log", "hostname", "resolv.conf")
        ]
        if self.runtime == "cri-o":
            copies.append(copy_file(self.shared_path(self.replay_id, ".containerenv"), "Regular"))
        volumes = {volume["name"]: volume for volume in self.pod_spec["volumes"]}
        for mount in self.container["volumeMounts"]:
            volume = volumes[mount["name"]]
            root = self.shared_path(self.replay_id, mount["mountPath"].rpartition("/")[2])
            if "secret" in volume:
                copies += secret_tree(root, [SECRET_KEYS[mount["name"]]])
            elif "persistentVolumeClaim" in volume:
                copies += [
                    copy_file(root, "Directory"),
                    copy_file(f"{root}/corpus", "Directory"),
                    *(copy_file(f"{root}/corpus/{name}", "Regular") for name in CORPUS_FILES),
                ]
        return copies

    # -- CreateSandbox / CreateContainer ---------------------------------------------------

    def create_sandbox(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "dns": ["nameserver 10.96.0.10", "search attested-replay.svc.cluster.local"],
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
            "sandbox_id": self.sandbox_id,
            "guest_hook_path": "",
            "kernel_modules": [],
        }

    def pause(self) -> dict[str, Any]:
        cid = self.sandbox_id
        mounts = [
            *copy.deepcopy(KERNEL_MOUNTS),
            _bind("/dev/shm", "/run/kata-containers/sandbox/shm", ["rbind"]),
            _bind(
                "/etc/resolv.conf",
                self.shared_path(cid, "resolv.conf"),
                ["rbind", "ro", "nosuid", "nodev", "noexec"],
            ),
        ]
        caps = {name: list(DEFAULT_CAPS) for name in ("Bounding", "Effective", "Permitted")}
        caps |= {"Inheritable": [], "Ambient": []}
        annotations = self._annotations("sandbox", cid)
        annotations["io.kubernetes.cri.sandbox-log-directory"] = (
            f"/var/log/pods/{self.namespace}_{self.pod_name}_{POD_UID}"
        )
        oci = _oci(
            _process(
                ["/pause"],
                [CONTAINERD_PATH],
                "/",
                uid=65535,
                gid=65535,
                gids=[65535],
                caps=caps,
                oom=-998,
            ),
            cid,
            mounts,
            annotations,
            hostname=self.hostname,
        )
        if self.runtime == "cri-o":
            self._to_crio(oci, "sandbox")
            oci["Mounts"].append(
                _bind(
                    "/etc/hostname",
                    self.shared_path(cid, "hostname"),
                    ["ro", "bind", "nodev", "nosuid", "noexec"],
                )
            )
        pull = guest_pull_storage(cid, "pause", oci["Annotations"], labels=self._pull_labels())
        return _request(cid, oci, [pull])

    def replay(self, emptydir_mode: EmptyDirMode = "block") -> dict[str, Any]:
        cid = self.replay_id
        container = self.container
        security = self.pod_spec["securityContext"]
        pinned = [f"{item['name']}={item['value']}" for item in container.get("env", [])]
        if self.index is not None:
            pinned.append(f"JOB_COMPLETION_INDEX={self.index}")
        # containerd: its default PATH, HOSTNAME, then the image's and the container's
        # variables replacing by name; kubelet's service variables come with the container's.
        env = [CONTAINERD_PATH, f"HOSTNAME={self.hostname}"]
        for entry in pinned:
            name = entry.partition("=")[0]
            replaced = [i for i, old in enumerate(env) if old.partition("=")[0] == name]
            if replaced:
                env[replaced[0]] = entry
            else:
                env.append(entry)
        env += SERVICE_ENV
        storages: list[dict[str, Any]] = []
        mounts = [
            *copy.deepcopy(KERNEL_MOUNTS),
            {
                "destination": "/sys/fs/cgroup",
                "source": "cgroup",
                "type_": "cgroup",
                "options": ["nosuid", "noexec", "nodev", "relatime", "ro"],
            },
        ]
        volumes = {volume["name"]: volume for volume in self.pod_spec["volumes"]}
        for index, mount in enumerate(container["volumeMounts"]):
            volume = volumes[mount["name"]]
            destination = mount["mountPath"]
            if "emptyDir" in volume:
                storage = _emptydir_storage(
                    emptydir_mode, index, mount["name"], self.sandbox_id, security["fsGroup"]
                )
                storages.append(storage)
                kind = "local" if emptydir_mode == "local" else "bind"
                mounts.append(
                    {
                        "destination": destination,
                        "source": storage["mount_point"],
                        "type_": kind,
                        "options": ["rbind", "rprivate", "rw"],
                    }
                )
            else:
                name = destination.rpartition("/")[2]
                mounts.append(
                    _bind(destination, self.shared_path(cid, name), ["rbind", "rprivate", "ro"])
                )
        mounts += [
            _bind("/etc/hosts", self.shared_path(cid, "hosts"), ["rbind", "rprivate", "rw"]),
            _bind(
                container["terminationMessagePath"],
                self.shared_path(cid, "termination-log"),
                ["rbind", "rprivate", "rw"],
            ),
            _bind("/etc/hostname", self.shared_path(cid, "hostname"), ["rbind", "rprivate", "rw"]),
            _bind(
                "/etc/resolv.conf",
                self.shared_path(cid, "resolv.conf"),
                ["rbind", "rprivate", "rw"],
            ),
            _bind("/dev/shm", "/run/kata-containers/sandbox/shm", ["rbind"]),
        ]
        caps: dict[str, list[str]] = {
            name: [] for name in ("Bounding", "Effective", "Inheritable", "Permitted", "Ambient")
        }
        annotations = self._annotations("container", cid)
        annotations |= {
            "io.kubernetes.cri.container-name": container["name"],
            "io.kubernetes.cri.image-name": container["image"],
            "io.kubernetes.container.terminationMessagePath": container["terminationMessagePath"],
            "io.kubernetes.container.terminationMessagePolicy": container[
                "terminationMessagePolicy"
            ],
        }
        process = _process(
            [*container["command"], *container["args"]],
            env,
            container["workingDir"],
            uid=security["runAsUser"],
            gid=security["runAsGroup"],
            gids=[security["runAsGroup"], security["fsGroup"]],
            caps=caps,
            oom=1000,
        )
        oci = _oci(process, cid, mounts, annotations, hostname="")
        oci["Linux"]["Resources"] |= _guaranteed_resources(container["resources"]["limits"])
        if self.runtime == "cri-o":
            self._to_crio(oci, "container")
            oci["Process"]["Env"] += ["TERM=xterm", "container=crio"]
            oci["Mounts"].append(
                _bind("/run/.containerenv", self.shared_path(cid, ".containerenv"), ["ro", "bind"])
            )
        pull = guest_pull_storage(
            cid, container["image"], oci["Annotations"], labels=self._pull_labels()
        )
        return _request(cid, oci, [pull, *storages])

    def _annotations(self, cri_type: str, cid: str) -> dict[str, str]:
        annotations = {
            "io.katacontainers.pkg.oci.bundle_path": f"/run/containerd/io.containerd.runtime.v2.task/k8s.io/{cid}",
            "io.katacontainers.pkg.oci.container_type": "pod_container"
            if cri_type == "container"
            else "pod_sandbox",
            "io.kubernetes.cri.container-type": cri_type,
            "io.kubernetes.cri.sandbox-id": self.sandbox_id,
            "io.kubernetes.cri.sandbox-name": self.pod_name,
            "io.kubernetes.cri.sandbox-namespace": self.namespace,
            "io.kubernetes.cri.sandbox-uid": POD_UID,
        }
        # containerd passes the pod's io.katacontainers.* annotations on (kata-deploy's
        # pod_annotations), the init-data among them.
        pod_annotations = self.job["spec"]["template"]["metadata"].get("annotations", {})
        annotations |= {
            key: value
            for key, value in pod_annotations.items()
            if key.startswith("io.katacontainers.")
        }
        return annotations

    def _pull_labels(self) -> Mapping[str, str] | None:
        """containerd pulls in the guest through nydus-snapshotter (kata-deploy's default);
        CRI-O has no containerd snapshotter, so the runtime forces the guest pull
        (``experimental_force_guest_pull``, which kata-deploy sets per architecture:
        tools/packaging/kata-deploy/binary/src/artifacts/install.rs) and adds no label."""
        return {} if self.runtime == "cri-o" else None

    # -- CRI-O ---------------------------------------------------------------------------------

    def _to_crio(self, oci: dict[str, Any], cri_type: str) -> None:
        """The same container as CRI-O v1.37.0 specifies it (kata 4.1.0 adds its two keys)."""
        cid = oci["Root"]["Path"].split("/")[3]
        oci["Annotations"] = self._crio_annotations(cri_type, cid)
        oci["Linux"]["CgroupsPath"] = f"kubepods-pod{POD_UID.replace('-', '_')}.slice:crio:{cid}"
        # CRI-O binds resolv.conf and hostname non-recursively, read-only for a read-only
        # rootfs (server/container_create.go setupBaseContainerMounts, infra.go).
        options = {
            "/etc/resolv.conf": ["ro", "bind", "nodev", "nosuid", "noexec"],
            "/etc/hostname": ["ro", "bind"],
        }
        for mount in oci["Mounts"]:
            if mount["destination"] in options:
                mount["options"] = options[mount["destination"]]

    def _crio_annotations(self, cri_type: str, cid: str) -> dict[str, str]:
        """internal/factory/container/container.go (a container), server/sandbox_run_linux.go
        (the pause): CRI-O's keys, the pod's annotations (every one, not only kata-deploy's),
        the kubelet's labels (kuberuntime labels.go) and, for the pause, the pod's labels."""
        template = self.job["spec"]["template"]["metadata"]
        pod_annotations = {
            **template.get("annotations", {}),
            "kubernetes.io/config.seen": "2026-11-30T10:00:00.123456789Z",
            "kubernetes.io/config.source": "api",
        }
        sandbox_name = f"k8s_POD_{self.pod_name}_{self.namespace}_{POD_UID}_0"
        userdata = "/run/containers/storage/overlay-containers/{}/userdata"
        annotations = {
            **pod_annotations,
            "io.container.manager": "cri-o",
            "io.kubernetes.cri-o.ContainerType": cri_type,
            "io.kubernetes.cri-o.ContainerID": cid,
            "io.kubernetes.cri-o.SandboxID": self.sandbox_id,
            "io.kubernetes.cri-o.SandboxName": sandbox_name,
            "io.kubernetes.cri-o.Created": "2026-11-30T10:00:01.123456789Z",
            "io.kubernetes.cri-o.ResolvPath": userdata.format(self.sandbox_id) + "/resolv.conf",
            "io.kubernetes.cri-o.SeccompProfilePath": "",
            "io.kubernetes.cri-o.MountPoint": f"/var/lib/containers/storage/overlay/{cid}/merged",
            "io.kubernetes.cri-o.Annotations": json.dumps(pod_annotations, separators=(",", ":")),
            "io.kubernetes.cri-o.IP.0": "10.244.1.17",
            "io.kubernetes.pod.name": self.pod_name,
            "io.kubernetes.pod.namespace": self.namespace,
            "io.kubernetes.pod.uid": POD_UID,
            "org.systemd.property.After": "['crio.service']",
            "org.systemd.property.DefaultDependencies": "true",
            "io.katacontainers.pkg.oci.bundle_path": userdata.format(cid),
            "io.katacontainers.pkg.oci.container_type": "pod_container"
            if cri_type == "container"
            else "pod_sandbox",
        }
        log_dir = f"/var/log/pods/{self.namespace}_{self.pod_name}_{POD_UID}"
        if cri_type == "sandbox":
            labels = {
                **template.get("labels", {}),
                "batch.kubernetes.io/job-name": self.job["metadata"]["name"],
                "job-name": self.job["metadata"]["name"],
                "batch.kubernetes.io/controller-uid": "6c2f1c1e-4f4a-4c55-9a55-0c1f3c7d5e21",
                "controller-uid": "6c2f1c1e-4f4a-4c55-9a55-0c1f3c7d5e21",
                "io.kubernetes.pod.name": self.pod_name,
                "io.kubernetes.pod.namespace": self.namespace,
                "io.kubernetes.pod.uid": POD_UID,
            }
            annotations |= labels
            annotations |= {
                "io.kubernetes.cri-o.Name": sandbox_name,
                "io.kubernetes.cri-o.ContainerName": sandbox_name,
                "io.kubernetes.cri-o.SandboxID": cid,
                "io.kubernetes.cri-o.Namespace": self.namespace,
                "io.kubernetes.cri-o.KubeName": self.pod_name,
                "io.kubernetes.cri-o.HostName": self.hostname,
                "io.kubernetes.cri-o.HostNetwork": "false",
                "io.kubernetes.cri-o.PrivilegedRuntime": "false",
                "io.kubernetes.cri-o.RuntimeHandler": "kata-qemu-snp",
                "io.kubernetes.cri-o.Image": "registry.k8s.io/pause:3.10",
                "io.kubernetes.cri-o.ImageName": "registry.k8s.io/pause:3.10",
                "io.kubernetes.cri-o.ShmPath": userdata.format(cid) + "/shm",
                "io.kubernetes.cri-o.HostnamePath": userdata.format(cid) + "/hostname",
                "io.kubernetes.cri-o.CgroupParent": f"kubepods-pod{POD_UID.replace('-', '_')}.slice",
                "io.kubernetes.cri-o.LogPath": f"{log_dir}/{cid}.log",
                "io.kubernetes.cri-o.Metadata": json.dumps(
                    {"name": self.pod_name, "uid": POD_UID, "namespace": self.namespace},
                    separators=(",", ":"),
                ),
                "io.kubernetes.cri-o.Labels": json.dumps(labels, separators=(",", ":")),
                "io.kubernetes.cri-o.NamespaceOptions": '{"pid":1}',
                "io.kubernetes.cri-o.PortMappings": "[]",
                "io.kubernetes.cri-o.CNIResult": '{"cniVersion":"1.0.0"}',
                "pod-linux-overhead.crio.io": '{"cpu_period":100000,"cpu_quota":100000}',
                "pod-linux-resources.crio.io": '{"cpu_period":100000}',
            }
            return annotations
        container = self.container
        name = container["name"]
        labels = {
            "io.kubernetes.container.name": name,
            "io.kubernetes.pod.name": self.pod_name,
            "io.kubernetes.pod.namespace": self.namespace,
            "io.kubernetes.pod.uid": POD_UID,
        }
        kubelet_annotations = {
            "io.kubernetes.container.hash": "5b1a3d1f",
            "io.kubernetes.container.restartCount": "0",
            "io.kubernetes.container.terminationMessagePath": container["terminationMessagePath"],
            "io.kubernetes.container.terminationMessagePolicy": container[
                "terminationMessagePolicy"
            ],
            "io.kubernetes.pod.terminationGracePeriod": "30",
        }
        return (
            annotations
            | labels
            | kubelet_annotations
            | {
                "io.kubernetes.cri-o.Name": f"k8s_{name}_{self.pod_name}_{self.namespace}_{POD_UID}_0",
                "io.kubernetes.cri-o.Image": container["image"],
                "io.kubernetes.cri-o.ImageName": container["image"],
                "io.kubernetes.cri-o.ImageRef": "e3" * 32,
                "io.kubernetes.cri-o.ImageRepoDigests": container["image"],
                "io.kubernetes.cri-o.TTY": "false",
                "io.kubernetes.cri-o.Stdin": "false",
                "io.kubernetes.cri-o.StdinOnce": "false",
                "io.kubernetes.cri-o.LogPath": f"{log_dir}/{name}/0.log",
                "io.kubernetes.cri-o.Metadata": json.dumps({"name": name}, separators=(",", ":")),
                "io.kubernetes.cri-o.Labels": json.dumps(labels, separators=(",", ":")),
                "io.kubernetes.cri-o.Volumes": "[]",
                "platform-runtime-path.crio.io": "",
                "org.systemd.property.TimeoutStopUSec": "uint64 30000000",
            }
        )

    # -- the other requests of a pod's life -------------------------------------------------

    def lifecycle(self) -> list[tuple[str, dict[str, Any]]]:
        cid = self.replay_id
        return [
            ("UpdateInterfaceRequest", UPDATE_INTERFACE),
            ("UpdateRoutesRequest", UPDATE_ROUTES),
            ("GuestDetailsRequest", {"mem_block_size": True, "mem_hotplug_probe": True}),
            ("StartContainerRequest", {"container_id": cid}),
            ("ReadStreamRequest", {"container_id": cid, "exec_id": cid, "len": 32768}),
            ("StatsContainerRequest", {"container_id": cid}),
            ("WaitProcessRequest", {"container_id": cid, "exec_id": cid}),
            ("GetDiagnosticDataRequest", {"container_id": cid, "log_type": "termination_log"}),
            ("SignalProcessRequest", {"container_id": cid, "exec_id": "", "signal": 9}),
            ("RemoveContainerRequest", {"container_id": cid, "timeout": 0}),
            ("DestroySandboxRequest", {}),
        ]

    def exec_process(self, args: list[str]) -> dict[str, Any]:
        process = _process(args, [CONTAINERD_PATH], "/", uid=0, gid=0, gids=[0], caps=None, oom=0)
        return {
            "container_id": self.replay_id,
            "exec_id": "e" * 64,
            "string_user": None,
            "process": process,
        }


CORPUS_FILES: Final = ("cases.jsonl", "marks.json", "plan.json", "runs.jsonl")
#: The one key of each Secret volume of the Job (runner/k8s/job.py).
SECRET_KEYS: Final = {"publish-token": "token", "endorsement": "endorsement.pem"}
UPDATE_INTERFACE: Final = {
    "interface": {
        "device": "eth0",
        "name": "eth0",
        "IPAddresses": [{"family": 0, "address": "10.244.1.17", "mask": "24"}],
        "mtu": 1450,
        "hwAddr": "6a:1f:02:8e:44:10",
        "devicePath": "",
        "type_": "",
        "raw_flags": 0,
    }
}
UPDATE_ROUTES: Final = {
    "routes": {
        "Routes": [
            {
                "dest": "",
                "gateway": "10.244.1.1",
                "device": "eth0",
                "source": "",
                "scope": 0,
                "family": 0,
                "flags": 0,
                "mtu": 0,
            },
            {
                "dest": "10.244.1.0/24",
                "gateway": "",
                "device": "eth0",
                "source": "10.244.1.17",
                "scope": 253,
                "family": 0,
                "flags": 0,
                "mtu": 0,
            },
        ]
    }
}


class Agent(Protocol):
    def allows(self, request_name: str, request: Any) -> bool: ...


def start_pod(agent: Agent, pod: ReplayPod) -> None:
    """Everything kata sends before the replay container's CreateContainerRequest, in order."""
    assert agent.allows("CreateSandboxRequest", pod.create_sandbox())
    for request in pod.sandbox_copies():
        assert agent.allows("CopyFileRequest", request), request["path"]
    assert agent.allows("CreateContainerRequest", pod.pause())
    for request in pod.replay_copies():
        assert agent.allows("CopyFileRequest", request), request["path"]


def copy_file(path: str, file_type: str, symlink_target: str | None = None) -> dict[str, Any]:
    """A ``PolicyCopyFileRequest`` (the agent drops the data bytes before asking the policy)."""
    mode = {"Regular": S_IFREG | 0o644, "Directory": S_IFDIR | 0o2755, "Symlink": S_IFLNK | 0o777}[
        file_type
    ]
    return {
        "path": path,
        "file_type": file_type,
        "symlink_target": symlink_target,
        "file_size": {"Regular": 64, "Directory": 0, "Symlink": len(symlink_target or "")}[
            file_type
        ],
        "file_mode": mode,
        "dir_mode": 0o750,
        "uid": 0,
        "gid": 65532,
        "offset": 0,
    }


def secret_tree(root: str, keys: list[str]) -> list[dict[str, Any]]:
    """kubelet's atomic writer layout of a Secret volume, walked as ShareFile walks it."""
    copies = [
        copy_file(root, "Directory"),
        copy_file(f"{root}/{SECRET_TIMESTAMP_DIR}", "Directory"),
    ]
    copies += [copy_file(f"{root}/{SECRET_TIMESTAMP_DIR}/{key}", "Regular") for key in keys]
    copies.append(copy_file(f"{root}/..data", "Symlink", SECRET_TIMESTAMP_DIR))
    copies += [copy_file(f"{root}/{key}", "Symlink", f"..data/{key}") for key in keys]
    return copies


def _emptydir_storage(
    mode: EmptyDirMode, index: int, volume: str, sandbox_id: str, fs_group: int
) -> dict[str, Any]:
    if mode in ("block", "block-kata3"):
        source = f"{index + 1:02x}/00"
        options = ["encryption_key=ephemeral"]
        if mode == "block":
            options.append("create_filesystem")
        return {
            "driver": "blk",
            "driver_options": options,
            "source": source,
            "fstype": "ext4",
            "options": [],
            "mount_point": "/run/kata-containers/sandbox/storage/"
            + base64.urlsafe_b64encode(source.encode()).decode(),
            "fs_group": {"group_id": fs_group, "group_change_policy": 0},
            "shared": True,
        }
    return {
        "driver": "local",
        "driver_options": [],
        "source": "local",
        "fstype": "local",
        "options": ["mode=0777", f"fsgid={fs_group}"],
        "mount_point": f"/run/kata-containers/shared/containers/{sandbox_id}/rootfs/local/{volume}",
        "fs_group": None,
        "shared": False,
    }


#: What nydus-snapshotter's guest pull (proxy mode, kata-deploy's default) hands kata as the
#: image's metadata before kata adds the container's annotations (nydus-snapshotter v0.15
#: snapshot/mount_option.go ``mountWithProxyVolume``, pkg/filesystem/fs.go).
NYDUS_PULL_LABELS: Final = {
    "containerd.io/snapshot/cri.layer-digest": "sha256:" + "5e" * 32,
    "containerd.io/snapshot/nydus-proxy-mode": "true",
}


def guest_pull_storage(
    cid: str, image: str, annotations: Mapping[str, str], *, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The rootfs storage: the runtime's ``{"metadata": <snapshotter labels + every annotation
    of the container>}`` as Go's json.Marshal writes it (compact, keys sorted; kata_agent.go
    handleImageGuestPullBlockVolume), as in the logged upstream requests; nydus-snapshotter's
    labels by default, none with ``labels={}`` (``experimental_force_guest_pull``)."""
    metadata = {**(NYDUS_PULL_LABELS if labels is None else labels), **annotations}
    return {
        "driver": "image_guest_pull",
        "driver_options": [
            "image_guest_pull="
            + json.dumps({"metadata": metadata}, separators=(",", ":"), sort_keys=True)
        ],
        "source": image,
        "fstype": "overlay",
        "options": [],
        "mount_point": f"/run/kata-containers/{cid}/rootfs",
        "fs_group": None,
        "shared": False,
    }


def _guaranteed_resources(limits: dict[str, str]) -> dict[str, Any]:
    """What containerd writes for a container whose requests equal its limits: kubelet's
    shares (milliCPU * 1024 / 1000), quota (milliCPU * period / 1000) and the memory limit
    (kubelet kuberuntime_container_linux.go calculateLinuxResources, containerd
    internal/cri/opts/spec_linux.go WithResources); the field set of the logged upstream
    request tests/assets/coco/requests/kata-createcontainer_cgroup_mount_extras-00."""
    cpus = int(limits["cpu"])
    memory = quantity_bytes(limits["memory"], what="memory")
    return {
        "Memory": {
            "Limit": memory,
            "Reservation": 0,
            "Swap": 0,
            "Kernel": 0,
            "KernelTCP": 0,
            "Swappiness": 0,
            "DisableOOMKiller": False,
        },
        "CPU": {
            "Shares": cpus * 1024,
            "Quota": cpus * 100_000,
            "Period": 100_000,
            "RealtimeRuntime": 0,
            "RealtimePeriod": 0,
            "Cpus": "",
            "Mems": "",
        },
    }


def _bind(destination: str, source: str, options: list[str]) -> dict[str, Any]:
    return {"destination": destination, "source": source, "type_": "bind", "options": options}


def _process(
    args: list[str],
    env: list[str],
    cwd: str,
    *,
    uid: int,
    gid: int,
    gids: list[int],
    caps: Any,
    oom: int,
) -> dict[str, Any]:
    return {
        "Terminal": False,
        "ConsoleSize": None,
        "User": {"UID": uid, "GID": gid, "AdditionalGids": gids, "Username": ""},
        "Args": args,
        "Env": env,
        "Cwd": cwd,
        "Capabilities": caps,
        "Rlimits": [],
        "NoNewPrivileges": True,
        "ApparmorProfile": "",
        "OOMScoreAdj": oom,
        "SelinuxLabel": "",
    }


def _oci(
    process: dict[str, Any],
    cid: str,
    mounts: list[dict[str, Any]],
    annotations: dict[str, str],
    *,
    hostname: str,
) -> dict[str, Any]:
    return {
        "Version": "1.1.0",
        "Process": process,
        "Root": {"Path": f"/run/kata-containers/{cid}/rootfs", "Readonly": True},
        "Hostname": hostname,
        "Mounts": mounts,
        "Hooks": None,
        "Annotations": annotations,
        "Linux": {
            "UIDMappings": [],
            "GIDMappings": [],
            "Sysctl": {
                "net.ipv4.ip_unprivileged_port_start": "0",
                "net.ipv4.ping_group_range": "0 2147483647",
            },
            "Resources": {
                "Devices": [],
                "Memory": None,
                "CPU": None,
                "Pids": None,
                "BlockIO": None,
                "HugepageLimits": [],
                "Network": None,
            },
            "CgroupsPath": f"kubepods-pod{POD_UID.replace('-', '_')}.slice:cri-containerd:{cid}",
            "Namespaces": [
                {"Type": "ipc", "Path": ""},
                {"Type": "uts", "Path": ""},
                {"Type": "mount", "Path": ""},
            ],
            "Devices": [],
            "Seccomp": None,
            "RootfsPropagation": "",
            "MaskedPaths": [
                "/proc/acpi",
                "/proc/asound",
                "/proc/kcore",
                "/proc/keys",
                "/proc/latency_stats",
                "/proc/timer_list",
                "/proc/timer_stats",
                "/proc/sched_debug",
                "/sys/firmware",
                "/proc/scsi",
            ],
            "ReadonlyPaths": [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger",
            ],
            "MountLabel": "",
            "IntelRdt": None,
        },
        "Solaris": None,
        "Windows": None,
    }


def _request(cid: str, oci: dict[str, Any], storages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "container_id": cid,
        "exec_id": cid,
        "string_user": None,
        "devices": [],
        "storages": storages,
        "OCI": oci,
        "sandbox_pidns": False,
        "shared_mounts": [],
        "stdin_port": 0,
        "stdout_port": 0,
        "stderr_port": 0,
    }
