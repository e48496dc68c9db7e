"""The Job controller, scheduler and kubelet of a CoCo node, played on the test API server.

Tests script *what happens* (a pod cannot be scheduled, a sandbox fails, the node evicts the
pod, the replay finishes); *how it shows in the API* follows the upstream components, read at
the versions named in each docstring. Everything is written through the store, so every change
reaches list/watch clients as the real objects would, in the same order.

The Job controller part is real logic, not a script: a failed pod is matched against the Job's
own ``podFailurePolicy`` (rules in order, first match wins; no match counts) and its
``backoffLimit``, so a test of an eviction exercises the policy the submitter built.
"""

from __future__ import annotations

import copy
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Final

from tests.k8s.apiserver import (
    CONTROLLER_UID_LABEL,
    JOB_NAME_LABEL,
    PodRefusedError,
    Store,
    now_rfc3339,
)

NAMESPACE: Final = "attested-replay"
NODE: Final = "snp-worker-1"
CONTAINER: Final = "replay"
#: k8s.io/apimachinery ``util/rand`` alphabet for generated name suffixes.
_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
#: client-go ``tools/record/events_cache.go`` (v0.34.0): after this many similar events (same
#: source, object, type and reason) the message becomes "(combined from similar events): …".
AGGREGATE_MAX_EVENTS: Final = 10
#: containerd CRI ``errorStartReason``/``errorStartExitCode`` for a container that failed to start.
START_ERROR_REASON: Final = "StartError"
START_ERROR_EXIT_CODE: Final = 128
#: batch/v1 (1.33): a pod's completion index (annotation, and label with PodIndexLabel), the
#: failures of its index so far, the variable the controller adds to each container, and the
#: apiserver name generator's prefix limit.
INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
FAILURE_COUNT_ANNOTATION: Final = "batch.kubernetes.io/job-index-failure-count"
INDEX_ENV: Final = "JOB_COMPLETION_INDEX"
GENERATED_NAME_MAX: Final = 58


