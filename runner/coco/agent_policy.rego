package agent_policy

# Kata agent policy for one attested-replay pod. attested-replay writes `policy_data` (the exact
# replay container and pod it admits) after these rules; the agent evaluates
# `data.agent_policy.<RequestName>` with each ttrpc request as input (kata src/agent/policy/
# src/policy.rs). Written for Rego v0 (kata 3.28-3.29, regorus 0.2.8) and Rego v1 (kata 3.30.0
# to 4.1.0, regorus 0.9.1 at git rev 898643129e) alike, with builtins from regorus' core, regex
# and base64url only (what kata builds it with), none that can fail on input.

import future.keywords.contains
import future.keywords.every
import future.keywords.if
import future.keywords.in

# Debug switch of the agent: must stay false, or every denial below becomes an allow.
default AllowRequestsFailingPolicy := false

# Requests the pod never needs are denied; the list names them so that a reader sees each decision.
default AddARPNeighborsRequest := false
default AddSwapPathRequest := false
default AddSwapRequest := false
default CloseStdinRequest := false
default CopyFileRequest := false
default CreateContainerRequest := false
default CreateSandboxRequest := false
default DestroySandboxRequest := true
default ExecProcessRequest := false
default GetDiagnosticDataRequest := false
default GetIPTablesRequest := false
default GetMetricsRequest := false
default GetOOMEventRequest := true
default GuestDetailsRequest := true
default ListInterfacesRequest := false
default ListRoutesRequest := false
default MemAgentCompactConfig := false
default MemAgentMemcgConfig := false
default MemHotplugByProbeRequest := false
default OnlineCPUMemRequest := true
default PauseContainerRequest := false
default PullImageRequest := false
default ReadStreamRequest := true
default RemoveContainerRequest := true
default RemoveStaleVirtiofsShareMountsRequest := true
default ReseedRandomDevRequest := false
default ResizeVolumeRequest := false
default ResumeContainerRequest := false
default SetGuestDateTimeRequest := false
default SetIPTablesRequest := false
default SetPolicyRequest := false
default SignalProcessRequest := false
default StartContainerRequest := true
default StartTracingRequest := false
default StatsContainerRequest := true
default StopTracingRequest := false
default TtyWinResizeRequest := false
default UpdateContainerRequest := false
default UpdateEphemeralMountsRequest := false
default UpdateInterfaceRequest := false
default UpdateRoutesRequest := false
default VolumeStatsRequest := false
default WaitProcessRequest := true
default WriteStreamRequest := false

# ---------------------------------------------------------------------------------------------
# Containers: the pause container and the replay container, nothing else.

CreateContainerRequest := {"allowed": true, "ops": ops} if {
	data.pstate.sandbox
	role := container_role
	role_order_ok(role)
	ops := array.concat(
		[
			{"op": "add", "path": concat("", ["/pstate/created-", input.container_id]), "value": role},
			{"op": "add", "path": concat("", ["/pstate/", ROLE_KEY[role]]), "value": input.container_id},
			{"op": "add", "path": "/pstate/sandbox-name", "value": cri("pod")},
		],
		ROLE_OPS[role],
	)
}

# The pause container's hostname is the pod's (kubelet: the pod name, or the spec.hostname
# the Job controller sets for an Indexed Job): the replay's HOSTNAME and completion index must
# be this pod's, not another pod's of the Job.
ROLE_OPS := {
	"sandbox": [{"op": "add", "path": "/pstate/hostname", "value": input.OCI.Hostname}],
	"replay": [],
}

# One pause container, then one replay container, each once in the VM's life: a second replay
# (or the same one again, after RemoveContainerRequest) would share the first one's emptyDirs
# and run beside or after it; restartPolicy Never means the kubelet never asks for either.
role_order_ok("sandbox") if not data.pstate.sandbox_container

role_order_ok("replay") if {
	data.pstate.sandbox_container
	not data.pstate.replay
}

ROLE_KEY := {"sandbox": "sandbox_container", "replay": "replay"}

container_role := "sandbox" if {
	common_container_input("sandbox")
	pause_container
}

container_role := "replay" if {
	common_container_input("container")
	replay_container
}

