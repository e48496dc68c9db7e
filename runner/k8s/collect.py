"""Collect a completed run's envelope and check it against the Job, without trusting the channel.

Where the envelope comes from: the publication service (``GET {url}/v1/tenants/{tenant}/runs/
{runId}``) when one is configured, else the one framed ``ATTESTED-ENVELOPE <base64>`` line in the
log of container ``replay`` of the Job's succeeded pod. A sharded run (an Indexed Job) has one
envelope per index, each from ``.../runs/{runId}/shards/{index}`` or from that index's succeeded
pod, merged here into one merged envelope. Either way it is only the bytes; what makes them
trustworthy is the checks below and, last, the tenant's own verifier.

The pod's termination message is **not** required. Under Confidential Containers the guest
shares no filesystem with the host (``shared_fs = none`` for the CoCo runtime classes since
kata 3.6), so the kubelet never sees the file the replay writes; kata 3.29 added the agent call
``GetDiagnosticData`` that copies it out at container stop, best effort and only if the agent
policy allows it (kata ``container.go`` ``stop()``, commit 64c139208f). When a message is there
it must agree with the envelope (run ID, corpus checksum, envelope and result digests); when it
is absent nothing is lost, and the summary says which happened.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import structlog
from kubernetes import client

from attestation.contracts import MAX_ENVELOPE_BYTES, MAX_SHARD_COUNT, sha256_digest
from attestation.envelope.merged import MergedBudget, merged_envelope_bytes
from attestation.envelope.model import Envelope, parse_envelope
from attestation.errors import AttestationError, MalformedError
from attestation.exit_codes import EXIT_CODES
from attestation.tenant.http import AnswerTooLargeError, HttpClient, HttpError, Limits, RetryPolicy
from runner.errors import VerificationFailedError
from runner.k8s import retry
from runner.k8s.errors import EnvelopeMismatchError, EnvelopeMissingError
from runner.k8s.gone import publication_run_url
from runner.k8s.indexes import pod_index
from runner.k8s.job import (
    ANNOTATION_CORPUS,
    ANNOTATION_PUBLISH_URL,
    ANNOTATION_RUN_ID,
    ANNOTATION_TENANT,
    CONTAINER_NAME,
)
from runner.k8s.pods import list_run_pods
from runner.k8s.state import job_outcome
from runner.pod_output import (
    FRAME_PREFIX,
    MAX_POD_LOG_BYTES,
    POD_LOG_TAIL_LINES,
    TAILS_FRAME_PREFIX,
    TerminationMessage,
    framed_payloads,
    unframe_envelope,
)
from runner.shard_tails import merge_with_tails

log = structlog.get_logger("attested-replay.k8s")

VerifyEnvelope = Callable[[bytes], None]
Source = Literal["publication", "pod-log"]
#: Reading an envelope back from the publication endpoint (GET only; idempotent).
PUBLICATION_RETRY: Final = RetryPolicy(attempts=4)
#: The envelope answer: the one envelope limit, and time to read it over a slow link.
PUBLICATION_ANSWER: Final = Limits(max_bytes=MAX_ENVELOPE_BYTES, deadline=120.0)


@dataclass(frozen=True, slots=True)
class CollectedEnvelope:
    name: str
    run_id: str
    tenant: str
    envelope: bytes
    digest: str
    result_digest: str
    source: Source
    #: The pod's termination message was there and agreed (kata >= 3.29 with the agent
    #: policy allowing GetDiagnosticData); False: there was none (for a sharded run: not for
    #: every shard).
    corroborated: bool
    #: A sharded run: the number of shards merged into ``envelope`` (a merged envelope).
    shards: int | None = None

    def to_json_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "job": self.name,
            "runId": self.run_id,
            "tenant": self.tenant,
            "envelope": self.digest,
            "result": self.result_digest,
            "source": self.source,
            "terminationMessage": "matched" if self.corroborated else "absent",
            "verified": True,
        }
        if self.shards is not None:
            document["shards"] = self.shards
        return document


@dataclass(frozen=True, slots=True)
class _SucceededPod:
    name: str
    termination_message: str | None


def read_termination_message(message: str, *, where: str) -> TerminationMessage:
    """The pod's termination message (:class:`~runner.pod_output.TerminationMessage`).

    Raises:
        EnvelopeMismatchError: ``<where>: termination message ...`` naming what is wrong: a
            message that is there must be well formed.
    """
    try:
        return TerminationMessage.parse(message)
    except MalformedError as exc:
        raise EnvelopeMismatchError(f"{where}: {exc}") from exc


class EnvelopeCollector:
    """Reads what a completed run left behind, on the official client and the HTTP session."""

    def __init__(
        self,
        core: client.CoreV1Api,
        namespace: str,
        *,
        retry_policy: RetryPolicy,
        http: HttpClient,
    ) -> None:
        self._core = core
        self._namespace = namespace
        self._retry = retry_policy
        self._http = http

    def collect(
        self,
        job: dict[str, Any],
        *,
        verify_envelope: VerifyEnvelope,
        publish_url: str | None = None,
    ) -> CollectedEnvelope:
        """The verified envelope of a completed Job; every mismatch is an error."""
        name = str(job["metadata"]["name"])
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
        base_url = publish_url or annotations.get(ANNOTATION_PUBLISH_URL)
        if (job.get("spec") or {}).get("completionMode") == "Indexed":
            return self._collect_shards(
                job, run_id, tenant, checksum, verify_envelope=verify_envelope, base_url=base_url
            )
        pod = self._succeeded_pod(name)
        source: Source
        if base_url:
            envelope, source = self._from_publication(base_url, tenant, run_id), "publication"
        else:
            envelope, source = self._from_pod_log(pod.name), "pod-log"
        digest = sha256_digest(envelope)
        parsed = _parse(envelope, name)
        _expect(name, "envelope runId", parsed.run_id, run_id)
        _expect(name, "envelope tenant", parsed.tenant, tenant)
        _expect(name, "envelope binding.corpusChecksum", parsed.binding.corpus_checksum, checksum)
        corroborated = False
        if pod.termination_message:
            _corroborate(name, pod, parsed, digest)
            corroborated = True
        else:
            log.info("k8s_no_termination_message", job=name, pod=pod.name)
        verify_envelope(envelope)
        log.info(
            "k8s_envelope_collected",
            job=name,
            envelope=digest,
            source=source,
            corroborated=corroborated,
        )
        return CollectedEnvelope(
            name,
            run_id,
            tenant,
            envelope,
            digest,
            parsed.binding.result_digest,
            source,
            corroborated,
        )

    def _collect_shards(
        self,
        job: dict[str, Any],
        run_id: str,
        tenant: str,
        checksum: str,
        *,
        verify_envelope: VerifyEnvelope,
        base_url: str | None,
    ) -> CollectedEnvelope:
        """A sharded run: every index's envelope (from the publication service when
        ``base_url`` is set, else from the index's pod log), checked, merged, and the merged
        envelope verified with the tenant's verifier (which verifies every shard in it)."""
        name = str(job["metadata"]["name"])
        count = int((job.get("spec") or {}).get("completions") or 0)
        if not 1 <= count <= MAX_SHARD_COUNT:
            raise EnvelopeMismatchError(f"Job {name}: {count} completions is not a shard count")
        succeeded = self._succeeded_pods(name)
        shards = []
        budget = MergedBudget()
        corroborated = True
        for index in range(count):
            pod = succeeded.get(index)
            if pod is None:
                raise EnvelopeMissingError(
                    f"Job {name}: shard {index} of {count} has no succeeded pod (it may have "
                    "been removed by its TTL)"
                )
            if base_url:
                envelope = self._from_publication(base_url, tenant, run_id, shard=index)
            else:
                envelope = self._from_pod_log(pod.name)
            parsed = _parse(envelope, name)
            where = f"{name} shard {index}"
            _expect(where, "envelope runId", parsed.run_id, run_id)
            _expect(where, "envelope tenant", parsed.tenant, tenant)
            _expect(
                where, "envelope binding.corpusChecksum", parsed.binding.corpus_checksum, checksum
            )
            position = parsed.binding.shard
            bound = (
                "no shard" if position is None else f"shard {position.index} of {position.count}"
            )
            _expect(where, "envelope binding.shard", bound, f"shard {index} of {count}")
            if pod.termination_message:
                _corroborate(where, pod, parsed, sha256_digest(envelope))
            else:
                corroborated = False
            problem = budget.add(parsed)
            if problem is not None:  # the verifier would refuse the merged envelope as malformed
                raise VerificationFailedError(f"Job {where}: {problem}", verifier_exit_code=1)
            shards.append((parsed, functools.partial(self._tails_from_pod_log, pod.name), where))
        try:
            merged = merge_with_tails(shards)
            envelope = merged_envelope_bytes(merged)
        except AttestationError as exc:
            raise VerificationFailedError(
                f"Job {name}: the shard envelopes do not merge: {exc}",
                verifier_exit_code=EXIT_CODES[exc.failure_class],
            ) from exc
        verify_envelope(envelope)
        digest = sha256_digest(envelope)
        log.info("k8s_shards_collected", job=name, shards=count, envelope=digest)
        return CollectedEnvelope(
            name,
            run_id,
            tenant,
            envelope,
            digest,
            merged.result_digest,
            "publication" if base_url else "pod-log",
            corroborated,
            shards=count,
        )

    def _pods(self, name: str) -> list[dict[str, Any]]:
        return list_run_pods(self._core, self._retry, self._namespace, name)

    def _succeeded_pods(self, name: str) -> dict[int | None, _SucceededPod]:
        """The pods whose ``replay`` container exited 0 (exit codes reach the host through the
        agent's WaitProcess, so they exist under CoCo, unlike the termination message), by
        completion index (None for an unsharded Job); the first by name when one index has
        several (a shard's result does not depend on which of its pods computed it)."""
        found: dict[int | None, _SucceededPod] = {}
        for pod in sorted(self._pods(name), key=lambda p: str(p["metadata"]["name"])):
            if (pod.get("status") or {}).get("phase") != "Succeeded":
                continue
            for container in (pod.get("status") or {}).get("containerStatuses") or []:
                terminated = (container.get("state") or {}).get("terminated") or {}
                if container.get("name") == CONTAINER_NAME and terminated.get("exitCode") == 0:
                    message = terminated.get("message")
                    found.setdefault(
                        pod_index(pod),
                        _SucceededPod(
                            str(pod["metadata"]["name"]), str(message) if message else None
                        ),
                    )
        return found

    def _succeeded_pod(self, name: str) -> _SucceededPod:
        """The succeeded pod of an unsharded Job."""
        pods = self._succeeded_pods(name)
        if not pods:
            raise EnvelopeMissingError(
                f"Job {name} has no succeeded pod (it may have been removed by its TTL)"
            )
        return next(iter(pods.values()))

    def _from_pod_log(self, pod: str) -> bytes:
        # The kubelet applies tailLines first, then limitBytes from there (cri-client logs.go):
        # the frame is printed at the end of the run, so it is within the tail, and the read is
        # bounded by both.
        frames = framed_payloads(self._pod_log_tail(pod, MAX_POD_LOG_BYTES))
        if len(frames) != 1:
            raise EnvelopeMissingError(
                f"pod {pod}: expected one {FRAME_PREFIX.strip()} line in the last "
                f"{POD_LOG_TAIL_LINES} lines of container {CONTAINER_NAME}'s log, found "
                f"{len(frames)} (a CoCo agent policy that denies ReadStreamRequest empties the "
                "log; use --publish-url)"
            )
        try:
            return unframe_envelope(frames.pop())
        except MalformedError as exc:
            raise EnvelopeMissingError(f"pod {pod}: {exc}") from exc

    def _pod_log_tail(self, pod: str, limit_bytes: int) -> str:
        """The last :data:`POD_LOG_TAIL_LINES` lines of the replay container's log, at most
        ``limit_bytes`` of them."""
        text = retry.call(
            self._retry,
            "read pod log",
            self._core.read_namespaced_pod_log,
            pod,
            self._namespace,
            container=CONTAINER_NAME,
            tail_lines=POD_LOG_TAIL_LINES,
            limit_bytes=limit_bytes,
        )
        return str(text)

    def _tails_from_pod_log(self, pod: str, limit: int) -> bytes:
        """A shard pod's tails file, the ``ATTESTED-TAILS`` line it prints after its envelope
        (``limit``: the most its attested tails take; the publication service keeps
        envelopes only, so the tails always come from the log)."""
        text = self._pod_log_tail(pod, MAX_POD_LOG_BYTES + 4 * -(-limit // 3))
        lines = {
            line[len(TAILS_FRAME_PREFIX) :].strip()
            for line in text.splitlines()
            if line.startswith(TAILS_FRAME_PREFIX)
        }
        if len(lines) != 1:
            raise EnvelopeMissingError(
                f"pod {pod}: expected one {TAILS_FRAME_PREFIX.strip()} line (the shard's "
                f"latency tails) in container {CONTAINER_NAME}'s log, found {len(lines)}"
            )
        try:
            return base64.b64decode(lines.pop(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise EnvelopeMissingError(f"pod {pod}: the tails line is not base64: {exc}") from exc

    def _from_publication(
        self, base_url: str, tenant: str, run_id: str, *, shard: int | None = None
    ) -> bytes:
        """The run's envelope from the publication service, or shard ``shard``'s (the
        service keeps one envelope per run ID and part: the whole run, or each shard)."""
        url = publication_run_url(base_url, tenant, run_id)
        if shard is not None:
            url += f"/shards/{shard}"
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


def _parse(envelope: bytes, name: str) -> Envelope:
    try:
        return parse_envelope(envelope)
    except MalformedError as exc:
        raise VerificationFailedError(
            f"Job {name}: envelope does not parse: {exc}", verifier_exit_code=1
        ) from exc


def _expect(name: str, what: str, actual: str, expected: str) -> None:
    """The envelope must be about this run; full verification is the injected verifier's."""
    if actual != expected:
        raise EnvelopeMismatchError(f"Job {name}: {what} is {actual!r}, expected {expected!r}")


def _corroborate(name: str, pod: _SucceededPod, envelope: Envelope, digest: str) -> None:
    """A termination message that is there must describe the collected envelope."""
    assert pod.termination_message is not None
    where = f"pod {pod.name}"
    message = read_termination_message(pod.termination_message, where=where)
    checks = (
        ("run ID", message.run_id, envelope.run_id),
        ("corpus checksum", message.corpus_checksum, envelope.binding.corpus_checksum),
        ("envelope digest", message.envelope, digest),
        ("result digest", message.result, envelope.binding.result_digest),
    )
    for what, reported, collected in checks:
        if reported != collected:
            raise EnvelopeMismatchError(
                f"Job {name}: {where}'s termination message reports {what} {reported}, the "
                f"collected envelope has {collected}"
            )