@dataclass
class FakeCluster(Store):
    """The store plus the control plane and one kubelet, driven by test scripts."""

    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(0))
    #: Similar-event counts per aggregation key (reason-level), for message combining.
    _similar: dict[tuple[str, ...], set[str]] = field(default_factory=dict)
    #: Counted failures per (namespace, Job, completion index) of Indexed Jobs.
    _index_failures: dict[tuple[str, str, int], int] = field(default_factory=dict)
    #: ServiceAccounts besides each namespace's ``default`` (k8s/base creates the replay's
    #: only in its namespace).
    service_accounts: set[tuple[str, str]] = field(
        default_factory=lambda: {(NAMESPACE, "attested-replay-job")}
    )

    # -- Job controller (pkg/controller/job) ---------------------------------------------

    def start_pod(self, job_name: str, ns: str = NAMESPACE, *, index: int | None = None) -> str:
        """The Job controller creates a pod from the template (``generateName: <job>-``).

        For an Indexed Job (``index`` given) as ``job_controller.go`` ``manageJob`` does
        (1.33): the completion-index annotation and label, ``JOB_COMPLETION_INDEX`` from a
        fieldRef to the label in every container without one, hostname ``<job>-<index>``,
        generateName ``<job>-<index>-`` (cut to 58 characters by ``podGenerateNameWithIndex``)
        and, with a per-index backoff limit, the index's failure count annotation.
        """
        job = self.get("jobs", ns, job_name)
        if job is None:
            raise KeyError(f"no Job {job_name}")
        template = job["spec"]["template"]
        serial = next(self._names)
        suffix = "".join(_SUFFIX_ALPHABET[(serial // 27**i) % 27] for i in range(5))
        generate_name = f"{job_name}-"
        spec = copy.deepcopy(template["spec"])
        spec.setdefault("schedulerName", "default-scheduler")
        labels = dict(template["metadata"].get("labels") or {})
        annotations = dict(template["metadata"].get("annotations") or {})
        if index is not None:
            append = f"-{index}-"
            generate_name = f"{job_name}{append}"
            if len(generate_name) > GENERATED_NAME_MAX:
                generate_name = generate_name[: GENERATED_NAME_MAX - len(append)] + append
            annotations[INDEX_ANNOTATION] = str(index)
            labels[INDEX_ANNOTATION] = str(index)
            if "backoffLimitPerIndex" in job["spec"]:
                annotations[FAILURE_COUNT_ANNOTATION] = str(
                    self._index_failures.get((ns, job_name, index), 0)
                )
            spec["hostname"] = f"{job_name}-{index}"
            for container in spec["containers"]:
                env = container.setdefault("env", [])
                if all(item["name"] != INDEX_ENV for item in env):
                    env.append(
                        {
                            "name": INDEX_ENV,
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": f"metadata.labels['{INDEX_ANNOTATION}']",
                                }
                            },
                        }
                    )
        self._admit(job_name, ns, generate_name, spec)
        pod_name = f"{generate_name}{suffix}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "generateName": generate_name,
                "namespace": ns,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                "finalizers": ["batch.kubernetes.io/job-tracking"],
                "uid": self.new_uid("pod"),
                "creationTimestamp": now_rfc3339(),
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": "Guaranteed"},
        }
        self.commit("pods", "ADDED", pod)

        def active(j: dict[str, Any]) -> None:
            j["status"]["active"] = j["status"].get("active", 0) + 1
            j["status"].setdefault("startTime", now_rfc3339())
            j["status"].setdefault("ready", 0)

        self.change("jobs", ns, job_name, active)
        return pod_name

    def _admit(self, job_name: str, ns: str, generate_name: str, spec: dict[str, Any]) -> None:
        """ServiceAccount admission (plugin/pkg/admission/serviceaccount/admission.go): a pod
        naming an account that does not exist is forbidden, which the Job controller records
        as ``FailedCreate`` on the Job; no pod is created."""
        account = spec.get("serviceAccountName") or "default"
        if account == "default" or (ns, account) in self.service_accounts:
            return
        refusal = (
            f'pods "{generate_name}" is forbidden: error looking up service account '
            f'{ns}/{account}: serviceaccount "{account}" not found'
        )
        self.failed_create(job_name, refusal, ns)
        raise PodRefusedError(refusal)

    def start_indexes(self, job_name: str, ns: str = NAMESPACE) -> list[str]:
        """An Indexed Job's controller pass: a pod for each pending index (neither completed,
        failed nor running), lowest first, up to ``parallelism`` active pods."""
        job = self.get("jobs", ns, job_name)
        assert job is not None
        assert job["spec"].get("completionMode") == "Indexed"
        spec, status = job["spec"], job["status"]
        busy = set(self._indices(status.get("completedIndexes")))
        busy |= set(self._indices(status.get("failedIndexes")))
        for (pod_ns, _), pod in list(self.pods.items()):
            owned = pod_ns == ns and pod["metadata"]["labels"].get(JOB_NAME_LABEL) == job_name
            if owned and pod["status"].get("phase") in ("Pending", "Running"):
                busy.add(int(pod["metadata"]["annotations"][INDEX_ANNOTATION]))
        room = spec["parallelism"] - status.get("active", 0)
        started = []
        for index in range(spec["completions"]):
            if room <= 0:
                break
            if index not in busy:
                started.append(self.start_pod(job_name, ns, index=index))
                room -= 1
        return started

    @staticmethod
    def _indices(text: str | None) -> list[int]:
        indices: list[int] = []
        for part in (text or "").split(","):
            if part:
                first, _, last = part.partition("-")
                indices.extend(range(int(first), int(last or first) + 1))
        return indices

    def _job_of(self, pod: dict[str, Any]) -> str:
        return str(pod["metadata"]["labels"][JOB_NAME_LABEL])

    def _index_of(self, pod: dict[str, Any]) -> int | None:
        text = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
        return None if text is None else int(text)

    def _index_succeeded(self, ns: str, job_name: str, index: int) -> None:
        job = self.get("jobs", ns, job_name)
        assert job is not None
        completed = sorted({*self._indices(job["status"].get("completedIndexes")), index})

        def account(j: dict[str, Any]) -> None:
            j["status"].update(
                active=max(0, j["status"].get("active", 0) - 1),
                succeeded=j["status"].get("succeeded", 0) + 1,
                completedIndexes=format_index_list(completed),
            )

        self.change("jobs", ns, job_name, account)
        if len(completed) < job["spec"]["completions"]:
            self.start_indexes(job_name, ns)
            return
        message = "Reached expected number of succeeded pods"

        def criteria(j: dict[str, Any]) -> None:
            j["status"]["conditions"] = [
                _condition("SuccessCriteriaMet", "CompletionsReached", message)
            ]

        def complete(j: dict[str, Any]) -> None:
            j["status"]["completionTime"] = now_rfc3339()
            j["status"]["conditions"].append(_condition("Complete", "CompletionsReached", message))

        self.change("jobs", ns, job_name, criteria)
        self.change("jobs", ns, job_name, complete)

    def _index_failed(
        self, ns: str, job: dict[str, Any], index: int, action: str | None, counted: bool
    ) -> str | None:
        """A pod of an Indexed Job with ``backoffLimitPerIndex`` failed (``job_controller.go``
        ``getNewFinishedPods`` / ``backoff_utils``, 1.33): FailIndex, or a counted failure
        past the index's limit, fails the index; more failed indices than
        ``maxFailedIndexes`` fail the Job at once (``MaxFailedIndexesExceeded``), otherwise a
        Job whose indices are all finished with some failed ends ``FailedIndexes``; an index
        that may retry gets a replacement pod."""
        job_name = job["metadata"]["name"]
        key = (ns, job_name, index)
        if counted:
            self._index_failures[key] = self._index_failures.get(key, 0) + 1
        index_failed = action == "FailIndex" or (
            self._index_failures.get(key, 0) > job["spec"]["backoffLimitPerIndex"]
        )
        if not index_failed:
            return self.start_pod(job_name, ns, index=index)
        failed = sorted({*self._indices(job["status"].get("failedIndexes")), index})

        def mark(j: dict[str, Any]) -> None:
            j["status"]["failedIndexes"] = format_index_list(failed)

        self.change("jobs", ns, job_name, mark)
        limit = job["spec"].get("maxFailedIndexes")
        if limit is not None and len(failed) > limit:
            self.fail_job(
                job_name,
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
                ns,
            )
            return None
        completed = self._indices(job["status"].get("completedIndexes"))
        if len(completed) + len(failed) >= job["spec"]["completions"]:
            self.fail_job(job_name, "FailedIndexes", "Job has failed indexes", ns)
            return None
        started = self.start_indexes(job_name, ns)
        return started[0] if started else None

    def _pod_succeeded(self, ns: str, pod_name: str) -> None:
        """Success: ``SuccessCriteriaMet`` (reason CompletionsReached), then ``Complete`` once no
        pod is left running (1.31+, ``job_controller.go`` ``newSuccessCondition``)."""
        pod = self.get("pods", ns, pod_name)
        assert pod is not None
        job_name = self._job_of(pod)
        index = self._index_of(pod)
        if index is not None:
            self._index_succeeded(ns, job_name, index)
            return
        message = "Reached expected number of succeeded pods"

        def criteria(j: dict[str, Any]) -> None:
            j["status"].update(active=0, succeeded=j["status"].get("succeeded", 0) + 1)
            j["status"]["conditions"] = [
                _condition("SuccessCriteriaMet", "CompletionsReached", message)
            ]

        def complete(j: dict[str, Any]) -> None:
            j["status"]["completionTime"] = now_rfc3339()
            j["status"]["conditions"].append(_condition("Complete", "CompletionsReached", message))

        self.change("jobs", ns, job_name, criteria)
        self.change("jobs", ns, job_name, complete)

    def _pod_failed(self, ns: str, pod_name: str) -> str | None:
        """A pod reached ``Failed``: apply the Job's pod failure policy and backoff limit.

        Returns the replacement pod's name, or None when the Job failed. Replacements come only
        after the old pod is terminal (``podReplacementPolicy: Failed``).
        """
        pod = self.get("pods", ns, pod_name)
        assert pod is not None
        job_name = self._job_of(pod)
        job = self.get("jobs", ns, job_name)
        if job is None or _terminal(job):
            return None
        message, counted, action = match_pod_failure_policy(
            job["spec"].get("podFailurePolicy"), pod
        )
        failed = job["status"].get("failed", 0) + (1 if counted else 0)

        def account(j: dict[str, Any]) -> None:
            j["status"]["active"] = max(0, j["status"].get("active", 0) - 1)
            if counted:
                j["status"]["failed"] = failed

        self.change("jobs", ns, job_name, account)
        if action == "FailJob":
            assert message is not None
            self.fail_job(job_name, "PodFailurePolicy", message, ns)
            return None
        index = self._index_of(pod)
        if failed > job["spec"].get("backoffLimit", 6):
            self.fail_job(
                job_name, "BackoffLimitExceeded", "Job has reached the specified backoff limit", ns
            )
            return None
        if index is not None and "backoffLimitPerIndex" in job["spec"]:
            job = self.get("jobs", ns, job_name)
            assert job is not None
            return self._index_failed(ns, job, index, action, counted)
        return self.start_pod(job_name, ns, index=index)

    def fail_job(self, job_name: str, reason: str, message: str, ns: str = NAMESPACE) -> None:
        """``FailureTarget`` first, then ``Failed`` with the same reason and message once every
        pod is terminal (1.31+; active pods are deleted)."""

        def target(j: dict[str, Any]) -> None:
            j["status"].setdefault("conditions", []).append(
                _condition("FailureTarget", reason, message)
            )

        self.change("jobs", ns, job_name, target)
        for (pod_ns, _), pod in list(self.pods.items()):
            owned = pod_ns == ns and pod["metadata"]["labels"].get(JOB_NAME_LABEL) == job_name
            if owned and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                self.commit("pods", "DELETED", copy.deepcopy(pod))

        def failed(j: dict[str, Any]) -> None:
            j["status"]["active"] = 0
            j["status"]["conditions"].append(_condition("Failed", reason, message))

        self.change("jobs", ns, job_name, failed)

    def deadline_exceeded(self, job_name: str, ns: str = NAMESPACE) -> None:
        self.fail_job(
            job_name, "DeadlineExceeded", "Job was active longer than specified deadline", ns
        )

    def expire(self, job_name: str, ns: str = NAMESPACE) -> None:
        """The TTL controller deletes a finished Job (``ttlSecondsAfterFinished``); its pods and
        their logs go with it."""
        self.delete_job(ns, job_name, "Background")
        with self.cond:
            for key in [k for k in self.logs if k[0] == ns and k[1].startswith(f"{job_name}-")]:
                del self.logs[key]

    # -- scheduler ------------------------------------------------------------------------

    def schedule(self, pod_name: str, node: str = NODE, ns: str = NAMESPACE) -> None:
        def bind(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = node
            p["status"]["conditions"] = [_pod_condition("PodScheduled", "True")]

        self.change("pods", ns, pod_name, bind)

    def unschedulable(self, pod_name: str, message: str, ns: str = NAMESPACE) -> None:
        """``PodScheduled=False`` reason ``Unschedulable`` and a ``FailedScheduling`` event, which
        the scheduler writes through events.k8s.io/v1 (no ``count``; ``series`` on repeats)."""

        def mark(p: dict[str, Any]) -> None:
            p["status"]["conditions"] = [
                _pod_condition("PodScheduled", "False", "Unschedulable", message)
            ]

        pod = self.change("pods", ns, pod_name, mark)
        self.record(pod, "FailedScheduling", message, component="default-scheduler")

    # -- kubelet ---------------------------------------------------------------------------

    def container_creating(self, pod_name: str, ns: str = NAMESPACE) -> None:
        """Scheduled, sandbox not up yet: the only thing the pod shows is ``ContainerCreating``
        (kubelet ``convertToAPIContainerStatuses`` default waiting state)."""
        self.schedule(pod_name, ns=ns)

        def creating(p: dict[str, Any]) -> None:
            p["status"].update(
                hostIP="10.0.0.11",
                startTime=now_rfc3339(),
                containerStatuses=[
                    _container_status(p, {"waiting": {"reason": "ContainerCreating"}})
                ],
            )
            p["status"]["conditions"].append(_pod_condition("PodReadyToStartContainers", "False"))

        self.change("pods", ns, pod_name, creating)

    def mount_failed(self, pod_name: str, volume: str, secret: str, ns: str = NAMESPACE) -> None:
        """A Secret volume whose Secret is missing: the kubelet's volume manager leaves the pod
        ``ContainerCreating`` and records ``FailedMount`` "MountVolume.SetUp failed for volume
        "<v>" : secret "<s>" not found" (operation_generator.go; secret volume plugin)."""
        pod = self.get("pods", ns, pod_name)
        assert pod is not None
        if not pod["spec"].get("nodeName"):
            self.container_creating(pod_name, ns)
            pod = self.get("pods", ns, pod_name)
            assert pod is not None
        self.record(
            pod,
            "FailedMount",
            f'MountVolume.SetUp failed for volume "{volume}" : secret "{secret}" not found',
        )

    def sandbox_failed(self, pod_name: str, message: str, ns: str = NAMESPACE) -> int:
        """One failed sandbox attempt (under Kata: one VM boot). The pod stays
        ContainerCreating; kubelet ``SyncPod`` records ``FailedCreatePodSandBox`` "Failed to
        create pod sandbox: <err>" (``kuberuntime_manager.go``). Returns the event's count."""
        pod = self.get("pods", ns, pod_name)
        assert pod is not None
        if not pod["spec"].get("nodeName"):
            self.container_creating(pod_name, ns)
            pod = self.get("pods", ns, pod_name)
            assert pod is not None
        event = self.record(
            pod, "FailedCreatePodSandBox", f"Failed to create pod sandbox: {message}"
        )
        return int(event["count"])

    def failed_create(self, job_name: str, message: str, ns: str = NAMESPACE) -> None:
        """An admission plugin refused the Job's pod: the Job controller records a Warning
        ``FailedCreate`` "Error creating: <err>" on the *Job* (``pkg/controller/job``
        ``job_controller.go`` via ``controller_utils.go`` CreatePods) and creates no pod."""
        job = self.get("jobs", ns, job_name)
        assert job is not None
        self.record(
            job,
            "FailedCreate",
            f"Error creating: {message}",
            component="job-controller",
            kind="Job",
        )

    def waiting(self, pod_name: str, reason: str, message: str, ns: str = NAMESPACE) -> None:
        """A container waiting reason (image pull, config), with the kubelet's event."""
        pod = self.get("pods", ns, pod_name)
        assert pod is not None
        if not pod["spec"].get("nodeName"):
            self.container_creating(pod_name, ns)

        def wait(p: dict[str, Any]) -> None:
            p["status"]["containerStatuses"] = [
                _container_status(p, {"waiting": {"reason": reason, "message": message}})
            ]

        pod = self.change("pods", ns, pod_name, wait)
        event_reason = "BackOff" if reason == "ImagePullBackOff" else "Failed"
        self.record(pod, event_reason, f"Error: {reason}" if event_reason == "Failed" else message)

    def running(self, pod_name: str, ns: str = NAMESPACE) -> None:
        pod = self.get("pods", ns, pod_name)
        assert pod is not None
        if not pod["spec"].get("nodeName"):
            self.container_creating(pod_name, ns)

        def run(p: dict[str, Any]) -> None:
            p["status"]["phase"] = "Running"
            p["status"]["podIP"] = "10.244.1.7"
            p["status"]["conditions"] = [
                _pod_condition(kind, "True")
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ]
            p["status"]["containerStatuses"] = [
                _container_status(p, {"running": {"startedAt": now_rfc3339()}}, ready=True)
            ]

        self.change("pods", ns, pod_name, run)

    def succeed(
        self,
        pod_name: str,
        *,
        log: str,
        termination_message: str | None = None,
        ns: str = NAMESPACE,
    ) -> None:
        """The replay exits 0. Under CoCo the host never sees the termination message before
        kata 3.29 (no shared filesystem), and from 3.29 only when the agent policy allows
        ``GetDiagnosticData``: so it is absent unless the test passes one."""
        self._terminate(
            pod_name, 0, "Completed", log=log, termination_message=termination_message, ns=ns
        )
        self._pod_succeeded(ns, pod_name)

    def fail(
        self,
        pod_name: str,
        *,
        exit_code: int,
        log: str = "",
        termination_message: str | None = None,
        ns: str = NAMESPACE,
    ) -> str | None:
        """The replay exits non-zero; returns the replacement pod, if the Job made one."""
        self._terminate(
            pod_name, exit_code, "Error", log=log, termination_message=termination_message, ns=ns
        )
        return self._pod_failed(ns, pod_name)

    def start_error(self, pod_name: str, message: str, ns: str = NAMESPACE) -> str | None:
        """The runtime could not start the container. Under Kata this is where the agent runs
        ``CreateContainerRequest`` (so an agent-policy denial lands here): containerd marks the
        container ``StartError``/128 with "failed to create containerd task: …", the kubelet
        records ``Failed`` "Error: …", and with ``restartPolicy: Never`` the pod fails."""
        full = f"failed to create containerd task: failed to create shim task: {message}"
        self.schedule(pod_name, ns=ns)

        def failed(p: dict[str, Any]) -> None:
            p["status"]["phase"] = "Failed"
            p["status"]["containerStatuses"] = [
                _container_status(
                    p,
                    {
                        "terminated": {
                            "exitCode": START_ERROR_EXIT_CODE,
                            "reason": START_ERROR_REASON,
                            "message": full,
                            "startedAt": "1970-01-01T00:00:00Z",
                            "finishedAt": now_rfc3339(),
                        }
                    },
                )
            ]

        pod = self.change("pods", ns, pod_name, failed)
        self.record(pod, "Failed", f"Error: {full}", field_path=f"spec.containers{{{CONTAINER}}}")
        return self._pod_failed(ns, pod_name)

    def evict(
        self,
        pod_name: str,
        *,
        reason: str | None,
        message: str,
        ns: str = NAMESPACE,
    ) -> str | None:
        """The pod is disrupted. ``reason`` is the ``DisruptionTarget`` reason
        (``TerminationByKubelet`` for node pressure, ``PreemptionByScheduler``,
        ``EvictionByEvictionAPI``, ``DeletionByTaintManager``), or None for a local-storage
        limit eviction, which sets no condition (``eviction_manager.go`` ``emptyDirLimitEviction``
        passes a nil condition). Kubelet evictions end as ``phase: Failed, reason: Evicted``."""
        kubelet = reason in (None, "TerminationByKubelet")

        def disrupt(p: dict[str, Any]) -> None:
            conditions = p["status"].setdefault("conditions", [])
            if reason is not None:
                conditions.append(_pod_condition("DisruptionTarget", "True", reason, message))
            p["status"]["phase"] = "Failed"
            if kubelet:
                p["status"].update(reason="Evicted", message=message)
            p["status"]["containerStatuses"] = [
                _container_status(
                    p,
                    {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "Error",
                            "finishedAt": now_rfc3339(),
                        }
                    },
                )
            ]

        pod = self.change("pods", ns, pod_name, disrupt)
        if kubelet:
            self.record(pod, "Evicted", message)
        return self._pod_failed(ns, pod_name)

    def _terminate(
        self,
        pod_name: str,
        exit_code: int,
        reason: str,
        *,
        log: str,
        termination_message: str | None,
        ns: str,
    ) -> None:
        pod = self.get("pods", ns, pod_name)
        assert pod is not None
        if pod["status"].get("phase") != "Running":
            self.running(pod_name, ns)
        with self.cond:
            self.logs[(ns, pod_name, CONTAINER)] = log

        def terminated(p: dict[str, Any]) -> None:
            state: dict[str, Any] = {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": now_rfc3339(),
                "finishedAt": now_rfc3339(),
            }
            if termination_message is not None:
                state["message"] = termination_message
            p["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            p["status"]["containerStatuses"] = [_container_status(p, {"terminated": state})]
            for condition in p["status"]["conditions"]:
                if condition["type"] in ("Ready", "ContainersReady"):
                    condition.update(status="False", reason="PodCompleted")

        self.change("pods", ns, pod_name, terminated)

    # -- events (client-go tools/record) ----------------------------------------------------

    def record(
        self,
        pod: dict[str, Any],
        reason: str,
        message: str,
        *,
        type_: str = "Warning",
        component: str = "kubelet",
        field_path: str = "",
        kind: str = "Pod",
    ) -> dict[str, Any]:
        """Record an event about ``pod`` (or a Job, ``kind="Job"``) as the component's recorder
        would.

        kubelet (legacy core/v1 recorder, ``tools/record/event.go``): name ``<pod>.<hex ns>``,
        ``count: 1``, first/lastTimestamp, ``source``; an identical repeat patches the same
        event (count + 1, lastTimestamp); the 10th different message of the same reason within
        10 minutes is prefixed "(combined from similar events): ". The scheduler
        (events.k8s.io/v1 recorder): ``eventTime``, ``reportingComponent``, ``series`` on repeats,
        no ``count``/``source`` as seen through core/v1.
        """
        meta = pod["metadata"]
        involved = {
            "kind": kind,
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": "batch/v1" if kind == "Job" else "v1",
            "resourceVersion": meta["resourceVersion"],
        }
        if field_path:
            involved["fieldPath"] = field_path
        host = pod["spec"].get("nodeName", "")
        similar_key = (component, host, meta["namespace"], meta["name"], meta["uid"], type_, reason)
        with self.cond:
            messages = self._similar.setdefault(similar_key, set())
            messages.add(message)
            aggregate = component in {"kubelet", "job-controller"} and (
                len(messages) >= AGGREGATE_MAX_EVENTS
            )
            if aggregate:
                # EventAggregate: from the 10th distinct message on, one event keyed by the
                # similar-key; eventObserve patches its count and message (the latest).
                message = "(combined from similar events): " + message
            for existing in self.events.values():
                if (
                    existing["involvedObject"]["uid"] == meta["uid"]
                    and existing["reason"] == reason
                    and existing["type"] == type_
                    and (
                        existing["message"] == message
                        or (
                            aggregate
                            and existing["message"].startswith("(combined from similar events)")
                        )
                    )
                ):
                    event = copy.deepcopy(existing)
                    if "series" in event or component not in {"kubelet", "job-controller"}:
                        series = event.setdefault("series", {"count": 1})
                        series.update(count=series["count"] + 1, lastObservedTime=_micro_time())
                    else:
                        event.update(
                            count=event["count"] + 1, lastTimestamp=now_rfc3339(), message=message
                        )
                    return self.commit("events", "MODIFIED", event)
            stamp = time.time_ns()
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{stamp:x}",
                    "namespace": meta["namespace"],
                    "uid": self.new_uid("event"),
                    "creationTimestamp": now_rfc3339(),
                },
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "type": type_,
            }
            if component in {"kubelet", "job-controller"}:
                event.update(
                    count=1,
                    firstTimestamp=now_rfc3339(),
                    lastTimestamp=now_rfc3339(),
                    source={"component": component, "host": host},
                    reportingComponent=component,
                    reportingInstance=host,
                )
            else:
                event.update(
                    eventTime=_micro_time(),
                    reportingComponent=component,
                    reportingInstance=f"{component}-0",
                    action="Scheduling",
                    source={},
                )
            return self.commit("events", "ADDED", event)