# Fields kata leaves empty for every Kubernetes container (genpolicy refuses them too), the
# container ID, the pod, and the annotations the agent acts on.
common_container_input(cri_type) if {
	regex.match("^[0-9a-f]{64}$", input.container_id)
	input.exec_id == input.container_id
	is_null(input.string_user)
	count(input.shared_mounts) == 0
	count(input.devices) == 0
	input.sandbox_pidns == false

	oci := input.OCI
	is_null(oci.Hooks)
	is_null(oci.Solaris)
	is_null(oci.Windows)
	oci.Root.Path == concat("", ["/run/kata-containers/", input.container_id, "/rootfs"])
	oci.Root.Readonly == true

	process := oci.Process
	process.Terminal == false
	process.NoNewPrivileges == true
	process.SelinuxLabel == ""
	process.ApparmorProfile == ""
	process.User.Username == ""
	count(process.Rlimits) == 0

	linux_ok(oci.Linux)
	annotations_ok(oci.Annotations, cri_type)
}

KATA_CONTAINER_TYPE := {"sandbox": "pod_sandbox", "container": "pod_container"}

annotations_ok(annotations, cri_type) if {
	family := cri_family
	every key in object.keys(annotations) {
		annotation_key_allowed(family, key)
	}
	cri("type") == cri_type
	annotations["io.katacontainers.pkg.oci.container_type"] == KATA_CONTAINER_TYPE[cri_type]
	pod_name_ok(cri("pod"))
	termination_message_path_ok(annotations)
	runtime_annotations_ok(family, annotations, cri_type)
}

# The container runtime that made the spec, told by its container-type key (containerd:
# internal/cri/annotations; CRI-O v1.37.0: internal/annotations/annotations.go), and where each
# writes what these rules read. CRI-O names the pod and the container with the kubelet's labels
# (kuberuntime labels.go), which it copies into the spec, and the image kata pulls in its
# ImageName (kata 4.1.0 kata_agent.go handleImageGuestPullBlockVolume).
cri_family := "containerd" if {
	input.OCI.Annotations["io.kubernetes.cri.container-type"]
	not input.OCI.Annotations["io.kubernetes.cri-o.ContainerType"]
}

cri_family := "cri-o" if {
	input.OCI.Annotations["io.kubernetes.cri-o.ContainerType"]
	not input.OCI.Annotations["io.kubernetes.cri.container-type"]
}

CRI_KEYS := {
	"containerd": {
		"type": "io.kubernetes.cri.container-type",
		"pod": "io.kubernetes.cri.sandbox-name",
		"name": "io.kubernetes.cri.container-name",
		"image": "io.kubernetes.cri.image-name",
	},
	"cri-o": {
		"type": "io.kubernetes.cri-o.ContainerType",
		"pod": "io.kubernetes.pod.name",
		"name": "io.kubernetes.container.name",
		"image": "io.kubernetes.cri-o.ImageName",
	},
}

cri(field) := input.OCI.Annotations[CRI_KEYS[cri_family][field]]

# containerd passes only its own keys, kata's and the pod annotations kata-deploy lists.
annotation_key_allowed("containerd", key) if startswith(key, "io.kubernetes.cri.")

# Pod annotations kata-deploy passes through (cc_init_data, ...) and kata's own bookkeeping.
annotation_key_allowed(family, key) if startswith(key, "io.katacontainers.")

annotation_key_allowed("containerd", key) if key in {
	"io.kubernetes.container.terminationMessagePath",
	"io.kubernetes.container.terminationMessagePolicy",
	"nerdctl/network-namespace",
}

# CRI-O writes its keys (internal/factory/container/container.go for a container,
# server/sandbox_run_linux.go for the pause), the kubelet's container annotations and labels,
# and for the pause the pod's labels, and copies every pod annotation into both: keys the
# cluster's admission chain chooses, which no list can hold. The guest reads only the container
# types, kata's container_type, cdi.k8s.io/* and the termination message path (kata 4.1.0 agent
# confidential_data_hub/image.rs, device/mod.rs, rpc.rs): those are pinned or refused, as is
# every key of a namespace CRI-O, kata, the OCI image spec or systemd act on.
annotation_key_allowed("cri-o", key) if key in CRIO_KEYS

annotation_key_allowed("cri-o", key) if regex.match(`^io\.kubernetes\.cri-o\.IP\.[0-9]+$`, key)

