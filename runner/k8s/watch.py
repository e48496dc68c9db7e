"""Track any number of runs with three watches: Jobs, their Pods, and Warning Events on Pods.

Each watch follows the list-then-watch protocol: list (note ``resourceVersion``), then watch
from it with ``timeoutSeconds``; when the server ends the stream, watch again from the last
version seen (bookmarks keep it fresh). A ``410 Gone`` means the version was compacted away, so
the state is re-listed. Transient failures back off and re-list. The API request count
therefore depends on time and failures, not on the number of runs.

Events carry no labels of their object, so the event watch is namespace-wide with
``fieldSelector=type=Warning`` (core/v1 event selectable fields,
``pkg/registry/core/event/strategy.go``; a field selector cannot OR two kinds, so Pod and Job
events share it) and is matched to runs here: a pod's by pod name, a Job's by Job name (the Job
controller's ``FailedCreate`` when admission refused the pod, which no pod would ever show). An
event can arrive before its pod: it is kept (boundedly) until the pod shows up.

The tracker wakes at least once per second (the poll interval) to end stalls whose grace has
passed; a run that cannot go on is stopped by the ``stop`` callback (the Job is deleted, so the
kubelet boots no further VM).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

import structlog
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from attestation.tenant.http import RetryPolicy
from runner.k8s.job import INSTANCE_LABEL, TRACKING_SELECTOR
from runner.k8s.pods import list_run_pods
from runner.k8s.progress import Report, RunProgress, WaitPolicy
from runner.k8s.retry import KUBERNETES_RETRY, describe, is_transient, read_json
from runner.k8s.state import JOB_NOT_FOUND, RunOutcome, job_event_outcome

log = structlog.get_logger("attested-replay.k8s")

Kind = Literal["job", "pod", "event"]
ProgressCallback = Callable[[Report], None]
StopCallback = Callable[[RunOutcome], RunOutcome]
#: The tracker's wake-up interval: grace expiries are noticed within it.
POLL_INTERVAL: Final = 1.0
#: Warning events of this namespace (pods' and Jobs'); runs are matched by object name.
EVENT_SELECTOR: Final = "type=Warning"
#: Events for pods not seen yet, kept until the pod appears (oldest dropped first).
MAX_PENDING_EVENTS: Final = 1024


@dataclass(frozen=True, slots=True)
class _Event:
    kind: Kind
    type: str  # ADDED, MODIFIED, DELETED, LISTED (a full listing), FATAL
    obj: dict[str, Any]


class _ResourceWatcher(threading.Thread):
    """List-then-watch loop for one resource type, feeding a shared queue."""

    def __init__(
        self,
        kind: Kind,
        list_fn: Callable[..., Any],
        namespace: str,
        sink: queue.Queue[_Event],
        *,
        label_selector: str | None,
        field_selector: str | None,
        watch_timeout: int,
        retry: RetryPolicy,
    ) -> None:
        super().__init__(name=f"attested-replay-watch-{kind}", daemon=True)
        self.kind: Kind = kind
        self._list_fn = list_fn
        self._namespace = namespace
        self._sink = sink
        self._selectors = {
            key: value
            for key, value in (
                ("label_selector", label_selector),
                ("field_selector", field_selector),
            )
            if value
        }
        self._watch_timeout = watch_timeout
        self._retry = retry
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._current: watch.Watch | None = None
        self.relists = 0

    def stop(self, grace: float = 1.0) -> None:
        """Stop and wait up to ``grace`` seconds for the thread to end.

        ``Watch.stop`` closes the socket of an open stream, but a stream that is still
        opening resets the flag and has no socket yet, so stopping is repeated until the
        thread ends (or the server-side timeout ends the stream).
        """
        with self._lock:
            self._stopped.set()
        deadline = time.monotonic() + grace
        while self.is_alive() and time.monotonic() < deadline:
            current = self._current
            if current is not None:
                current.stop()  # type: ignore[no-untyped-call]  # kubernetes.watch is untyped
            self.join(0.02)

    def run(self) -> None:
        failures = 0
        permitted = False
        last = ""
        while not self._stopped.is_set():
            try:
                version = self._list()
                failures = 0
                permitted = True
                self._watch_from(version)
            except Exception as exc:  # noqa: BLE001 - a dying thread must report, not vanish
                if self._stopped.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    log.info("k8s_watch_expired", kind=self.kind)
                    continue  # re-list
                if not is_transient(exc) and not (permitted and _refused(exc)):
                    self._sink.put(_Event(self.kind, "FATAL", {"error": describe(exc)}))
                    return
                failures += 1
                last = describe(exc)
            if failures >= self._retry.attempts:
                error = f"{failures} consecutive failures; last: {last}"
                self._sink.put(_Event(self.kind, "FATAL", {"error": error}))
                return
            if failures:
                log.warning("k8s_watch_retry", kind=self.kind, attempt=failures)
                self._stopped.wait(self._retry.delay(failures - 1))

    def _list(self) -> str:
        self.relists += 1
        listing = read_json(
            self._list_fn(self._namespace, _preload_content=False, **self._selectors)
        )
        self._sink.put(_Event(self.kind, "LISTED", listing))
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    def _watch_from(self, version: str) -> None:
        while not self._stopped.is_set():
            # return_type "object": events stay plain dicts. The client's models reject
            # objects they do not know field by field; the tracker reads only a few fields.
            with self._lock:
                if self._stopped.is_set():
                    return
                stream = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]  # untyped
                self._current = stream
            for event in stream.stream(  # type: ignore[no-untyped-call]  # untyped library
                self._list_fn,
                self._namespace,
                resource_version=version,
                timeout_seconds=self._watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=self._watch_timeout + 10,
                **self._selectors,
            ):
                if event["type"] != "BOOKMARK":
                    self._sink.put(_Event(self.kind, event["type"], event["raw_object"]))
                if self._stopped.is_set():
                    stream.stop()  # type: ignore[no-untyped-call]  # untyped library
            version = stream.resource_version or version


def _refused(error: Exception) -> bool:
    """401 or 403. After a list that was allowed, a restarting kube-apiserver answers so
    until its authenticator and RBAC caches are filled (measured on v1.34.4 by
    tests/k8s/test_real_cluster.py): retried within the same budget as a 5xx, so that a lasting
    refusal still ends the wait."""
    return isinstance(error, ApiException) and error.status in {401, 403}


class JobTracker:
    """Wait for many Jobs at once; three watches whatever their number."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        *,
        selector: str = TRACKING_SELECTOR,
        watch_timeout: int = 60,
        retry: RetryPolicy | None = None,
        policy: WaitPolicy | None = None,
    ) -> None:
        self._batch = client.BatchV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._selector = selector
        self._watch_timeout = watch_timeout
        self._retry = retry or KUBERNETES_RETRY
        self._policy = policy or WaitPolicy()
        self.relists = 0

    def wait(
        self,
        names: Iterable[str],
        *,
        timeout: float,
        on_progress: ProgressCallback | None = None,
        stop: StopCallback | None = None,
    ) -> dict[str, RunOutcome]:
        """Outcome of every named Job: terminal, cannot-run, deleted, or timeout."""
        runs = {name: RunProgress(name, self._policy) for name in names}
        outcomes: dict[str, RunOutcome] = {}
        pod_runs: dict[str, str] = {}
        early: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        sink: queue.Queue[_Event] = queue.Queue()
        watchers = [
            self._watcher("job", self._batch.list_namespaced_job, sink, self._selector, None),
            self._watcher("pod", self._core.list_namespaced_pod, sink, self._selector, None),
            self._watcher("event", self._core.list_namespaced_event, sink, None, EVENT_SELECTOR),
        ]

        def settle(outcome: RunOutcome) -> None:
            if outcome.name not in runs:
                return
            publish(runs[outcome.name])  # failed attempts seen on the way come first
            if outcome.state == "cannot-run" and stop is not None:
                outcome = stop(outcome)
            del runs[outcome.name]
            outcomes[outcome.name] = outcome
            if on_progress is not None:
                on_progress(Report(outcome.name, outcome.state, outcome.reason, outcome.message))

        def settle_job(outcome: RunOutcome) -> None:
            """A failed Job is reported with the failed attempts of its pods. The pod watch may
            not have delivered the last ones yet (watches of different kinds are not ordered),
            so the run's pods are listed once: one request per failed run."""
            run = runs.get(outcome.name)
            if outcome.state == "failed" and run is not None:
                now = time.monotonic()
                for pod in self._pods_of(outcome.name):
                    pod_runs[str(pod["metadata"]["name"])] = outcome.name
                    run.on_pod(pod, now)
                outcome = dataclasses.replace(outcome, attempts=run.attempts())
            settle(outcome)

        def publish(run: RunProgress) -> None:
            for report in run.reports():
                if on_progress is not None:
                    on_progress(report)

        def on_pod(pod: dict[str, Any], event_type: str, now: float) -> None:
            name = (pod.get("metadata", {}).get("labels") or {}).get(INSTANCE_LABEL)
            run = runs.get(str(name))
            if run is None:
                return
            pod_name = str(pod["metadata"]["name"])
            if event_type == "DELETED":
                run.on_pod_deleted(pod, now)
                return
            pod_runs[pod_name] = run.name
            outcome = run.on_pod(pod, now)
            for event in early.pop(pod_name, []):
                outcome = outcome or run.on_event(pod_name, event, now)
            if outcome is not None:
                settle(outcome)
            else:
                publish(run)

        def on_event(event: dict[str, Any], now: float) -> None:
            involved = event.get("involvedObject") or {}
            if involved.get("kind") == "Job":
                refused = job_event_outcome(event)
                if refused is not None and refused.name in runs:
                    settle(refused)
                return
            if involved.get("kind") != "Pod":
                return
            pod_name = str((event.get("involvedObject") or {}).get("name", ""))
            run_name = pod_runs.get(pod_name)
            if run_name is None:
                early.setdefault(pod_name, []).append(event)
                while len(early) > MAX_PENDING_EVENTS:
                    early.popitem(last=False)
                return
            run = runs.get(run_name)
            if run is None:
                return
            outcome = run.on_event(pod_name, event, now)
            if outcome is not None:
                settle(outcome)
            else:
                publish(run)

        for watcher in watchers:
            watcher.start()
        deadline = time.monotonic() + timeout
        try:
            while runs:
                now = time.monotonic()
                if now >= deadline:
                    break
                for run in list(runs.values()):
                    outcome = run.check(now)
                    if outcome is not None:
                        settle(outcome)
                try:
                    event = sink.get(timeout=min(deadline - now, POLL_INTERVAL))
                except queue.Empty:
                    continue
                now = time.monotonic()
                if event.type == "FATAL":
                    for name in sorted(runs):
                        settle(RunOutcome(name, "timeout", "WatchFailed", str(event.obj["error"])))
                    break
                items = (event.obj.get("items") or []) if event.type == "LISTED" else [event.obj]
                if event.kind == "job":
                    self._on_jobs(event, items, runs, settle_job, publish)
                elif event.kind == "pod":
                    for pod in items:
                        on_pod(pod, event.type, now)
                else:
                    for item in items:
                        if event.type != "DELETED":
                            on_event(item, now)
        finally:
            for watcher in watchers:
                watcher.stop()
            self.relists = sum(watcher.relists for watcher in watchers)
        for name in sorted(runs):
            outcomes[name] = RunOutcome(
                name, "timeout", "Timeout", f"not finished after {timeout:g} s"
            )
        return outcomes

    def _pods_of(self, name: str) -> list[dict[str, Any]]:
        return list_run_pods(self._core, self._retry, self._namespace, name)

    def _watcher(
        self,
        kind: Kind,
        list_fn: Callable[..., Any],
        sink: queue.Queue[_Event],
        label_selector: str | None,
        field_selector: str | None,
    ) -> _ResourceWatcher:
        return _ResourceWatcher(
            kind,
            list_fn,
            self._namespace,
            sink,
            label_selector=label_selector,
            field_selector=field_selector,
            watch_timeout=self._watch_timeout,
            retry=self._retry,
        )

    @staticmethod
    def _on_jobs(
        event: _Event,
        items: list[dict[str, Any]],
        runs: dict[str, RunProgress],
        settle: Callable[[RunOutcome], None],
        publish: Callable[[RunProgress], None],
    ) -> None:
        if event.type == "LISTED":
            present = {item["metadata"]["name"] for item in items}
            for name in sorted(set(runs) - present):
                settle(RunOutcome(name, "deleted", JOB_NOT_FOUND, "the Job does not exist"))
        for job in items:
            run = runs.get(job["metadata"]["name"])
            if run is None:
                continue
            if event.type == "DELETED":
                settle(
                    RunOutcome(
                        run.name, "deleted", "JobDeleted", "the Job was deleted while waiting"
                    )
                )
                continue
            outcome = run.on_job(job)
            if outcome is not None:
                settle(outcome)
            else:
                publish(run)