def match_pod_failure_policy(
    policy: dict[str, Any] | None, pod: dict[str, Any]
) -> tuple[str | None, bool, str | None]:
    """``(FailJob message, counted, action)`` for a failed pod, as the Job controller decides
    (``pkg/controller/job/pod_failure_policy.go`` ``matchPodFailurePolicy``): rules in order,
    first match wins; exit-code rules look at terminated containers with a non-zero code;
    no rule matched means counted."""
    if policy is None:
        return None, True, None
    statuses = pod["status"].get("containerStatuses") or []
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule["action"]
        on_codes = rule.get("onExitCodes")
        if on_codes is not None:
            for container in statuses:
                terminated = (container.get("state") or {}).get("terminated")
                if terminated is None or terminated.get("exitCode", 0) == 0:
                    continue
                if on_codes.get("containerName") not in (None, container["name"]):
                    continue
                inside = terminated["exitCode"] in on_codes["values"]
                if inside == (on_codes["operator"] == "In"):
                    message = (
                        f"Container {container['name']} for pod {pod['metadata']['namespace']}/"
                        f"{pod['metadata']['name']} failed with exit code {terminated['exitCode']} "
                        f"matching {action} rule at index {index}"
                    )
                    return _decide(action, message)
            continue
        for condition in pod["status"].get("conditions") or []:
            for pattern in rule.get("onPodConditions") or []:
                if (
                    condition["type"] == pattern["type"]
                    and condition["status"] == pattern["status"]
                ):
                    message = (
                        f"Pod {pod['metadata']['namespace']}/{pod['metadata']['name']} has "
                        f"condition {condition['type']} matching {action} rule at index {index}"
                    )
                    return _decide(action, message)
    return None, True, None