annotation_key_allowed("cri-o", key) if {
	regex.match(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`, key)
	not reserved_annotation(key)
}

reserved_annotation(key) if regex.match(RESERVED_ANNOTATIONS, key)

RESERVED_ANNOTATIONS := concat("", [
	`^(io\.kubernetes\.|io\.katacontainers\.|io\.container|io\.containers\.|org\.opencontainers\.`,
	`|org\.systemd\.|cdi\.k8s\.io/|nvidia\.com/|[^/]*crio\.io(/|$))`,
])

CRIO_KEYS := {
	# internal/annotations/annotations.go (v1.37.0)
	"io.kubernetes.cri-o.Annotations",
	"io.kubernetes.cri-o.CgroupParent",
	"io.kubernetes.cri-o.CNIResult",
	"io.kubernetes.cri-o.ContainerID",
	"io.kubernetes.cri-o.ContainerName",
	"io.kubernetes.cri-o.ContainerType",
	"io.kubernetes.cri-o.Created",
	"io.kubernetes.cri-o.HostName",
	"io.kubernetes.cri-o.HostNetwork",
	"io.kubernetes.cri-o.HostnamePath",
	"io.kubernetes.cri-o.Image",
	"io.kubernetes.cri-o.ImageName",
	"io.kubernetes.cri-o.ImageRef",
	"io.kubernetes.cri-o.ImageRepoDigests",
	"io.kubernetes.cri-o.KubeName",
	"io.kubernetes.cri-o.Labels",
	"io.kubernetes.cri-o.LogPath",
	"io.kubernetes.cri-o.Metadata",
	"io.kubernetes.cri-o.MountPoint",
	"io.kubernetes.cri-o.Name",
	"io.kubernetes.cri-o.Namespace",
	"io.kubernetes.cri-o.NamespaceOptions",
	"io.kubernetes.cri-o.PortMappings",
	"io.kubernetes.cri-o.PrivilegedRuntime",
	"io.kubernetes.cri-o.ResolvPath",
	"io.kubernetes.cri-o.RuntimeHandler",
	"io.kubernetes.cri-o.SandboxID",
	"io.kubernetes.cri-o.SandboxName",
	"io.kubernetes.cri-o.SeccompProfilePath",
	"io.kubernetes.cri-o.ShmPath",
	"io.kubernetes.cri-o.Stdin",
	"io.kubernetes.cri-o.StdinOnce",
	"io.kubernetes.cri-o.TTY",
	"io.kubernetes.cri-o.Volumes",
	"io.container.manager",
	# pkg/annotations/v2/annotations.go: what CRI-O itself records
	"platform-runtime-path.crio.io",
	"pod-linux-overhead.crio.io",
	"pod-linux-resources.crio.io",
	# container.go with the systemd cgroup manager (CRI-O's default)
	"org.systemd.property.After",
	"org.systemd.property.DefaultDependencies",
	"org.systemd.property.TimeoutStopUSec",
	# kubelet kuberuntime labels.go: container labels and annotations, the pod's labels
	"io.kubernetes.container.hash",
	"io.kubernetes.container.name",
	"io.kubernetes.container.restartCount",
	"io.kubernetes.container.terminationMessagePath",
	"io.kubernetes.container.terminationMessagePolicy",
	"io.kubernetes.pod.name",
	"io.kubernetes.pod.namespace",
	"io.kubernetes.pod.terminationGracePeriod",
	"io.kubernetes.pod.uid",
}

runtime_annotations_ok("containerd", annotations, cri_type) if {
	annotations["io.kubernetes.cri.container-type"] == cri_type
}

# What CRI-O states about the container that must be this one: its ID, its sandbox, no
# terminal or stdin, and for the pause no host network and no privileged runtime.
runtime_annotations_ok("cri-o", annotations, "container") if {
	annotations["io.container.manager"] == "cri-o"
	annotations["io.kubernetes.cri-o.ContainerID"] == input.container_id
	annotations["io.kubernetes.cri-o.SandboxID"] == data.pstate.sandbox_container
	annotations["io.kubernetes.cri-o.TTY"] == "false"
	annotations["io.kubernetes.cri-o.Stdin"] == "false"
	annotations["io.kubernetes.cri-o.StdinOnce"] == "false"
}

runtime_annotations_ok("cri-o", annotations, "sandbox") if {
	annotations["io.container.manager"] == "cri-o"
	annotations["io.kubernetes.cri-o.ContainerID"] == input.container_id
	annotations["io.kubernetes.cri-o.SandboxID"] == input.container_id
	annotations["io.kubernetes.cri-o.KubeName"] == annotations["io.kubernetes.pod.name"]
	annotations["io.kubernetes.cri-o.HostName"] == input.OCI.Hostname
	annotations["io.kubernetes.cri-o.HostNetwork"] == "false"
	annotations["io.kubernetes.cri-o.PrivilegedRuntime"] == "false"
}

termination_message_path_ok(annotations) if {
	not annotations["io.kubernetes.container.terminationMessagePath"]
}

termination_message_path_ok(annotations) if {
	annotations["io.kubernetes.container.terminationMessagePath"] == policy_data.replay.termination_message_path
}

# Every container of the VM belongs to one pod of this Job.
pod_name_ok(name) if {
	regex.match(policy_data.pod.name_regex, name)
	not data.pstate["sandbox-name"]
}

pod_name_ok(name) if {
	regex.match(policy_data.pod.name_regex, name)
	data.pstate["sandbox-name"] == name
}

linux_ok(linux) if {
	count(linux.UIDMappings) == 0
	count(linux.GIDMappings) == 0
	linux.MountLabel == ""
	linux.RootfsPropagation == ""
	is_null(linux.IntelRdt)
	is_null(linux.Seccomp)
	count(linux.Devices) == 0
	count(linux.Resources.Devices) == 0
	is_null(linux.Resources.Pids)
	is_null(linux.Resources.BlockIO)
	is_null(linux.Resources.Network)
	count(linux.Resources.HugepageLimits) == 0
	memory_ok(linux.Resources.Memory)
	cpu_ok(linux.Resources.CPU)
	cgroups_path_ok(linux.CgroupsPath)

	# kata drops network, cgroup and time and empties the other paths; pid goes to sandbox_pidns.
	count(linux.Namespaces) == 3
	{ns.Type | some ns in linux.Namespaces} == {"ipc", "uts", "mount"}
	every ns in linux.Namespaces {
		ns.Path == ""
	}

	every path in policy_data.linux.masked_paths {
		path in linux.MaskedPaths
	}
	every path in policy_data.linux.readonly_paths {
		readonly_or_masked(path, linux)
	}
	every path in linux.MaskedPaths {
		kernel_path(path)
	}
	every path in linux.ReadonlyPaths {
		kernel_path(path)
	}
	sysctls_ok(linux.Sysctl)
}

# Limits the kubelet derives from the pod's resources (containerd WithResources): the pod's
# size is not part of the policy (one init-data for every node size), so the policy sets a
# floor, the smallest pod attested-replay builds, below which the host could only starve the
# replay, never run it; the OOM killer stays on.
memory_ok(memory) if is_null(memory)

memory_ok(memory) if {
	memory_limit_ok(memory.Limit)
	not memory.DisableOOMKiller == true
}

memory_limit_ok(limit) if is_null(limit)

memory_limit_ok(limit) if limit >= policy_data.linux.min_memory_limit

cpu_ok(cpu) if is_null(cpu)

cpu_ok(cpu) if {
	cpu_quota_ok(cpu)
	not_realtime(cpu.RealtimeRuntime)
	cpu.Cpus == ""
	cpu.Mems == ""
}

# A quota of 0 or -1 (or none) is "no limit"; a quota below one vCPU per period is refused.
cpu_quota_ok(cpu) if is_null(cpu.Quota)

cpu_quota_ok(cpu) if cpu.Quota <= 0

cpu_quota_ok(cpu) if {
	cpu.Period > 0
	cpu.Quota >= cpu.Period * policy_data.linux.min_cpu_quota_per_period
}

not_realtime(runtime) if is_null(runtime)

not_realtime(runtime) if runtime == 0

# The cgroup the kubelet names for the container (systemd or cgroupfs driver, containerd or
# CRI-O): below the pod's slice, never the agent's root or a path out of it.
cgroups_path_ok(path) if {
	some pattern in policy_data.linux.cgroups_path_patterns
	regex.match(replace(pattern, "$(container-id)", input.container_id), path)
}

# The agent bind-mounts /dev/null over each masked file and remounts each read-only path
# (rustjail mount.rs mask_path, readonly_path), following symlinks: any other path would let the
# host empty a file of the image or freeze the output directory. Runtimes add only /proc and
# /sys entries; /proc/self, /proc/thread-self and /proc/<pid> lead back into the container
# (root, cwd).
kernel_path(path) if {
	regex.match("^/(proc|sys)/[^/]", path)
	not regex.match("^/proc/(self|thread-self|[0-9]+)(/|$)", path)
	no_dot_segments(path)
}

readonly_or_masked(path, linux) if path in linux.ReadonlyPaths

readonly_or_masked(path, linux) if path in linux.MaskedPaths

sysctls_ok(sysctls) if is_null(sysctls)

sysctls_ok(sysctls) if {
	is_object(sysctls)
	every name in object.keys(sysctls) {
		policy_data.linux.sysctls[name] == sysctls[name]
	}
}

# The pause container: the agent replaces its process and rootfs with the guest's own pause
# image when the rootfs is a guest pull of "pause" (kata agent confidential_data_hub/image.rs).
pause_container if {
	oci := input.OCI
	not cri("name")
	oci.Process.Args == ["/pause"]
	regex.match(policy_data.pod.hostname_regex, oci.Hostname)
	hostname_of_pod(oci.Hostname, cri("pod"))
	count(input.storages) == 1
	guest_pull_storage(input.storages[0], "pause", "sandbox")
	every mount in oci.Mounts {
		mount_allowed(policy_data.sandbox.mounts, mount)
	}
}

replay_container if {
	replay := policy_data.replay
	oci := input.OCI
	cri("name") == replay.name
	cri("image") == replay.image
	image_requested(oci.Annotations, replay.image)

	oci.Hostname == ""
	process := oci.Process
	process.Args == replay.args
	process.Cwd == replay.cwd
	process.User.UID == replay.uid
	process.User.GID == replay.gid
	{gid | some gid in process.User.AdditionalGids} == {gid | some gid in replay.additional_gids}
	no_capabilities(process.Capabilities)
	env_ok(process.Env, replay)
	every entry in process.Env {
		this_pod_entry(entry, data.pstate.hostname)
	}

	mounts_ok(oci.Mounts, replay.mounts)
	storages_ok(input.storages, oci.Mounts, replay)
}

# An empty set, never null: with no capabilities object the agent leaves the process the
# capabilities it was started with (rustjail only drops what the spec lists).
no_capabilities(caps) if {
	is_object(caps)
	count(caps.Bounding) == 0
	count(caps.Effective) == 0
	count(caps.Inheritable) == 0
	count(caps.Permitted) == 0
	count(caps.Ambient) == 0
}

# Every variable is pinned (or one the kubelet sets, in its format), each name at most once,
# and every pinned variable is there.
env_ok(env, replay) if {
	every entry in env {
		env_entry_allowed(entry, replay)
	}
	names := [split(entry, "=")[0] | some entry in env]
	count(names) == count({name | some name in names})
	every entry in replay.env {
		entry in env
	}
}

env_entry_allowed(entry, replay) if entry in replay.env

# CRI-O tells every container it runs under CRI-O (server/container_create_linux.go), and
# keeps TERM=xterm from the spec generator it starts from (runtime-tools generate.New, used by
# internal/factory/container/container.go New; genpolicy's defaults admit it too).
env_entry_allowed(entry, replay) if {
	cri_family == "cri-o"
	entry in {"container=crio", "TERM=xterm"}
}

# CRI-O also records the image the pod spec asked for (its UserRequestedImage).
image_requested(annotations, image) if cri_family == "containerd"

image_requested(annotations, image) if annotations["io.kubernetes.cri-o.Image"] == image

# The pod's name is its hostname, or (Indexed Job) its hostname, "-" and 5 random characters.
hostname_of_pod(hostname, pod_name) if hostname == pod_name

hostname_of_pod(hostname, pod_name) if {
	regex.match("^[a-z0-9]{5}$", trim_prefix(pod_name, concat("", [hostname, "-"])))
	startswith(pod_name, concat("", [hostname, "-"]))
}

# HOSTNAME and the completion index as this pod's sandbox has them (containerd and CRI-O set
# HOSTNAME to the sandbox's hostname; the index is the hostname's suffix, "<job>-<index>").
this_pod_entry(entry, hostname) if {
	not startswith(entry, "HOSTNAME=")
	not startswith(entry, concat("", [policy_data.pod.index_variable, "="]))
}

this_pod_entry(entry, hostname) if entry == concat("", ["HOSTNAME=", hostname])

this_pod_entry(entry, hostname) if {
	index := trim_prefix(hostname, policy_data.pod.index_prefix)
	entry == concat("", [policy_data.pod.index_variable, "=", index])
}

env_entry_allowed(entry, replay) if {
	some pattern in replay.env_patterns
	regex.match(pattern, entry)
}

# Each mount destination exactly once, each one expected, each expected one present.
mounts_ok(mounts, expected) if {
	every mount in mounts {
		mount_allowed(expected, mount)
	}
	destinations := [mount.destination | some mount in mounts]
	count(destinations) == count({d | some d in destinations})
	every want in expected {
		mount_present(want, destinations)
	}
}

# CRI-O's /run/.containerenv is the only mount one runtime adds and the other does not.
mount_present(want, destinations) if want.optional == true

mount_present(want, destinations) if want.destination in destinations

mount_allowed(expected, mount) if {
	some want in expected
	want.destination == mount.destination
	some variant in want.variants
	mount_variant_ok(variant, mount)
}

mount_variant_ok(variant, mount) if {
	variant.type == mount.type_
	source_ok(variant, mount.source)
	every option in mount.options {
		option in variant.options_allowed
	}
	every option in variant.options_required {
		option in mount.options
	}
}

source_ok(variant, source) if variant.source == source

source_ok(variant, source) if {
	not variant.source
	pattern := replace(variant.source_pattern, "$(container-id)", input.container_id)
	regex.match(pattern, source)
}

# Exactly one guest-pulled rootfs of the pinned image, and one storage per emptyDir mount.
storages_ok(storages, mounts, replay) if {
	count([s | some s in storages; s.driver == "image_guest_pull"]) == 1
	every storage in storages {
		storage_allowed(storage, mounts, replay)
	}
	every mount in mounts {
		mount_has_storage(mount, storages, replay)
	}
	emptydir_sources := [m.source | some m in mounts; m.destination in replay.emptydir_destinations]
	count(emptydir_sources) == count({source | some source in emptydir_sources})
	mount_points := [s.mount_point | some s in storages]
	count(mount_points) == count({point | some point in mount_points})
}

storage_allowed(storage, mounts, replay) if guest_pull_storage(storage, replay.image, "container")

storage_allowed(storage, mounts, replay) if {
	emptydir_storage(storage, replay)
	some mount in mounts
	mount.destination in replay.emptydir_destinations
	mount.source == storage.mount_point
}

mount_has_storage(mount, storages, replay) if not mount.destination in replay.emptydir_destinations

mount_has_storage(mount, storages, replay) if {
	mount.destination in replay.emptydir_destinations
	some storage in storages
	storage.mount_point == mount.source
}

guest_pull_storage(storage, image, cri_type) if {
	storage.driver == "image_guest_pull"
	storage.source == image
	storage.fstype == "overlay"
	storage.mount_point == input.OCI.Root.Path
	count(storage.options) == 0
	storage.shared == false
	is_null(storage.fs_group)
	count(storage.driver_options) == 1
	guest_pull_metadata_ok(storage.driver_options[0], cri_type)
}

# The agent reads the container type from this JSON, not from the OCI annotations, and on
# "sandbox" unpacks its own pause bundle as the rootfs (agent storage/image_pull_handler.rs,
# confidential_data_hub/image.rs is_sandbox, kata 4.1.0). The Go runtime writes
# {"metadata": <the container's annotations>} (kata_agent.go handleImageGuestPullBlockVolume
# merges them into the snapshotter's labels: none with experimental_force_guest_pull
# (fs_share_linux.go forceGuestPull), the layer digest and proxy-mode marker with
# nydus-snapshotter's guest pull, kata-deploy's default (nydus-snapshotter v0.15
# snapshot/mount_option.go mountWithProxyVolume, pkg/filesystem/fs.go)): every entry must be one
# of the annotations this rule already checked, with the same value, or one of those labels,
# and every container type it states (containerd's or CRI-O's key) the right one. json.unmarshal decodes escapes and
# duplicate keys as the agent's serde_json does; json.is_valid keeps it from failing.
guest_pull_metadata_ok(option, cri_type) if {
	startswith(option, "image_guest_pull=")
	text := trim_prefix(option, "image_guest_pull=")
	json.is_valid(text)
	pull := json.unmarshal(text)
	is_object(pull)
	object.keys(pull) == {"metadata"}
	metadata := pull.metadata
	is_object(metadata)
	every key, value in metadata {
		is_string(value)
		pull_metadata_entry(key, value)
	}
	some type_key in CONTAINER_TYPE_KEYS
	metadata[type_key]
	every key in CONTAINER_TYPE_KEYS {
		container_type_absent_or(metadata, key, cri_type)
	}
}

pull_metadata_entry(key, value) if input.OCI.Annotations[key] == value

pull_metadata_entry(key, value) if {
	not input.OCI.Annotations[key]
	regex.match(SNAPSHOTTER_LABELS[key], value)
}

SNAPSHOTTER_LABELS := {
	"containerd.io/snapshot/cri.layer-digest": "^sha256:[0-9a-f]{64}$",
	"containerd.io/snapshot/nydus-proxy-mode": "^true$",
}

# The keys the agent reads the container type from (confidential_data_hub/image.rs
# K8S_CONTAINER_TYPE_KEYS): containerd's and CRI-O's; both say "sandbox" or "container".
CONTAINER_TYPE_KEYS := ["io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType"]

container_type_absent_or(metadata, key, cri_type) if not metadata[key]

container_type_absent_or(metadata, key, cri_type) if metadata[key] == cri_type

# emptydir_mode = "block-encrypted" (kata >= 3.28 CoCo default): a disk encrypted with a key
# the guest makes and never shows the host.
emptydir_storage(storage, replay) if {
	storage.driver in {"blk", "scsi"}
	block_device_source(storage.driver, storage.source)
	ephemeral_encryption(storage.driver_options)
	storage.fstype == "ext4"
	count(storage.options) == 0
	storage.shared == true
	storage.mount_point == concat("", ["/run/kata-containers/sandbox/storage/", base64url.encode(storage.source)])
	fs_group_ok(storage.fs_group, replay)
}

# Guest-local directories (disable_guest_empty_dir = false with emptydir_mode = "shared-fs",
# e.g. peer pods): created by the agent inside the VM, never filled by the host.
emptydir_storage(storage, replay) if {
	storage.driver == "local"
	storage.source == "local"
	storage.fstype == "local"
	count(storage.driver_options) == 0
	"mode=0777" in storage.options
	every option in storage.options {
		option in replay.local_storage_options
	}
	storage.shared == false
	is_null(storage.fs_group)
}

# kata >= 4.0 also asks for a new filesystem (create_filesystem); 3.28-3.32 send the key alone
# (kata_agent.go handleDeviceBlockVolume). Either way CDH formats a LUKS2 device with
# integrity under a key it makes (agent src/storage/block_handler.rs, which calls rpc.rs
# cdh_secure_mount; since kata 4.0 it refuses the key without create_filesystem).
ephemeral_encryption(options) if options == ["encryption_key=ephemeral"]

ephemeral_encryption(options) if {
	count(options) == 2
	{o | some o in options} == {"encryption_key=ephemeral", "create_filesystem"}
}

block_device_source("blk", source) if regex.match("^[0-9a-f]{2}(/[0-9a-f]{2})?$", source)

block_device_source("scsi", source) if regex.match("^[0-9]+:[0-9]+$", source)

fs_group_ok(group, replay) if is_null(group)

fs_group_ok(group, replay) if group.group_id == replay.fs_group

# ---------------------------------------------------------------------------------------------
# Files the runtime copies into the guest (shared_fs = none): only this pod's bind mounts, into
# the shared directory, never into a container that already exists.

CopyFileRequest if {
	parts := regex.find_all_string_submatch_n(
		"^/run/kata-containers/shared/containers/([0-9a-f]{64})-[0-9a-f]{16}-([^/]+)(/.*)?$",
		input.path,
		1,
	)
	count(parts) == 1
	container_id := parts[0][1]
	name := parts[0][2]
	below := parts[0][3]
	not data.pstate[concat("", ["created-", container_id])]
	no_dot_segments(input.path)
	copy_allowed(name, below)
}

copy_allowed(name, "") if {
	name in policy_data.copy_file.files
	input.file_type == "Regular"
}

copy_allowed(name, "") if {
	name in policy_data.copy_file.trees
	input.file_type == "Directory"
}

copy_allowed(name, below) if {
	name in policy_data.copy_file.trees
	below != ""
	input.file_type in {"Regular", "Directory"}
}

# Kubernetes Secret and ConfigMap volumes are built from relative symlinks (token -> ..data/token).
copy_allowed(name, below) if {
	name in policy_data.copy_file.trees
	below != ""
	input.file_type == "Symlink"
	is_string(input.symlink_target)
	input.symlink_target != ""
	not startswith(input.symlink_target, "/")
	no_dot_segments(input.symlink_target)
}

no_dot_segments(path) if not regex.match("(^|/)\\.\\.?(/|$)", path)

# ---------------------------------------------------------------------------------------------
# The sandbox: once, before any container. The agent's create_sandbox first deletes
# /run/kata-containers (rpc.rs: remove_dir_all(CONTAINER_BASE)), with the containers' root
# filesystems, the pulled image layers, the emptyDirs and the copied files, and refuses no
# second call; containers are admitted only once /pstate/sandbox is set.

CreateSandboxRequest := {"allowed": true, "ops": SANDBOX_CREATED} if {
	not data.pstate.sandbox
	count(input.guest_hook_path) == 0
	count(input.kernel_modules) == 0
	input.sandbox_pidns == false
	every storage in input.storages {
		sandbox_storage(storage)
	}
}

SANDBOX_CREATED := [{"op": "add", "path": "/pstate/sandbox", "value": true}]

sandbox_storage(storage) if {
	storage.driver == "ephemeral"
	storage.source == "shm"
	storage.fstype == "tmpfs"
	storage.mount_point == "/run/kata-containers/sandbox/shm"
	is_null(storage.fs_group)
	every option in storage.options {
		shm_option(option)
	}
}

shm_option(option) if option in {"noexec", "nosuid", "nodev", "mode=1777"}

shm_option(option) if regex.match("^size=[0-9]+$", option)

# ---------------------------------------------------------------------------------------------
# The pod network, as genpolicy restricts it: no loopback devices, routes or neighbours.

UpdateInterfaceRequest if {
	interface := input.interface
	not loopback_interface_address(interface)
	bits.and(interface.raw_flags, bits.negate(policy_data.network.interface_raw_flags)) == 0
	not interface.name in policy_data.network.forbidden_devices
	not interface.hwAddr in {"00:00:00:00:00:00"}
}

loopback_interface_address(interface) if {
	some address in interface.IPAddresses
	loopback_address(address.address)
}

UpdateRoutesRequest if not forbidden_route

forbidden_route if {
	some route in input.routes.Routes
	route.device in policy_data.network.forbidden_devices
}

forbidden_route if {
	some route in input.routes.Routes
	some field in ["source", "dest", "gateway"]
	loopback_address(route_address(route[field]))
}

# A destination comes as "address/prefix" (kata's network.go); the prefix does not matter.
route_address(text) := split(text, "/")[0]

AddARPNeighborsRequest if not forbidden_neighbor

forbidden_neighbor if {
	some neighbor in input.neighbors.ARPNeighbors
	not neighbor_ok(neighbor)
}

neighbor_ok(neighbor) if {
	not neighbor.device in policy_data.network.forbidden_devices
	neighbor.toIPAddress.mask == ""
	not loopback_address(neighbor.toIPAddress.address)
	neighbor.state in policy_data.network.neighbor_states
	bits.or(neighbor.flags, policy_data.network.neighbor_flags) == policy_data.network.neighbor_flags
}

loopback_address(address) if {
	some pattern in policy_data.network.loopback_address_patterns
	regex.match(pattern, address)
}

# ---------------------------------------------------------------------------------------------
# Output: the container log (kubectl logs) and, on kata >= 3.29, the termination message.

GetDiagnosticDataRequest if input.log_type == "termination_log"

# ---------------------------------------------------------------------------------------------
# Signals: only the two the kubelet's StopContainer has the runtime send (the image's stop
# signal, SIGTERM when it names none, then SIGKILL after the grace period), and only to this
# pod's containers' init processes.

SignalProcessRequest if {
	input.signal in policy_data.signals
	some key in ["sandbox_container", "replay"]
	data.pstate[key] == input.container_id
	input.exec_id in {"", input.container_id}
}
