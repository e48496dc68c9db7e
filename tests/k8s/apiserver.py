"""A Kubernetes API server on loopback, compatible for the endpoints the submitter uses.

It speaks the real wire protocol to the official ``kubernetes`` client: Jobs (create, get,
list, watch, delete with propagationPolicy), Pods (get, list, watch) and pod logs, with
monotonic ``resourceVersion``, equality label selectors, ``409 AlreadyExists``, ``404``
Status bodies, and watch streams that end after ``timeoutSeconds``, send BOOKMARKs when
asked, and answer ``410 Expired`` (an ERROR event, as the real server does) for versions
that were compacted away. Created Jobs can be validated strictly against the Kubernetes
schemas, as the real server would reject unknown fields.

There is no real controller or kubelet: tests script state changes through
:class:`FakeCluster` methods (``start_pod``, ``finish_pod``, ``complete_job``, ...), and
can inject faults (5xx answers, dropped connections, commit-then-fail) per route.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import itertools
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate

KUBERNETES_VERSION = "1.33"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

_JOBS = re.compile(r"^/apis/batch/v1/namespaces/([a-z0-9-]+)/jobs$")
_JOB = re.compile(r"^/apis/batch/v1/namespaces/([a-z0-9-]+)/jobs/([a-z0-9.-]+)$")
_PODS = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/pods$")
_POD = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/pods/([a-z0-9.-]+)$")
_RUNTIME_CLASS = re.compile(r"^/apis/node.k8s.io/v1/runtimeclasses/([a-z0-9.-]+)$")
_POD_LOG = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/pods/([a-z0-9.-]+)/log$")


@dataclass
class Fault:
    """Make the next ``times`` requests matching ``method`` and ``path`` misbehave.

    ``action``: an HTTP status code (answered before any processing), ``"drop"`` (close
    the connection without answering, before processing), or ``"commit-then-500"``
    (process the request, then answer 500 as if the response was lost).
    """

    method: str
    path: str
    action: int | str
    times: int = 1
    hits: int = 0


@dataclass
class _Event:
    rv: int
    kind: str  # "jobs" or "pods"
    type: str
    obj: dict[str, Any]


@dataclass
class FakeCluster:
    validate_jobs: bool = True
    #: RuntimeClasses the cluster has (the CoCo chart's); None answers 403 (no permission).
    runtime_classes: set[str] | None = field(
        default_factory=lambda: {"kata-qemu-snp", "kata-qemu-coco-dev", "kata-remote"}
    )
    rv: int = 1
    compacted_rv: int = 0
    expire_epoch: int = 0
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    history: list[_Event] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    created: Counter[str] = field(default_factory=Counter)
    on_job_created: Callable[[FakeCluster, dict[str, Any]], None] | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    closing: bool = False
    _pod_serial: itertools.count[int] = field(default_factory=itertools.count)

    # -- state changes (caller holds no lock) -------------------------------------------

    def _commit(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        """Record a change under the lock: bump the version, append the event, wake watchers."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        store = self.jobs if kind == "jobs" else self.pods
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if event_type == "DELETED":
            store.pop(key, None)
        else:
            store[key] = obj
        self.history.append(_Event(self.rv, kind, event_type, copy.deepcopy(obj)))
        self.cond.notify_all()

    def create_job(self, namespace: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("metadata", {}).get("name", "")
        if self.validate_jobs:
            try:
                kubernetes_validate.validate(body, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                return 422, _status(422, "Invalid", f"Job.batch {name!r} is invalid: {exc}")
        with self.cond:
            if (namespace, name) in self.jobs:
                return 409, _status(
                    409, "AlreadyExists", f'jobs.batch "{name}" already exists', name=name
                )
            job = copy.deepcopy(body)
            job["metadata"].update(
                namespace=namespace,
                uid=f"uid-{name}",
                creationTimestamp="2026-11-29T12:00:00Z",
                generation=1,
            )
            job["status"] = {}
            self.created[name] += 1
            self._commit("jobs", "ADDED", job)
            snapshot = copy.deepcopy(job)
        if self.on_job_created is not None:
            threading.Thread(target=self.on_job_created, args=(self, snapshot), daemon=True).start()
        return 201, snapshot

    def delete_job(self, namespace: str, name: str, propagation: str | None) -> int:
        with self.cond:
            job = self.jobs.get((namespace, name))
            if job is None:
                return 404
            self._commit("jobs", "DELETED", copy.deepcopy(job))
            if propagation in ("Background", "Foreground"):
                for key, pod in list(self.pods.items()):
                    if (
                        key[0] == namespace
                        and pod["metadata"]["labels"].get(JOB_NAME_LABEL) == name
                    ):
                        self._commit("pods", "DELETED", copy.deepcopy(pod))
            return 200

    def _update_job(self, name: str, change: Callable[[dict[str, Any]], None], ns: str) -> None:
        with self.cond:
            job = copy.deepcopy(self.jobs[(ns, name)])
            change(job)
            self._commit("jobs", "MODIFIED", job)

    def _update_pod(self, name: str, change: Callable[[dict[str, Any]], None], ns: str) -> None:
        with self.cond:
            pod = copy.deepcopy(self.pods[(ns, name)])
            change(pod)
            self._commit("pods", "MODIFIED", pod)

    # -- scripted controller and kubelet ------------------------------------------------

    def start_pod(self, job_name: str, ns: str = "attested-replay") -> str:
        """The Job controller creates a pod (Pending) and counts it active."""
        with self.cond:
            job = self.jobs[(ns, job_name)]
            template = job["spec"]["template"]
            pod_name = f"{job_name[:57]}-{next(self._pod_serial):05x}"
            labels = dict(template["metadata"].get("labels") or {})
            labels[JOB_NAME_LABEL] = job_name
            labels["job-name"] = job_name
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": dict(template["metadata"].get("annotations") or {}),
                    "uid": f"uid-{pod_name}",
                },
                "spec": copy.deepcopy(template["spec"]),
                "status": {"phase": "Pending"},
            }
            self._commit("pods", "ADDED", pod)
        self._update_job(job_name, lambda j: j["status"].update(active=1), ns)
        return pod_name

    def pod_running(self, pod: str, ns: str = "attested-replay") -> None:
        def change(p: dict[str, Any]) -> None:
            p["status"] = {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "replay",
                        "image": p["spec"]["containers"][0]["image"],
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-11-29T12:00:05Z"}},
                    }
                ],
            }

        self._update_pod(pod, change, ns)

    def pod_unschedulable(self, pod: str, message: str, ns: str = "attested-replay") -> None:
        def change(p: dict[str, Any]) -> None:
            p["status"] = {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ],
            }

        self._update_pod(pod, change, ns)

    def pod_waiting(self, pod: str, reason: str, message: str, ns: str = "attested-replay") -> None:
        def change(p: dict[str, Any]) -> None:
            p["status"] = {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "replay",
                        "image": p["spec"]["containers"][0]["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": {"reason": reason, "message": message}},
                    }
                ],
            }

        self._update_pod(pod, change, ns)

    def finish_pod(
        self, pod: str, *, exit_code: int, message: str, log: str, ns: str = "attested-replay"
    ) -> None:
        self.logs[(ns, pod)] = log

        def change(p: dict[str, Any]) -> None:
            p["status"] = {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "replay",
                        "image": p["spec"]["containers"][0]["image"],
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": exit_code,
                                "reason": "Completed" if exit_code == 0 else "Error",
                                "message": message,
                            }
                        },
                    }
                ],
            }

        self._update_pod(pod, change, ns)

    def complete_job(self, job_name: str, ns: str = "attested-replay") -> None:
        def change(j: dict[str, Any]) -> None:
            j["status"] = {
                "active": 0,
                "succeeded": 1,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"},
                ],
            }

        self._update_job(job_name, change, ns)

    def fail_job(
        self, job_name: str, reason: str, message: str, ns: str = "attested-replay"
    ) -> None:
        def interim(j: dict[str, Any]) -> None:
            j["status"]["conditions"] = [
                {"type": "FailureTarget", "status": "True", "reason": reason, "message": message}
            ]

        def final(j: dict[str, Any]) -> None:
            j["status"] = {
                "active": 0,
                "failed": 1,
                "conditions": [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": reason,
                        "message": message,
                    },
                    {"type": "Failed", "status": "True", "reason": reason, "message": message},
                ],
            }

        self._update_job(job_name, interim, ns)
        self._update_job(job_name, final, ns)

    def expire_watches(self) -> None:
        """Compact history: open watches get 410 Expired, as do watches from older versions."""
        with self.cond:
            # Other objects changed meanwhile (a real cluster never stands still), and the
            # history up to here is gone: every version handed out so far is too old.
            self.rv += 1
            self.compacted_rv = self.rv
            self.expire_epoch += 1
            self.cond.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("cluster condition not reached")
                self.cond.wait(remaining)

    def events_after(self, version: int) -> list[_Event]:
        """Events newer than ``version`` (history is ordered by version)."""
        return self.history[bisect.bisect_right(self.history, version, key=lambda e: e.rv) :]

    def watchers(self) -> int:
        return self.requests["WATCH jobs"] + self.requests["WATCH pods"]


