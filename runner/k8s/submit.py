"""Submit replay Jobs idempotently, and collect and verify their envelopes.

A run ID names exactly one replay. The Job name is derived from tenant and run ID, so a
retried create either creates the Job or meets ``409 AlreadyExists``; then the existing
Job's ``spec-digest`` annotation decides: equal means attach to it, different means refuse.
``generateName`` is never used: a retry after a lost response would start a second TEE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from attestation.contracts import (
    FRAME_PREFIX,
    MAX_ENVELOPE_BYTES,
    MAX_POD_LOG_BYTES,
    TerminationMessage,
    framed_payloads,
    sha256_digest,
    unframe_envelope,
)
from attestation.envelope.model import parse_envelope
from attestation.errors import MalformedError
from runner.errors import VerificationFailedError
from runner.k8s import retry
from runner.k8s.errors import (
    EnvelopeMismatchError,
    EnvelopeMissingError,
    PodCannotRunError,
    RunConflictError,
    RunDeletedError,
    RunFailedError,
    RunNotFoundError,
    WaitTimeoutError,
)
from runner.k8s.job import (
    ANNOTATION_CORPUS,
    ANNOTATION_PUBLISH_URL,
    ANNOTATION_RUN_ID,
    ANNOTATION_SPEC_DIGEST,
    ANNOTATION_TENANT,
    CONTAINER_NAME,
    INSTANCE_LABEL,
    TRACKING_SELECTOR,
    ReplaySpec,
    build_job,
)
from runner.k8s.retry import KUBERNETES_RETRY, read_json
from runner.k8s.state import RunOutcome, RunStatus, job_outcome, job_status
from runner.k8s.watch import JobTracker, ProgressCallback
from tenant.http import AnswerTooLargeError, HttpClient, HttpError, Limits, RetryPolicy

log = structlog.get_logger("attested-replay.k8s")

VerifyEnvelope = Callable[[bytes], None]
#: Reading an envelope back from the publication endpoint (GET only; idempotent).
PUBLICATION_RETRY: Final = RetryPolicy(attempts=4)
#: The envelope answer: the one envelope limit, and time to read it over a slow link.
PUBLICATION_ANSWER: Final = Limits(max_bytes=MAX_ENVELOPE_BYTES, deadline=120.0)


@dataclass(frozen=True, slots=True)
class Submission:
    name: str
    namespace: str
    run_id: str
    tenant: str
    spec_digest: str
    attached: bool

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "namespace": self.namespace,
            "runId": self.run_id,
            "tenant": self.tenant,
            "specDigest": self.spec_digest,
            "attached": self.attached,
        }


def read_termination_message(message: str, *, where: str) -> TerminationMessage:
    """The pod's termination message (:class:`~attestation.contracts.TerminationMessage`).

    Raises:
        EnvelopeMissingError: ``<where>: termination message ...`` naming what is wrong.
    """
    try:
        return TerminationMessage.parse(message)
    except MalformedError as exc:
        raise EnvelopeMissingError(f"{where}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class CollectedEnvelope:
    name: str
    run_id: str
    tenant: str
    envelope: bytes
    digest: str
    result_digest: str
    source: Literal["publication", "pod-log"]

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "runId": self.run_id,
            "tenant": self.tenant,
            "envelope": self.digest,
            "result": self.result_digest,
            "source": self.source,
            "verified": True,
        }


class Submitter:
    """Kubernetes operations of the operator CLI, on the official client."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        retry_policy: RetryPolicy | None = None,
        watch_timeout: int = 60,
        http: HttpClient | None = None,
        publish_token: str | None = None,
    ) -> None:
        self._api_client = api_client
        self._batch = client.BatchV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._node = client.NodeV1Api(api_client)
        self._runtime_classes_seen: set[str] = set()
        self.namespace = namespace
        self._retry = retry_policy or KUBERNETES_RETRY
        self._watch_timeout = watch_timeout
        self._http = http or HttpClient(
            token=publish_token, retry=PUBLICATION_RETRY, what="publication URL"
        )

    # -- submit ---------------------------------------------------------------------------

    def submit(self, spec: ReplaySpec) -> Submission:
        """Create the Job, or attach to an identical one; never a second run per run ID."""
        if spec.namespace != self.namespace:
            raise RunConflictError(
                f"spec namespace {spec.namespace!r} differs from the submitter's {self.namespace!r}"
            )
        body = build_job(spec)
        digest = body["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST]
        name = body["metadata"]["name"]
        self._check_runtime_class(body["spec"]["template"]["spec"]["runtimeClassName"])
        try:
            response: Any = retry.call(
                self._retry,
                "create job",
                self._batch.create_namespaced_job,
                self.namespace,
                body,
                _preload_content=False,
            )
            retry.discard(response)
            attached = False
        except ApiException as exc:
            if exc.status != 409:
                raise RunFailedError(
                    f"creating Job {name} was refused: {retry.describe(exc)}", reason="Rejected"
                ) from exc
            existing = self._read_job(name)
            existing_digest = (existing["metadata"].get("annotations") or {}).get(
                ANNOTATION_SPEC_DIGEST
            )
            if existing_digest != digest:
                raise RunConflictError(
                    f"run {spec.run_id!r} of tenant {spec.tenant!r} already exists as Job {name} "
                    f"with a different spec (existing {existing_digest or 'no spec digest'}, "
                    f"submitted {digest}); a run ID names one replay: use a new run ID"
                ) from exc
            attached = True
        log.info("k8s_job_submitted", job=name, run_id=spec.run_id, attached=attached)
        return Submission(name, self.namespace, spec.run_id, spec.tenant, digest, attached)

    def _check_runtime_class(self, runtime_class: str) -> None:
        """Refuse a runtime class the cluster does not have.

        Without it the API server rejects every pod of the Job at admission, so no pod ever
        exists to report a reason and the run would only time out. Checked once per class;
        without permission to read RuntimeClasses the check is skipped with a warning.
        """
        if runtime_class in self._runtime_classes_seen:
            return
        try:
            retry.discard(
                retry.call(
                    self._retry,
                    "read runtime class",
                    self._node.read_runtime_class,
                    runtime_class,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                raise PodCannotRunError(
                    f"runtime class {runtime_class!r} is not installed in the cluster: the API "
                    "server would reject every pod of the Job; install CoCo (see "
                    "docs/operator.md) or pass --runtime-class",
                    reason="RuntimeClassNotFound",
                ) from exc
            if exc.status == 403:
                log.warning("k8s_runtime_class_unchecked", runtime_class=runtime_class)
                return
            raise
        self._runtime_classes_seen.add(runtime_class)

    # -- wait -----------------------------------------------------------------------------

    def wait(
        self,
        names: Iterable[str],
        *,
        timeout: float,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, RunOutcome]:
        """Outcomes of all named Jobs, tracked with one Job watch and one Pod watch."""
        tracker = JobTracker(
            self._api_client,
            self.namespace,
            selector=TRACKING_SELECTOR,
            watch_timeout=self._watch_timeout,
            retry=self._retry,
        )
        return tracker.wait(names, timeout=timeout, on_progress=on_progress)

    # -- collect --------------------------------------------------------------------------

    def collect(
        self,
        name: str,
        *,
        verify_envelope: VerifyEnvelope,
        publish_url: str | None = None,
    ) -> CollectedEnvelope:
        """The verified envelope of a completed Job; every mismatch is an error."""
        job = self._read_job(name)
        annotations = job["metadata"].get("annotations") or {}
        run_id = annotations.get(ANNOTATION_RUN_ID)
        tenant = annotations.get(ANNOTATION_TENANT)
        checksum = annotations.get(ANNOTATION_CORPUS)
        if not (run_id and tenant and checksum):
            raise EnvelopeMissingError(f"Job {name} lacks the attested-replay annotations")
        outcome = job_outcome(job)
        if outcome is None or outcome.state != "succeeded":
            state = "still running" if outcome is None else outcome.explain()
            raise EnvelopeMissingError(f"Job {name} has not completed: {state}")
        pod, report = self._termination_report(name)
        if report.run_id != run_id:
            raise EnvelopeMismatchError(
                f"Job {name}: pod reports run ID {report.run_id!r}, the Job is {run_id!r}"
            )
        if report.corpus_checksum != checksum:
            raise EnvelopeMismatchError(
                f"Job {name}: pod verified corpus {report.corpus_checksum}, expected {checksum}"
            )
        base_url = publish_url or annotations.get(ANNOTATION_PUBLISH_URL)
        if base_url:
            envelope = self._from_publication(base_url, tenant, run_id)
            source: Literal["publication", "pod-log"] = "publication"
        else:
            envelope = self._from_pod_log(pod)
            source = "pod-log"
        digest = sha256_digest(envelope)
        if digest != report.envelope:
            raise EnvelopeMismatchError(
                f"Job {name}: collected envelope is {digest}, the pod reported {report.envelope}"
            )
        _check_envelope_fields(envelope, run_id=run_id, tenant=tenant, report=report, name=name)
        verify_envelope(envelope)
        log.info("k8s_envelope_collected", job=name, envelope=digest, source=source)
        return CollectedEnvelope(name, run_id, tenant, envelope, digest, report.result, source)

    def _termination_report(self, name: str) -> tuple[str, TerminationMessage]:
        pods = read_json(
            retry.call(
                self._retry,
                "list pods",
                self._core.list_namespaced_pod,
                self.namespace,
                label_selector=f"{INSTANCE_LABEL}={name}",
                _preload_content=False,
            )
        )
        for pod in pods.get("items") or []:
            if (pod.get("status") or {}).get("phase") != "Succeeded":
                continue
            for container in (pod.get("status") or {}).get("containerStatuses") or []:
                terminated = (container.get("state") or {}).get("terminated") or {}
                if container.get("name") == CONTAINER_NAME and terminated.get("exitCode") == 0:
                    pod_name = str(pod["metadata"]["name"])
                    message = terminated.get("message")
                    if not message:
                        raise EnvelopeMissingError(
                            f"pod {pod_name} of Job {name} left no termination message"
                        )
                    return pod_name, read_termination_message(message, where=f"pod {pod_name}")
        raise EnvelopeMissingError(
            f"Job {name} has no succeeded pod (it may have been removed by its TTL)"
        )

    def _from_pod_log(self, pod: str) -> bytes:
        text = retry.call(
            self._retry,
            "read pod log",
            self._core.read_namespaced_pod_log,
            pod,
            self.namespace,
            container=CONTAINER_NAME,
            limit_bytes=MAX_POD_LOG_BYTES,
        )
        frames = framed_payloads(str(text))
        if len(frames) != 1:
            raise EnvelopeMissingError(
                f"pod {pod}: expected one {FRAME_PREFIX.strip()} line in the log, found "
                f"{len(frames)} (a CoCo agent policy may block log reads; use --publish-url)"
            )
        try:
            return unframe_envelope(frames.pop())
        except MalformedError as exc:
            raise EnvelopeMissingError(f"pod {pod}: {exc}") from exc

    def _from_publication(self, base_url: str, tenant: str, run_id: str) -> bytes:
        url = f"{base_url.rstrip('/')}/v1/tenants/{tenant}/runs/{run_id}"
        try:
            answer = self._http.get(
                url, headers={"Accept": "application/json"}, limit=PUBLICATION_ANSWER
            )
        except AnswerTooLargeError as exc:
            raise EnvelopeMissingError(
                f"publication endpoint {url}: envelope exceeds {MAX_ENVELOPE_BYTES} bytes"
            ) from exc
        except HttpError as exc:
            raise EnvelopeMissingError(f"publication endpoint {url}: {exc}") from exc
        if answer.status != 200:
            raise EnvelopeMissingError(f"publication endpoint {url} answered HTTP {answer.status}")
        return answer.body

    # -- status, list, cancel -------------------------------------------------------------

    def status(self, name: str) -> RunStatus:
        return job_status(self._read_job(name))

    def list_runs(self) -> list[RunStatus]:
        listing = read_json(
            retry.call(
                self._retry,
                "list jobs",
                self._batch.list_namespaced_job,
                self.namespace,
                label_selector=TRACKING_SELECTOR,
                _preload_content=False,
            )
        )
        return sorted(
            (job_status(job) for job in listing.get("items") or []),
            key=lambda status: (status.tenant, status.run_id),
        )

    def cancel(self, name: str) -> None:
        """Delete the Job and (in the background) its pods; the TEE is torn down."""
        try:
            response: Any = retry.call(
                self._retry,
                "delete job",
                self._batch.delete_namespaced_job,
                name,
                self.namespace,
                propagation_policy="Background",
                _preload_content=False,
            )
            retry.discard(response)
        except ApiException as exc:
            if exc.status == 404:
                raise RunNotFoundError(f"no Job {name} in namespace {self.namespace}") from exc
            raise

    def _read_job(self, name: str) -> dict[str, Any]:
        try:
            return read_json(
                retry.call(
                    self._retry,
                    "read job",
                    self._batch.read_namespaced_job,
                    name,
                    self.namespace,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                raise RunNotFoundError(f"no Job {name} in namespace {self.namespace}") from exc
            raise RunFailedError(
                f"reading Job {name} failed: {retry.describe(exc)}", reason="ApiError"
            ) from exc


def raise_for_outcome(outcome: RunOutcome) -> None:
    """Turn a non-success outcome into its precise ``SubmitError``."""
    if outcome.state == "succeeded":
        return
    message = outcome.explain()
    if outcome.state == "cannot-run":
        raise PodCannotRunError(message, reason=outcome.reason)
    if outcome.state == "failed":
        raise RunFailedError(message, reason=outcome.reason)
    if outcome.state == "deleted":
        raise RunDeletedError(message)
    raise WaitTimeoutError(message)


def _check_envelope_fields(
    envelope: bytes, *, run_id: str, tenant: str, report: TerminationMessage, name: str
) -> None:
    """The envelope must be about this run; full verification is the injected verifier's."""
    try:
        parsed = parse_envelope(envelope)
    except MalformedError as exc:
        raise VerificationFailedError(
            f"Job {name}: envelope does not parse: {exc}", verifier_exit_code=1
        ) from exc
    checks = (
        ("runId", parsed.run_id, run_id),
        ("tenant", parsed.tenant, tenant),
        ("binding.corpusChecksum", parsed.binding.corpus_checksum, report.corpus_checksum),
        ("binding.resultDigest", parsed.binding.result_digest, report.result),
    )
    for field, actual, expected in checks:
        if actual != expected:
            raise EnvelopeMismatchError(
                f"Job {name}: envelope {field} is {actual!r}, expected {expected!r}"
            )
