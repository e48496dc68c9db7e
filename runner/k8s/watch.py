"""Track any number of runs with one Job watch and one Pod watch (label-selected).

Each watch follows the list-then-watch protocol: list (note ``resourceVersion``), then
watch from it with ``timeoutSeconds``; when the server ends the stream, watch again from
the last version seen (bookmarks keep it fresh). A ``410 Gone`` means the version was
compacted away, so the state is re-listed. Transient failures back off and re-list.
The API request count therefore depends on time and failures, not on the number of runs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from runner.k8s.job import INSTANCE_LABEL, TRACKING_SELECTOR
from runner.k8s.retry import KUBERNETES_RETRY, describe, is_transient, read_json
from runner.k8s.state import RunOutcome, job_outcome, pod_blocker
from tenant.http import RetryPolicy

log = structlog.get_logger("attested-replay.k8s")

Kind = Literal["job", "pod"]
ProgressCallback = Callable[[str, str], None]


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
        selector: str,
        watch_timeout: int,
        retry: RetryPolicy,
    ) -> None:
        super().__init__(name=f"attested-replay-watch-{kind}", daemon=True)
        self.kind: Kind = kind
        self._list_fn = list_fn
        self._namespace = namespace
        self._sink = sink
        self._selector = selector
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
        while not self._stopped.is_set():
            try:
                version = self._list()
                failures = 0
                self._watch_from(version)
            except Exception as exc:  # noqa: BLE001 - a dying thread must report, not vanish
                if self._stopped.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    log.info("k8s_watch_expired", kind=self.kind)
                    continue  # re-list
                if not is_transient(exc):
                    self._sink.put(_Event(self.kind, "FATAL", {"error": describe(exc)}))
                    return
                failures += 1
            if failures >= self._retry.attempts:
                self._sink.put(
                    _Event(self.kind, "FATAL", {"error": f"{failures} consecutive failures"})
                )
                return
            if failures:
                log.warning("k8s_watch_retry", kind=self.kind, attempt=failures)
                self._stopped.wait(self._retry.delay(failures - 1))

    def _list(self) -> str:
        self.relists += 1
        listing = read_json(
            self._list_fn(self._namespace, label_selector=self._selector, _preload_content=False)
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
                label_selector=self._selector,
                resource_version=version,
                timeout_seconds=self._watch_timeout,
                allow_watch_bookmarks=True,
                _request_timeout=self._watch_timeout + 10,
            ):
                if event["type"] != "BOOKMARK":
                    self._sink.put(_Event(self.kind, event["type"], event["raw_object"]))
                if self._stopped.is_set():
                    stream.stop()  # type: ignore[no-untyped-call]  # untyped library
            version = stream.resource_version or version


class JobTracker:
    """Wait for many Jobs at once; one watch per resource type, whatever their number."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        *,
        selector: str = TRACKING_SELECTOR,
        watch_timeout: int = 60,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._batch = client.BatchV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._selector = selector
        self._watch_timeout = watch_timeout
        self._retry = retry or KUBERNETES_RETRY
        self.relists = 0

    def wait(
        self,
        names: Iterable[str],
        *,
        timeout: float,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, RunOutcome]:
        """Outcome of every named Job: terminal, cannot-run, deleted, or timeout."""
        pending = set(names)
        outcomes: dict[str, RunOutcome] = {}
        phases: dict[str, str] = {}
        sink: queue.Queue[_Event] = queue.Queue()
        sources: tuple[tuple[Kind, Callable[..., Any]], ...] = (
            ("job", self._batch.list_namespaced_job),
            ("pod", self._core.list_namespaced_pod),
        )
        watchers = [
            _ResourceWatcher(
                kind,
                list_fn,
                self._namespace,
                sink,
                selector=self._selector,
                watch_timeout=self._watch_timeout,
                retry=self._retry,
            )
            for kind, list_fn in sources
        ]

        def settle(outcome: RunOutcome) -> None:
            pending.discard(outcome.name)
            outcomes[outcome.name] = outcome
            if on_progress is not None:
                on_progress(outcome.name, outcome.state)

        def progress(name: str, phase: str) -> None:
            if phases.get(name) != phase:
                phases[name] = phase
                if on_progress is not None:
                    on_progress(name, phase)

        for watcher in watchers:
            watcher.start()
        deadline = time.monotonic() + timeout
        try:
            while pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    event = sink.get(timeout=min(remaining, 1.0))
                except queue.Empty:
                    continue
                if event.type == "FATAL":
                    for name in sorted(pending):
                        settle(RunOutcome(name, "timeout", "WatchFailed", str(event.obj["error"])))
                    break
                if event.kind == "job":
                    self._on_job_event(event, pending, settle, progress)
                else:
                    self._on_pod_event(event, pending, settle, progress)
        finally:
            for watcher in watchers:
                watcher.stop()
            self.relists = sum(watcher.relists for watcher in watchers)
        for name in sorted(pending):
            outcomes[name] = RunOutcome(
                name, "timeout", "Timeout", f"not finished after {timeout:g} s"
            )
        return outcomes

    @staticmethod
    def _on_job_event(
        event: _Event,
        pending: set[str],
        settle: Callable[[RunOutcome], None],
        progress: ProgressCallback,
    ) -> None:
        if event.type == "LISTED":
            present = {item["metadata"]["name"] for item in event.obj.get("items") or []}
            for name in sorted(pending - present):
                settle(RunOutcome(name, "deleted", "JobNotFound", "the Job does not exist"))
            for item in event.obj.get("items") or []:
                JobTracker._on_job(item, pending, settle, progress)
            return
        name = event.obj.get("metadata", {}).get("name")
        if name not in pending:
            return
        if event.type == "DELETED":
            settle(RunOutcome(name, "deleted", "JobDeleted", "the Job was deleted while waiting"))
            return
        JobTracker._on_job(event.obj, pending, settle, progress)

    @staticmethod
    def _on_job(
        job: dict[str, Any],
        pending: set[str],
        settle: Callable[[RunOutcome], None],
        progress: ProgressCallback,
    ) -> None:
        name = job["metadata"]["name"]
        if name not in pending:
            return
        outcome = job_outcome(job)
        if outcome is not None:
            settle(outcome)
        elif (job.get("status") or {}).get("active"):
            progress(name, "running")
        else:
            progress(name, "pending")

    @staticmethod
    def _on_pod_event(
        event: _Event,
        pending: set[str],
        settle: Callable[[RunOutcome], None],
        progress: ProgressCallback,
    ) -> None:
        if event.type == "DELETED":
            return
        pods = (event.obj.get("items") or []) if event.type == "LISTED" else [event.obj]
        for pod in pods:
            name = (pod.get("metadata", {}).get("labels") or {}).get(INSTANCE_LABEL)
            if name not in pending:
                continue
            blocker = pod_blocker(pod)
            if blocker is not None:
                reason, message = blocker
                settle(RunOutcome(name, "cannot-run", reason, message))
            elif (pod.get("status") or {}).get("phase") == "Running":
                progress(name, "running")