def _status(code: int, reason: str, message: str, *, name: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if name is not None:
        status["details"] = {"name": name, "group": "batch", "kind": "jobs"}
    return status


def _request_key(method: str, path: str, *, watching: bool) -> str:
    """``WATCH jobs``, ``LIST pods``, ``GET job``, ``POST jobs``, ``GET log``, ``DELETE job``."""
    if _POD_LOG.match(path):
        return f"{method} log"
    if _RUNTIME_CLASS.match(path):
        return f"{method} runtimeclass"
    collection = _JOBS.match(path) or _PODS.match(path)
    kind = "jobs" if "/jobs" in path else "pods"
    if collection and method == "GET":
        return f"{'WATCH' if watching else 'LIST'} {kind}"
    return f"{method} {kind if collection else kind[:-1]}"


def _selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if not sep:
            raise ValueError(f"unsupported selector term {term!r}")
        if labels.get(key.strip()) != value.lstrip("=").strip():
            return False
    return True


def _field_matches(selector: str | None, obj: dict[str, Any]) -> bool:
    if not selector:
        return True
    key, _, value = selector.partition("=")
    if key != "metadata.name":
        raise ValueError(f"unsupported field selector {selector!r}")
    return bool(obj["metadata"]["name"] == value)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1: keep-alive like the real server, and chunked watch streams; the client
    # reads a stream without chunking until the connection closes, so events would stall.
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Like the Go server: no Nagle delay between the header and body writes.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    # -- plumbing ------------------------------------------------------------------------

    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fault(self, method: str, path: str) -> Fault | None:
        cluster = self.server.cluster
        with cluster.cond:
            for fault in cluster.faults:
                if (
                    fault.method == method
                    and re.search(fault.path, path)
                    and fault.hits < fault.times
                ):
                    fault.hits += 1
                    return fault
        return None

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        cluster = self.server.cluster
        body: dict[str, Any] | None = None
        if method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            # The v37 client sends no Content-Type on POST; the real server defaults to JSON.
            body = json.loads(self.rfile.read(length) or b"{}")
        fault = self._fault(method, url.path)
        if fault is not None and fault.action == "drop":
            self._drop()
            return
        if fault is not None and isinstance(fault.action, int):
            self._send_json(fault.action, _status(fault.action, "InternalError", "injected fault"))
            return
        watching = query.get("watch") in ("true", "True", "1")
        with cluster.cond:
            cluster.requests[_request_key(method, url.path, watching=watching)] += 1
            cluster.requests["total"] += 1
            cluster.cond.notify_all()
        try:
            code, answer = self._route(method, url.path, query, body, watching)
        except ValueError as exc:
            code, answer = 400, _status(400, "BadRequest", str(exc))
        if code == 0:
            return  # streamed
        if fault is not None and fault.action == "commit-then-500":
            self._send_json(500, _status(500, "InternalError", "injected fault after commit"))
            return
        if isinstance(answer, str):
            data = answer.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._send_json(code, answer)

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: dict[str, Any] | None,
        watching: bool,
    ) -> tuple[int, Any]:
        cluster = self.server.cluster
        if match := _RUNTIME_CLASS.match(path):
            name = match.group(1)
            if cluster.runtime_classes is None:
                return 403, _status(403, "Forbidden", "runtimeclasses is forbidden")
            if name not in cluster.runtime_classes:
                return 404, _status(
                    404, "NotFound", f'runtimeclasses.node.k8s.io "{name}" not found'
                )
            return 200, {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name},
                "handler": name.removeprefix("kata-"),
            }
        if match := _JOBS.match(path):
            if method == "POST":
                assert body is not None
                return cluster.create_job(match.group(1), body)
            if watching:
                self._watch("jobs", match.group(1), query)
                return 0, None
            return 200, self._list("jobs", match.group(1), query)
        if match := _JOB.match(path):
            namespace, name = match.groups()
            if method == "DELETE":
                code = cluster.delete_job(namespace, name, query.get("propagationPolicy"))
                if code == 404:
                    return 404, _status(404, "NotFound", f'jobs.batch "{name}" not found')
                return 200, _status(200, "Success", "deleted") | {"status": "Success"}
            with cluster.cond:
                job = copy.deepcopy(cluster.jobs.get((namespace, name)))
            if job is None:
                return 404, _status(404, "NotFound", f'jobs.batch "{name}" not found')
            return 200, job
        if match := _POD_LOG.match(path):
            namespace, name = match.groups()
            with cluster.cond:
                text = cluster.logs.get((namespace, name))
            if text is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            limit = int(query.get("limitBytes") or len(text.encode()))
            return 200, text.encode()[:limit].decode(errors="replace")
        if match := _PODS.match(path):
            if watching:
                self._watch("pods", match.group(1), query)
                return 0, None
            return 200, self._list("pods", match.group(1), query)
        if match := _POD.match(path):
            namespace, name = match.groups()
            with cluster.cond:
                pod = copy.deepcopy(cluster.pods.get((namespace, name)))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            return 200, pod
        return 404, _status(404, "NotFound", f"no route for {method} {path}")

    def _list(self, kind: str, namespace: str, query: dict[str, str]) -> dict[str, Any]:
        cluster = self.server.cluster
        store = cluster.jobs if kind == "jobs" else cluster.pods
        with cluster.cond:
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(store.items())
                if ns == namespace
                and _selector_matches(
                    query.get("labelSelector"), obj["metadata"].get("labels") or {}
                )
                and _field_matches(query.get("fieldSelector"), obj)
            ]
            version = str(cluster.rv)
        return {
            "kind": "JobList" if kind == "jobs" else "PodList",
            "apiVersion": "batch/v1" if kind == "jobs" else "v1",
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    def _watch(self, kind: str, namespace: str, query: dict[str, str]) -> None:
        timeout = float(query.get("timeoutSeconds") or 30)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "True", "1")
        selector = query.get("labelSelector")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        try:
            self._stream_events(kind, namespace, query, selector, bookmarks, timeout, write)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _stream_events(  # noqa: PLR0917 - private helper of _watch
        self,
        kind: str,
        namespace: str,
        query: dict[str, str],
        selector: str | None,
        bookmarks: bool,
        timeout: float,
        write: Callable[[dict[str, Any]], None],
    ) -> None:
        cluster = self.server.cluster

        def expired() -> None:
            write({"type": "ERROR", "object": _status(410, "Expired", "too old resource version")})

        with cluster.cond:
            requested = query.get("resourceVersion") or ""
            epoch = cluster.expire_epoch
            if requested in ("", "0"):
                position = cluster.rv
                store = cluster.jobs if kind == "jobs" else cluster.pods
                initial = [
                    copy.deepcopy(o) for (ns, _), o in sorted(store.items()) if ns == namespace
                ]
            else:
                position = int(requested)
                initial = []
                if position < cluster.compacted_rv:
                    expired()
                    return
        for obj in initial:
            if _selector_matches(selector, obj["metadata"].get("labels") or {}):
                write({"type": "ADDED", "object": obj})
        deadline = time.monotonic() + timeout
        while True:
            with cluster.cond:
                if not cluster.events_after(position) and not cluster.closing:
                    cluster.cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                pending = None if cluster.expire_epoch != epoch else cluster.events_after(position)
                closing = cluster.closing
                current = cluster.rv
            if pending is None:
                expired()
                return
            for event in pending:
                position = event.rv
                if (
                    event.kind == kind
                    and event.obj["metadata"]["namespace"] == namespace
                    and _selector_matches(selector, event.obj["metadata"].get("labels") or {})
                ):
                    write({"type": event.type, "object": event.obj})
            if closing or time.monotonic() >= deadline:
                if bookmarks:
                    write(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": "Job" if kind == "jobs" else "Pod",
                                "apiVersion": "batch/v1" if kind == "jobs" else "v1",
                                "metadata": {"resourceVersion": str(max(position, current))},
                            },
                        }
                    )
                return

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    cluster: FakeCluster

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (stopped watches, dropped faults) are normal here."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ApiServer:
    """Run a :class:`FakeCluster` on ``127.0.0.1`` on a free port."""

    def __init__(self, cluster: FakeCluster | None = None) -> None:
        self.cluster = cluster or FakeCluster()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.cluster = self.cluster
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ApiServer:  # noqa: PYI034 - not subclassed
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.cluster.cond:
            self.cluster.closing = True
            self.cluster.cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path: Any, namespace: str | None = None) -> Any:
        context: dict[str, Any] = {"cluster": "loopback", "user": "operator"}
        if namespace:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
            "users": [{"name": "operator", "user": {"token": "loopback-test-token"}}],
            "contexts": [{"name": "loopback", "context": context}],
            "current-context": "loopback",
        }
        path.write_text(json.dumps(config))
        return path