def _decide(action: str, message: str) -> tuple[str | None, bool, str | None]:
    if action == "Ignore":
        return None, False, action
    if action == "FailJob":
        return message, True, action
    return None, True, action  # Count, FailIndex (counted; FailIndex fails the index)


def format_index_list(indices: list[int]) -> str:
    """``completedIndexes``/``failedIndexes`` as the controller writes them: ascending,
    runs of three or more as ``first-last`` (batch/v1 ``JobStatus``)."""
    parts: list[str] = []
    start = 0
    while start < len(indices):
        end = start
        while end + 1 < len(indices) and indices[end + 1] == indices[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{indices[start]}-{indices[end]}")
        else:
            parts.extend(str(index) for index in indices[start : end + 1])
        start = end + 1
    return ",".join(parts)


def _terminal(job: dict[str, Any]) -> bool:
    return any(
        c["type"] in ("Failed", "Complete", "FailureTarget") and c["status"] == "True"
        for c in job["status"].get("conditions") or []
    )


def _condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    stamp = now_rfc3339()
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


def _pod_condition(
    kind: str, value: str, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": value,
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }
    if reason is not None:
        condition["reason"] = reason
    if message is not None:
        condition["message"] = message
    return condition


def _container_status(
    pod: dict[str, Any], state: dict[str, Any], *, ready: bool = False
) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    status: dict[str, Any] = {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
    }
    if "waiting" not in state:
        status["containerID"] = f"containerd://{pod['metadata']['uid']}"
        status["imageID"] = container["image"]
    return status


def _micro_time() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


__all__ = ["CONTROLLER_UID_LABEL", "FakeCluster", "match_pod_failure_policy"]
