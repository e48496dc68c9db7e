"""A Kubernetes API server on loopback that answers like kube-apiserver where our code depends on it.

It speaks the real wire protocol to the official ``kubernetes`` client for what the operator
commands use: Jobs (create, get, list, watch, delete with ``propagationPolicy``), Pods (get,
list, watch), pod logs, core/v1 Events (list, watch, field selectors), ConfigMaps (create, get,
update with ``resourceVersion`` preconditions, list) and RuntimeClasses (get). Behaviour copied
from the real server, with the source it was read from:

* Decoding (``tests.k8s.schema``): unknown and duplicate fields are dropped with one ``Warning:
  299 - "unknown field \\"<path>\\""`` header each (``fieldValidation`` empty = ``Warn``), dropped
  silently with ``Ignore``, and refused with **400 BadRequest** "… strict decoding error: …" with
  ``Strict`` (apiserver ``pkg/endpoints/handlers/create.go``, v0.34.0). What remains is checked
  against the schema (422 Invalid), as admission/validation would.
* Creating in a namespace that does not exist: 404 ``namespaces "x" not found``.
* Jobs: the registry's validation of the Job spec, its metadata and its pod template
  (:mod:`tests.k8s.validation`): 422 ``Invalid`` with the real server's field paths and
  messages.
* Names: 409 ``AlreadyExists`` with ``details{name, group, kind}``; an update whose
  ``metadata.resourceVersion`` is stale: 409 ``Conflict`` "the object has been modified"; an
  update of a missing ConfigMap: 404 (ConfigMaps are not created on update).
* Lists carry ``metadata.resourceVersion``; watches replay nothing for a version (only for ""
  and "0"), end after ``timeoutSeconds`` with a BOOKMARK when asked, and answer an ERROR event
  410 ``Expired`` for compacted versions (the watch cache's behaviour).
* Label selectors (equality) and field selectors (``key=value``, ``key==value``, ``key!=value``,
  comma = AND) over the kind's selectable fields: ``metadata.name``/``metadata.namespace`` for
  every kind, and for Events ``involvedObject.*``, ``reason``, ``source``, ``type``,
  ``reportingComponent`` (``pkg/registry/core/event/strategy.go``).
* Pod logs (``pkg/registry/core/pod/strategy.go`` ``LogLocation``): ``container`` must name a
  container (400 "container X is not valid for pod Y"), may be omitted only for a pod with one
  container; a pod without a node gives 400 "pod X does not have a host assigned"; the kubelet
  applies ``tailLines`` first, then ``limitBytes`` (cri-client ``logs.go``).

There is no real controller, scheduler or kubelet: :mod:`tests.k8s.cluster` plays them on this
store, and tests can inject faults (5xx answers, dropped connections, commit-then-fail) per route.
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate

from tests.k8s import schema
from tests.k8s.validation import job_object_problems

KUBERNETES_VERSION = "1.33"
#: Kinds of the store: (plural, apiVersion, Kind, group for Status details).
KINDS: dict[str, tuple[str, str, str]] = {
    "jobs": ("batch/v1", "Job", "batch"),
    "pods": ("v1", "Pod", ""),
    "events": ("v1", "Event", ""),
    "configmaps": ("v1", "ConfigMap", ""),
}
_COLLECTION = re.compile(
    r"^/(?:api/v1|apis/batch/v1)/namespaces/(?P<ns>[a-z0-9-]+)/(?P<kind>jobs|pods|events|configmaps)$"
)
_OBJECT = re.compile(
    r"^/(?:api/v1|apis/batch/v1)/namespaces/(?P<ns>[a-z0-9-]+)/"
    r"(?P<kind>jobs|pods|configmaps)/(?P<name>[a-z0-9.-]+)$"
)
_POD_LOG = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/pods/([a-z0-9.-]+)/log$")
_RUNTIME_CLASS = re.compile(r"^/apis/node.k8s.io/v1/runtimeclasses/([a-z0-9.-]+)$")
_SELECTOR_TERM = re.compile(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$")


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
    kind: str
    type: str
    obj: dict[str, Any]


@dataclass
class Answer:
    code: int
    body: Any
    warnings: tuple[str, ...] = ()


class PodRefusedError(Exception):
    """Admission refused the pod a controller script tried to create."""


def status(code: int, reason: str, message: str, **details: str) -> dict[str, Any]:
    """A ``metav1.Status`` failure body."""
    answer: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        answer["details"] = dict(details)
    return answer


def _qualified(kind: str) -> str:
    group = KINDS[kind][2]
    return f"{kind}.{group}" if group else kind


@dataclass
class Store:
    """The API server's storage: objects, their history of changes, and request counters."""

    #: Validate created Jobs against the schema after decoding (as validation would); the
    #: 200-run test turns it off for speed (it costs ~50 ms per Job).
    validate: bool = True
    #: Namespaces that exist; creating elsewhere answers 404.
    namespaces: set[str] = field(default_factory=lambda: {"default", "attested-replay"})
    #: RuntimeClasses the cluster has (the CoCo chart's); None answers 403 (no permission).
    runtime_classes: set[str] | None = field(
        default_factory=lambda: {"kata-qemu-snp", "kata-qemu-coco-dev", "kata-remote"}
    )
    rv: int = 1
    compacted_rv: int = 0
    expire_epoch: int = 0
    store: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    #: Container logs by (namespace, pod, container).
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    history: list[_Event] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    #: Jobs created, by name (a run must never get two).
    created: Counter[str] = field(default_factory=Counter)
    #: The newest version of each kind written to a watch stream (a test can wait for a client
    #: to have been sent a change before making the next one).
    delivered: Counter[str] = field(default_factory=Counter)
    #: ``(request key, fieldValidation as sent)`` for every create and update.
    field_validation: list[tuple[str, str]] = field(default_factory=list)
    on_job_created: Callable[[Any, dict[str, Any]], None] | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    closing: bool = False
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def jobs(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.store["jobs"]

    @property
    def pods(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.store["pods"]

    @property
    def events(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.store["events"]

    @property
    def configmaps(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.store["configmaps"]

    # -- storage (callers hold no lock) --------------------------------------------------

    def _job_created(
        self, script: Callable[[Any, dict[str, Any]], None], job: dict[str, Any]
    ) -> None:
        """Runs a test's controller script; a pod refused at admission ends it (the refusal is
        on record as the Job's ``FailedCreate``)."""
        with contextlib.suppress(PodRefusedError):
            script(self, job)

    def commit(self, kind: str, event_type: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a change: bump the version, record the event, wake watchers. Returns a copy."""
        with self.cond:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if event_type == "DELETED":
                self.store[kind].pop(key, None)
            else:
                self.store[kind][key] = obj
            self.history.append(_Event(self.rv, kind, event_type, copy.deepcopy(obj)))
            self.cond.notify_all()
            return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            found = self.store[kind].get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def change(
        self, kind: str, namespace: str, name: str, edit: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Apply ``edit`` to a stored object under the lock and commit it as MODIFIED."""
        with self.cond:
            obj = copy.deepcopy(self.store[kind][(namespace, name)])
            edit(obj)
            return self.commit(kind, "MODIFIED", obj)

    def new_uid(self, kind: str) -> str:
        """A UID shaped like the server's (a UUID), unique in this store and easy to read back
        (the kind's first letters lead)."""
        serial = next(self._uids)
        return f"{kind[:8].encode().hex():0<8.8}-0000-4000-8000-{serial:012d}"

    def create(self, kind: str, namespace: str, body: Any, directive: str) -> Answer:
        """POST, in the server's order: decode (400), namespace (404), defaulting, validation
        (422), then storage (409 when the name is taken)."""
        obj, refusal, warnings = self._decode(kind, body, directive)
        if refusal is not None:
            return refusal
        name = str(obj.get("metadata", {}).get("name", ""))
        with self.cond:
            if namespace not in self.namespaces:
                return Answer(404, status(404, "NotFound", f'namespaces "{namespace}" not found'))
        uid = self.new_uid(kind)
        if kind == "jobs":
            default_job(obj, uid)
        kind_name = f"{KINDS[kind][1]}.{KINDS[kind][2]}".rstrip(".")
        if self.validate or kind != "jobs":
            try:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                return Answer(
                    422, status(422, "Invalid", f'{kind_name} "{name}" is invalid: {exc}')
                )
        if kind == "jobs":
            problems = job_validation_problems(obj)
            if problems:
                return Answer(
                    422,
                    status(
                        422, "Invalid", f'{kind_name} "{name}" is invalid: {aggregate(problems)}'
                    ),
                )
        with self.cond:
            if (namespace, name) in self.store[kind]:
                return Answer(
                    409,
                    status(
                        409,
                        "AlreadyExists",
                        f'{_qualified(kind)} "{name}" already exists',
                        name=name,
                        group=KINDS[kind][2],
                        kind=kind,
                    ),
                )
            obj["metadata"].update(
                namespace=namespace, uid=uid, creationTimestamp=now_rfc3339(), generation=1
            )
            if kind == "jobs":
                obj["status"] = {}
                self.created[name] += 1
            stored = self.commit(kind, "ADDED", obj)
        if kind == "jobs" and self.on_job_created is not None:
            threading.Thread(
                target=self._job_created, args=(self.on_job_created, stored), daemon=True
            ).start()
        return Answer(201, stored, warnings)

    def update(self, kind: str, namespace: str, name: str, body: Any, directive: str) -> Answer:
        """PUT: a stale ``metadata.resourceVersion`` is a 409 Conflict; a missing object 404."""
        decoded, refusal, warnings = self._decode(kind, body, directive)
        if refusal is not None:
            return refusal
        with self.cond:
            current = self.store[kind].get((namespace, name))
            if current is None:
                return Answer(
                    404, status(404, "NotFound", f'{_qualified(kind)} "{name}" not found')
                )
            wanted = decoded.get("metadata", {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                return Answer(
                    409,
                    status(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {_qualified(kind)} "{name}": the '
                        "object has been modified; please apply your changes to the latest "
                        "version and try again",
                        name=name,
                        kind=kind,
                    ),
                )
            meta = decoded.setdefault("metadata", {})
            for key in ("uid", "creationTimestamp", "namespace", "name"):
                meta[key] = current["metadata"][key]
            stored = self.commit(kind, "MODIFIED", decoded)
        return Answer(200, stored, warnings)

    def _decode(
        self, kind: str, body: Any, directive: str
    ) -> tuple[dict[str, Any], Answer | None, tuple[str, ...]]:
        api_version, kind_name, _ = KINDS[kind]
        if directive not in ("", "Ignore", "Warn", "Strict"):
            return (
                {},
                Answer(400, status(400, "BadRequest", f"invalid fieldValidation {directive!r}")),
                (),
            )
        decoded = schema.decode(body, api_version, kind_name)
        if not decoded.problems or directive == "Ignore":
            return decoded.obj, None, ()
        if directive == "Strict":
            message = (
                f'{kind_name} in version "{api_version.rsplit("/", 1)[-1]}" cannot be handled as '
                f"a {kind_name}: strict decoding error: {', '.join(decoded.problems)}"
            )
            return {}, Answer(400, status(400, "BadRequest", message)), ()
        return decoded.obj, None, decoded.problems

    def delete_job(self, namespace: str, name: str, propagation: str | None) -> int:
        """DELETE a Job; with Background/Foreground propagation its pods go too (GC)."""
        with self.cond:
            job = self.store["jobs"].get((namespace, name))
            if job is None:
                return 404
            self.commit("jobs", "DELETED", copy.deepcopy(job))
            if propagation in ("Background", "Foreground"):
                for (pod_ns, _), pod in list(self.store["pods"].items()):
                    owner = (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)
                    if pod_ns == namespace and owner == name:
                        self.commit("pods", "DELETED", copy.deepcopy(pod))
            return 200

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
        """History newer than ``version`` (history is ordered by version)."""
        return self.history[bisect.bisect_right(self.history, version, key=lambda e: e.rv) :]

    def watchers(self) -> int:
        return sum(count for key, count in self.requests.items() if key.startswith("WATCH "))


JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def default_job(job: dict[str, Any], uid: str) -> None:
    """What the server adds to a created Job: the generated selector and the template labels
    it selects on (``pkg/registry/batch/job/strategy.go`` ``generateSelector``, with the legacy
    ``controller-uid``/``job-name`` labels), and the field defaults of
    ``pkg/apis/batch/v1/defaults.go``."""
    name = job["metadata"]["name"]
    spec = job.setdefault("spec", {})
    template_labels = (
        spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    )
    template_labels.update(
        {CONTROLLER_UID_LABEL: uid, JOB_NAME_LABEL: name, "controller-uid": uid, "job-name": name}
    )
    spec.setdefault("selector", {"matchLabels": {CONTROLLER_UID_LABEL: uid}})
    if "completions" not in spec and "parallelism" not in spec:
        spec.update(completions=1, parallelism=1)
    spec.setdefault("parallelism", 1)
    # MaxInt32 with a per-index backoff limit, else 6
    spec.setdefault("backoffLimit", 2**31 - 1 if "backoffLimitPerIndex" in spec else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault(
        "podReplacementPolicy",
        "Failed" if spec.get("podFailurePolicy") is not None else "TerminatingOrFailed",
    )


#: ``pkg/apis/batch/validation/validation.go`` (1.33): limits of Indexed Jobs.
MAX_PARALLELISM_FOR_INDEXED_JOB = 100_000
MAX_FAILED_INDEXES_FOR_INDEXED_JOB = 100_000
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def aggregate(problems: list[str]) -> str:
    """apimachinery ``field.ErrorList.ToAggregate().Error()``: one error as it is, several
    as ``[a, b]``."""
    return problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"


def job_validation_problems(job: dict[str, Any]) -> list[str]:
    """The server-side Job validation our Jobs depend on, beyond the OpenAPI schema
    (``ValidateJob`` / ``validateJobSpec`` / ``validatePodFailurePolicyRule``, 1.33): field
    paths and messages as the real server writes them."""
    problems = job_object_problems(job)
    spec = job["spec"]
    name = job["metadata"]["name"]
    indexed = spec.get("completionMode") == "Indexed"
    completions = spec.get("completions")
    if indexed and completions is not None and completions > 0:
        # The controller appends "-<index>" to the pod hostname (a DNS label).
        hostname = f"{name}-{completions - 1}"
        if len(hostname) > 63 or not _DNS_LABEL.fullmatch(hostname):
            problems.append(
                f"metadata.name: Invalid value: {name!r}: will not able to create pod with "
                f"invalid DNS label: {hostname}"
            )
    if indexed and completions is None:
        problems.append("spec.completions: Required value: when completion mode is Indexed")
    if indexed and spec.get("parallelism", 0) > MAX_PARALLELISM_FOR_INDEXED_JOB:
        problems.append(
            f"spec.parallelism: Invalid value: {spec['parallelism']}: must be less than or "
            f"equal to {MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is Indexed"
        )
    failed_max = spec.get("maxFailedIndexes")
    if failed_max is not None:
        if spec.get("backoffLimitPerIndex") is None:
            problems.append(
                "spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"
            )
        if indexed and completions is not None and failed_max > completions:
            problems.append(
                f"spec.maxFailedIndexes: Invalid value: {failed_max}: must be less than or "
                "equal to completions"
            )
    if not indexed:
        problems.extend(
            f"spec.{key}: Invalid value: {spec[key]}: requires indexed completion mode"
            for key in ("backoffLimitPerIndex", "maxFailedIndexes")
            if spec.get(key) is not None
        )
    policy = spec.get("podFailurePolicy")
    for index, rule in enumerate((policy or {}).get("rules") or []):
        if rule.get("action") == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            problems.append(
                f'spec.podFailurePolicy.rules[{index}].action: Invalid value: "FailIndex": '
                "requires the backoffLimitPerIndex to be set"
            )
    if policy is not None and spec.get("podReplacementPolicy") not in (None, "Failed"):
        problems.append(
            f'spec.podReplacementPolicy: Unsupported value: "{spec["podReplacementPolicy"]}": '
            'supported values: "Failed"'
        )
    return problems


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# -- selectors ---------------------------------------------------------------------------


def _terms(selector: str | None) -> list[tuple[str, str, str]]:
    terms = []
    for raw in (selector or "").split(","):
        if not raw.strip():
            continue
        match = _SELECTOR_TERM.match(raw.strip())
        if match is None:
            raise ValueError(f"unable to parse requirement: {raw!r}")
        terms.append((match.group(1).strip(), match.group(2), match.group(3).strip()))
    return terms


def _matches(terms: Iterable[tuple[str, str, str]], values: dict[str, str]) -> bool:
    for key, op, value in terms:
        equal = values.get(key, "") == value
        if equal != (op in ("=", "==")):
            return False
    return True


def selectable_fields(kind: str, obj: dict[str, Any]) -> dict[str, str]:
    """The fields a field selector may use, per kind (unknown fields are a 400)."""
    meta = obj.get("metadata", {})
    fields = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
    }
    if kind == "events":
        involved = obj.get("involvedObject") or {}
        for key in (
            "kind",
            "namespace",
            "name",
            "uid",
            "apiVersion",
            "resourceVersion",
            "fieldPath",
        ):
            fields[f"involvedObject.{key}"] = str(involved.get(key, ""))
        source = (obj.get("source") or {}).get("component") or obj.get("reportingComponent", "")
        fields.update(
            reason=obj.get("reason", ""),
            source=source,
            type=obj.get("type", ""),
            reportingComponent=obj.get("reportingComponent", ""),
        )
    if kind == "pods":
        fields["spec.nodeName"] = (obj.get("spec") or {}).get("nodeName", "")
        fields["status.phase"] = (obj.get("status") or {}).get("phase", "")
    return fields


def _field_terms(kind: str, selector: str | None) -> list[tuple[str, str, str]]:
    terms = _terms(selector)
    allowed = set(selectable_fields(kind, {"metadata": {}}))
    for key, _, _ in terms:
        if key not in allowed:
            raise ValueError(
                f'"{key}" is not a known field selector: only "{", ".join(sorted(allowed))}"'
            )
    return terms


class _Query:
    """One request's selectors, parsed once."""

    def __init__(self, kind: str, query: dict[str, str]) -> None:
        self.kind = kind
        self.labels = _terms(query.get("labelSelector"))
        self.fields = _field_terms(kind, query.get("fieldSelector"))

    def matches(self, obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return _matches(self.labels, labels) and _matches(
            self.fields, selectable_fields(self.kind, obj)
        )


# -- HTTP -------------------------------------------------------------------------------


def _request_key(method: str, path: str, *, watching: bool) -> str:
    """``WATCH jobs``, ``LIST events``, ``GET job``, ``POST configmaps``, ``PUT configmap``, ``GET log``."""
    if _POD_LOG.match(path):
        return f"{method} log"
    if _RUNTIME_CLASS.match(path):
        return f"{method} runtimeclass"
    if match := _COLLECTION.match(path):
        kind = match.group("kind")
        if method == "GET":
            return f"{'WATCH' if watching else 'LIST'} {kind}"
        return f"{method} {kind}"
    if match := _OBJECT.match(path):
        return f"{method} {match.group('kind')[:-1]}"
    return f"{method} {path}"


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

    def _send(self, answer: Answer) -> None:
        if isinstance(answer.body, str):
            data, content_type = answer.body.encode(), "text/plain"
        else:
            data, content_type = json.dumps(answer.body).encode(), "application/json"
        self.send_response(answer.code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for text in answer.warnings:
            # apimachinery net.NewWarningHeader(299, "-", text): code, agent, quoted text.
            self.send_header("Warning", f"299 - {json.dumps(text)}")
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
        body: Any = None
        if method in ("POST", "PUT"):
            length = int(self.headers.get("Content-Length") or 0)
            # The v37 client sends no Content-Type on POST; the real server defaults to JSON.
            try:
                body = schema.loads(self.rfile.read(length))
            except ValueError as exc:
                self._send(Answer(400, status(400, "BadRequest", f"invalid JSON: {exc}")))
                return
        fault = self._fault(method, url.path)
        if fault is not None and fault.action == "drop":
            self._drop()
            return
        if fault is not None and isinstance(fault.action, int):
            self._send(
                Answer(fault.action, status(fault.action, "InternalError", "injected fault"))
            )
            return
        watching = query.get("watch") in ("true", "True", "1")
        key = _request_key(method, url.path, watching=watching)
        with cluster.cond:
            cluster.requests[key] += 1
            cluster.requests["total"] += 1
            if method in ("POST", "PUT"):
                cluster.field_validation.append((key, query.get("fieldValidation", "")))
            cluster.cond.notify_all()
        try:
            answer = self._route(method, url.path, query, body, watching)
        except ValueError as exc:
            answer = Answer(400, status(400, "BadRequest", str(exc)))
        if answer is None:
            return  # streamed
        if fault is not None and fault.action == "commit-then-500":
            self._send(Answer(500, status(500, "InternalError", "injected fault after commit")))
            return
        self._send(answer)

    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any, watching: bool
    ) -> Answer | None:
        cluster = self.server.cluster
        directive = query.get("fieldValidation", "")
        if match := _RUNTIME_CLASS.match(path):
            return self._runtime_class(match.group(1))
        if match := _POD_LOG.match(path):
            return self._log(match.group(1), match.group(2), query)
        if match := _COLLECTION.match(path):
            namespace, kind = match.group("ns"), match.group("kind")
            if method == "POST" and kind in ("jobs", "configmaps"):
                return cluster.create(kind, namespace, body, directive)
            if method != "GET":
                return Answer(405, status(405, "MethodNotAllowed", f"{method} not allowed"))
            selection = _Query(kind, query)
            if watching:
                self._watch(kind, namespace, query, selection)
                return None
            return Answer(200, self._list(kind, namespace, selection))
        if match := _OBJECT.match(path):
            namespace, kind, name = match.group("ns"), match.group("kind"), match.group("name")
            if method == "DELETE" and kind == "jobs":
                code = cluster.delete_job(namespace, name, query.get("propagationPolicy"))
                if code == 404:
                    return Answer(404, status(404, "NotFound", f'jobs.batch "{name}" not found'))
                return Answer(200, status(200, "Success", "deleted") | {"status": "Success"})
            if method == "PUT" and kind == "configmaps":
                return cluster.update(kind, namespace, name, body, directive)
            if method != "GET":
                return Answer(405, status(405, "MethodNotAllowed", f"{method} not allowed"))
            obj = cluster.get(kind, namespace, name)
            if obj is None:
                return Answer(
                    404, status(404, "NotFound", f'{_qualified(kind)} "{name}" not found')
                )
            return Answer(200, obj)
        return Answer(404, status(404, "NotFound", f"no route for {method} {path}"))

    def _runtime_class(self, name: str) -> Answer:
        classes = self.server.cluster.runtime_classes
        if classes is None:
            return Answer(403, status(403, "Forbidden", "runtimeclasses is forbidden"))
        if name not in classes:
            return Answer(
                404, status(404, "NotFound", f'runtimeclasses.node.k8s.io "{name}" not found')
            )
        return Answer(
            200,
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name},
                # kata-deploy helm-chart templates/runtimeclasses.yaml: the handler is the name
                "handler": name,
            },
        )

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> Answer:
        cluster = self.server.cluster
        pod = cluster.get("pods", namespace, name)
        if pod is None:
            return Answer(404, status(404, "NotFound", f'pods "{name}" not found'))
        containers = [c["name"] for c in pod["spec"]["containers"]]
        container = query.get("container", "")
        if not container:
            if len(containers) != 1:
                return Answer(
                    400,
                    status(
                        400,
                        "BadRequest",
                        f"a container name must be specified for pod {name}, choose one of: "
                        f"[{' '.join(containers)}]",
                    ),
                )
            container = containers[0]
        elif container not in containers:
            return Answer(
                400, status(400, "BadRequest", f"container {container} is not valid for pod {name}")
            )
        if not pod["spec"].get("nodeName"):
            return Answer(
                400, status(400, "BadRequest", f"pod {name} does not have a host assigned")
            )
        with cluster.cond:
            text = cluster.logs.get((namespace, name, container), "")
        data = text.encode()
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[len(lines) - min(len(lines), int(query["tailLines"])) :])
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"])]
        return Answer(200, data.decode(errors="replace"))

    def _list(self, kind: str, namespace: str, selection: _Query) -> dict[str, Any]:
        cluster = self.server.cluster
        api_version, kind_name, _ = KINDS[kind]
        with cluster.cond:
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(cluster.store[kind].items())
                if ns == namespace and selection.matches(obj)
            ]
            version = str(cluster.rv)
        return {
            "kind": f"{kind_name}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    def _watch(self, kind: str, namespace: str, query: dict[str, str], selection: _Query) -> None:
        timeout = float(query.get("timeoutSeconds") or 30)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "True", "1")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        try:
            self._stream_events(kind, namespace, query, selection, bookmarks, timeout, write)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _stream_events(  # noqa: PLR0917 - private helper of _watch
        self,
        kind: str,
        namespace: str,
        query: dict[str, str],
        selection: _Query,
        bookmarks: bool,
        timeout: float,
        write: Callable[[dict[str, Any]], None],
    ) -> None:
        cluster = self.server.cluster
        api_version, kind_name, _ = KINDS[kind]

        def expired() -> None:
            write({"type": "ERROR", "object": status(410, "Expired", "too old resource version")})

        with cluster.cond:
            requested = query.get("resourceVersion") or ""
            epoch = cluster.expire_epoch
            if requested in ("", "0"):
                position = cluster.rv
                initial = [
                    copy.deepcopy(o)
                    for (ns, _), o in sorted(cluster.store[kind].items())
                    if ns == namespace
                ]
            else:
                position = int(requested)
                initial = []
                if position < cluster.compacted_rv:
                    expired()
                    return
        for obj in initial:
            if selection.matches(obj):
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
                    and selection.matches(event.obj)
                ):
                    write({"type": event.type, "object": event.obj})
                    with cluster.cond:
                        cluster.delivered[kind] = max(cluster.delivered[kind], event.rv)
                        cluster.cond.notify_all()
            if closing or time.monotonic() >= deadline:
                if bookmarks:
                    write(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": kind_name,
                                "apiVersion": api_version,
                                "metadata": {"resourceVersion": str(max(position, current))},
                            },
                        }
                    )
                return

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    cluster: Store

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (stopped watches, dropped faults) are normal here."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ApiServer:
    """Run a :class:`Store` (usually a ``tests.k8s.cluster.FakeCluster``) on ``127.0.0.1`` on a free port."""

    def __init__(self, cluster: Store) -> None:
        self.cluster = cluster
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
