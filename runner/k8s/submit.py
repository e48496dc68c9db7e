"""Submit replay Jobs idempotently; wait for, collect, inspect and cancel them.

A run ID names exactly one replay. The Job name is derived from tenant and run ID, so a
retried create either creates the Job or meets ``409 AlreadyExists``; then the existing
Job's ``spec-digest`` annotation decides: equal means attach to it, different means refuse.
``generateName`` is never used: a retry after a lost response would start a second TEE.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from attestation.tenant.http import HttpClient, RetryPolicy
from runner.errors import SubmitError
from runner.k8s import retry
from runner.k8s.collect import (
    PUBLICATION_RETRY,
    CollectedEnvelope,
    EnvelopeCollector,
    VerifyEnvelope,
)
from runner.k8s.errors import (
    ApiUnavailableError,
    PodCannotRunError,
    PublicationCheckError,
    RunConflictError,
    RunFailedError,
    RunGoneError,
    RunNotFoundError,
)
from runner.k8s.gone import GoneRun
from runner.k8s.indexes import IndexListError, index_progress
from runner.k8s.job import (
    ANNOTATION_SPEC_DIGEST,
    TRACKING_SELECTOR,
    ReplaySpec,
    build_job,
)
from runner.k8s.pods import list_run_pods
from runner.k8s.progress import RunProgress, WaitPolicy
from runner.k8s.published import check_unpublished
from runner.k8s.retry import KUBERNETES_RETRY, read_json
from runner.k8s.run_id_records import (
    DEFAULT_RECORDS_NAMESPACE,
    RunIdRecord,
    RunIdRecords,
    RunIdRecordState,
    operator_name,
)
from runner.k8s.state import Phase, RunOutcome, RunStatus, job_status, raise_for_outcome
from runner.k8s.watch import JobTracker, ProgressCallback

log = structlog.get_logger("attested-replay.k8s")

__all__ = ["CollectedEnvelope", "Submission", "Submitter", "raise_for_outcome"]


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


class Submitter:
    """Kubernetes operations of the operator CLI, on the official client."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        records_namespace: str = DEFAULT_RECORDS_NAMESPACE,
        retry_policy: RetryPolicy | None = None,
        watch_timeout: int = 60,
        http: HttpClient | None = None,
        publish_token: str | None = None,
        ca_bundle: Path | None = None,
    ) -> None:
        self._api_client = api_client
        self._batch = client.BatchV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._node = client.NodeV1Api(api_client)
        self._runtime_classes_seen: set[str] = set()
        self.namespace = namespace
        self._retry = retry_policy or KUBERNETES_RETRY
        self._watch_timeout = watch_timeout
        self._records = RunIdRecords(self._core, records_namespace, retry_policy=self._retry)
        self._publication_token = publish_token is not None or http is not None
        self._http = http or HttpClient(
            token=publish_token,
            retry=PUBLICATION_RETRY,
            what="publication URL",
            # --ca-bundle: the only way to trust another CA (no REQUESTS_CA_BUNDLE & co.)
            ca_bundle=ca_bundle,
        )
        self._collector = EnvelopeCollector(
            self._core, namespace, retry_policy=self._retry, http=self._http
        )

    # -- submit ---------------------------------------------------------------------------

    def submit(self, spec: ReplaySpec, *, rerun: str | None = None) -> Submission:
        """Create the Job, or attach to an identical one; never a second run per run ID.

        The run is claimed in its durable record first (:mod:`runner.k8s.run_id_records`), so a run
        ID whose Job has expired, was cancelled or stopped, or lives in another namespace is
        refused unless ``rerun`` gives the reason to run it again (recorded).
        """
        if spec.namespace != self.namespace:
            raise RunConflictError(
                f"spec namespace {spec.namespace!r} differs from the submitter's {self.namespace!r}"
            )
        body = build_job(spec)
        digest = body["metadata"]["annotations"][ANNOTATION_SPEC_DIGEST]
        name = body["metadata"]["name"]
        self._check_runtime_class(body["spec"]["template"]["spec"]["runtimeClassName"])
        if spec.publish_url:
            self._check_unpublished(spec, name, digest)
        self._claim(spec, name, digest, rerun)
        try:
            response: Any = retry.call(
                self._retry,
                "create job",
                self._batch.create_namespaced_job,
                self.namespace,
                body,
                # Strict: an unknown or duplicate field is refused (400) instead of dropped
                # with a warning, the server's default (apiserver handlers/create.go): the Job
                # that runs must be exactly the one whose spec digest was computed.
                field_validation="Strict",
                _preload_content=False,
            )
            retry.log_warnings(response, "create job")
            retry.discard(response)
            attached = False
        except ApiException as exc:
            if exc.status != 409:
                detail = f"creating Job {name} was refused: {retry.describe(exc)}"
                if exc.status is not None and 400 <= exc.status < 500:
                    # A definitive refusal: no Job, so no TEE, exists for this claim.
                    self._records.note(name, "refused", detail)
                raise RunFailedError(detail, reason="Rejected") from exc
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

    def _claim(self, spec: ReplaySpec, name: str, digest: str, rerun: str | None) -> None:
        """Claim the run ID in its durable record, or refuse it (see
        :mod:`runner.k8s.run_id_records`)."""
        first = self._records.event("rerun" if rerun else "submitted", digest, rerun or "")
        claim = RunIdRecord(
            run_id=spec.run_id,
            tenant=spec.tenant,
            job_name=name,
            job_namespace=self.namespace,
            spec_digest=digest,
            corpus_checksum=spec.checksum,
            publish_url=spec.publish_url,
            submission=secrets.token_hex(8),
            state="submitted",
            history=(first,),
        )
        if self._records.create(claim) is not None:
            return
        stored = self._records.read(name)
        if stored is None:  # removed by hand meanwhile: claim it afresh
            if self._records.create(claim) is None:
                raise RunConflictError(f"run record {name} changed while claiming it: try again")
            return
        record = stored.record
        if record.submission == claim.submission:
            return  # this very claim, whose answer was lost (a retry met 409)
        if record.job_namespace == self.namespace and self._job_exists(name):
            return  # the Job decides: attach on the same spec, refuse another (409 below)
        if record.state == "refused" and rerun is None:
            pass  # its Job was never created: claiming it again starts the first TEE
        elif rerun is None:
            where = (
                ""
                if record.job_namespace == self.namespace
                else f" in namespace {record.job_namespace}"
            )
            raise RunConflictError(
                f"run {spec.run_id!r} of tenant {spec.tenant!r} was submitted before{where} "
                f"(record {self._records.namespace}/{name}: {record.state}, first on "
                f"{record.history[0].at if record.history else 'an unknown date'}, spec "
                f"{record.spec_digest}) and no Job of it exists here now (expired after its "
                "TTL, cancelled, stopped, or in another namespace): a run ID names one replay. "
                "Use a new run ID, or pass --rerun REASON to run it again (recorded)"
            )
        self._records.replace(
            stored,
            record.then(
                first,
                submission=claim.submission,
                state="submitted",
                job_namespace=self.namespace,
                spec_digest=digest,
                corpus_checksum=spec.checksum,
                publish_url=spec.publish_url,
            ),
        )
        if rerun:
            log.warning("k8s_run_rerun", job=name, run_id=spec.run_id, reason=rerun)

    def _check_unpublished(self, spec: ReplaySpec, name: str, digest: str) -> None:
        """Refuse a run ID the publication service it publishes to has an envelope of
        (:mod:`runner.k8s.published`); an identical Job that exists here is attached to below
        without asking (an idempotent retry of this very submission)."""
        assert spec.publish_url is not None
        try:
            existing = self._read_job(name)
        except RunNotFoundError:
            existing = None
        if existing is not None:
            annotations = existing["metadata"].get("annotations") or {}
            if annotations.get(ANNOTATION_SPEC_DIGEST) == digest:
                return
        if not self._publication_token:
            raise PublicationCheckError(
                f"run {spec.run_id!r} publishes to {spec.publish_url}: submit must first ask that "
                "service whether the run ID was published, and has no token to ask with"
            )
        check_unpublished(self._http, spec.publish_url, spec.tenant, spec.run_id)
        log.info("k8s_run_unpublished", job=name, run_id=spec.run_id, url=spec.publish_url)

    def _job_exists(self, name: str) -> bool:
        try:
            self._read_job(name)
        except RunNotFoundError:
            return False
        return True

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
        policy: WaitPolicy | None = None,
    ) -> dict[str, RunOutcome]:
        """Outcomes of all named Jobs, tracked with three watches (Jobs, Pods, Events); a run
        whose stall outlives its grace (``policy``) is stopped (:meth:`stop`)."""
        tracker = JobTracker(
            self._api_client,
            self.namespace,
            selector=TRACKING_SELECTOR,
            watch_timeout=self._watch_timeout,
            retry=self._retry,
            policy=policy,
        )
        return tracker.wait(names, timeout=timeout, on_progress=on_progress, stop=self.stop)

    def stop(self, outcome: RunOutcome) -> RunOutcome:
        """Delete the Job of a run that cannot go on, so the kubelet boots no further VM and the
        scheduler stops placing it; the outcome then says it was stopped."""
        try:
            self.cancel(outcome.name)
        except RunNotFoundError:
            pass  # already gone
        except (ApiException, ApiUnavailableError) as exc:
            log.warning("k8s_stop_failed", job=outcome.name, error=str(exc))
            return outcome
        log.warning("k8s_job_stopped", job=outcome.name, reason=outcome.reason)
        self._note(outcome.name, "stopped", f"{outcome.reason}: {outcome.message}")
        return dataclasses.replace(outcome, stopped=True)

    def _note(self, name: str, state: RunIdRecordState, detail: str) -> None:
        try:
            self._records.note(name, state, detail)
        except SubmitError as exc:  # the Job is gone either way; say the record lags
            log.warning("k8s_record_not_updated", job=name, state=state, error=str(exc))

    # -- collect --------------------------------------------------------------------------

    def collect(
        self,
        name: str,
        *,
        verify_envelope: VerifyEnvelope,
        publish_url: str | None = None,
    ) -> CollectedEnvelope:
        """The verified envelope of a completed Job (:mod:`runner.k8s.collect`); a Job that is
        gone is an error saying what its record knows and where the envelope is."""
        try:
            job = self._read_job(name)
        except RunNotFoundError as exc:
            raise RunGoneError(self._gone(name, exc).uncollectable(publish_url)) from exc
        return self._collector.collect(
            job, verify_envelope=verify_envelope, publish_url=publish_url
        )

    # -- status, list, cancel -------------------------------------------------------------

    def status(self, name: str) -> RunStatus | GoneRun:
        """The run's phase, and while it has not ended, what its pods are waiting on: one Job
        read, one pod list and one event list per pending pod; for a sharded run every
        index's progress instead. Without a Job, what the run's record says
        (:mod:`runner.k8s.gone`)."""
        try:
            job = self._read_job(name)
        except RunNotFoundError as exc:
            return self._gone(name, exc)
        summary = job_status(job)
        pods = list_run_pods(self._core, self._retry, self.namespace, name)
        if (job.get("spec") or {}).get("completionMode") == "Indexed":
            try:
                shards = index_progress(job, pods)
            except IndexListError as exc:
                raise RunFailedError(f"Job {name}: {exc}", reason="ApiError") from exc
            return dataclasses.replace(summary, shards=tuple(shards))
        pods.sort(key=lambda pod: str(pod["metadata"].get("creationTimestamp", "")))
        progress = RunProgress(name)
        progress.on_job(job)
        final = None
        for pod in pods:
            final = progress.on_pod(pod, 0.0) or final
            if (pod.get("status") or {}).get("phase") in (None, "Pending"):
                for event in self._pod_events(str(pod["metadata"]["name"])):
                    final = progress.on_event(str(pod["metadata"]["name"]), event, 0.0) or final
        failures = progress.attempts()
        if summary.phase in ("succeeded", "failed"):
            return dataclasses.replace(summary, pod_failures=failures)
        report = progress.current()
        reason, message = (
            (final.reason, final.message) if final else (report.reason, report.message)
        )
        phase: Phase = "running" if report.phase == "running" else "pending"
        return dataclasses.replace(
            summary,
            phase=phase,
            reason=reason,
            message=message,
            sandbox_attempts=report.attempts,
            pod_failures=failures,
        )

    def _gone(self, name: str, missing: RunNotFoundError) -> GoneRun:
        """What the run record knows of a run without a Job here; without a record either, the
        run was never submitted: not found, naming both places looked in."""
        try:
            stored = self._records.read(name)
        except SubmitError as exc:
            raise RunNotFoundError(f"{missing}; its run record cannot be read: {exc}") from exc
        if stored is None:
            raise RunNotFoundError(
                f"{missing}, and no run record {self._records.namespace}/{name}: the run was "
                "never submitted (or its record is in another --records-namespace)"
            ) from missing
        return GoneRun(name, self.namespace, self._records.namespace, stored.record)

    def _pod_events(self, pod: str) -> list[dict[str, Any]]:
        listing = read_json(
            retry.call(
                self._retry,
                "list events",
                self._core.list_namespaced_event,
                self.namespace,
                field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod},type=Warning",
                _preload_content=False,
            )
        )
        return list(listing.get("items") or [])

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
        self._note(name, "cancelled", f"by {operator_name()}")

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
            if exc.status == 403:
                raise retry.refusal(exc) from exc
            raise RunFailedError(
                f"reading Job {name} failed: {retry.describe(exc)}", reason="ApiError"
            ) from exc
