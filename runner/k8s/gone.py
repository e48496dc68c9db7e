"""What is known of a run whose Job is not in the namespace: its durable record says it.

A finished Job is deleted by its TTL (``ttlSecondsAfterFinished``), ``cancel`` and a stopped
wait delete it, and a run may have been submitted to another namespace. Its pods, their logs
and termination messages go with the Job, so ``collect`` has nothing left to read in the
cluster; the run record (:mod:`runner.k8s.run_id_records`) still says what happened, when
and by whom, and where the envelope was published, if anywhere. ``status`` prints that (phase
``gone``); ``collect`` turns it into an error naming what is missing and where the envelope is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runner.k8s.run_id_records import RunIdRecord, RunIdRecordEvent

#: Why there is no Job: removed after it ran (TTL, or a deletion outside attested-replay),
#: cancelled, stopped by a wait, never created (the API server refused it), or it is elsewhere.
GoneReason = Literal["JobGone", "Cancelled", "Stopped", "NeverCreated", "InOtherNamespace"]

_REASONS: dict[str, GoneReason] = {
    "submitted": "JobGone",
    "cancelled": "Cancelled",
    "stopped": "Stopped",
    "refused": "NeverCreated",
}


def publication_run_url(base_url: str, tenant: str, run_id: str) -> str:
    """Where the publication service serves a run's (whole or merged) envelope."""
    return f"{base_url.rstrip('/')}/v1/tenants/{tenant}/runs/{run_id}"


@dataclass(frozen=True, slots=True)
class GoneRun:
    """A run with a record and no Job in ``namespace``."""

    name: str
    #: Where the Job was looked for.
    namespace: str
    records_namespace: str
    record: RunIdRecord

    @property
    def reason(self) -> GoneReason:
        if self.record.job_namespace != self.namespace:
            return "InOtherNamespace"
        return _REASONS[self.record.state]

    def explain(self) -> str:
        """Why the Job is not there, when and by whom, in the record's words."""
        record = self.record
        last = record.history[-1] if record.history else None
        job = f"{record.job_namespace}/{self.name}"
        if self.reason == "InOtherNamespace":
            return (
                f"its Job was submitted to namespace {record.job_namespace}, not "
                f"{self.namespace} (record: {record.state}, {_when(last)}): pass --namespace "
                f"{record.job_namespace}"
            )
        if record.state == "cancelled":
            return f"its Job {job} was cancelled {_when(last)}"
        if record.state == "stopped":
            return f"its Job {job} was stopped {_when(last)} because it could not run: " + (
                last.detail if last else "no detail recorded"
            )
        if record.state == "refused":
            return f"no Job {job} was ever created: the API server refused it {_when(last)}: " + (
                last.detail if last else "no detail recorded"
            )
        submitted = "resubmitted (--rerun)" if last and last.event == "rerun" else "submitted"
        return (
            f"its Job {job}, {submitted} {_when(last)}, is gone: removed by its TTL "
            "(ttlSecondsAfterFinished) after it finished, or deleted outside attested-replay"
        )

    def uncollectable(self, publish_url: str | None) -> str:
        """``collect``'s error: what is missing and, when a publication URL is known (given,
        or recorded at submit), where the envelope is."""
        record = self.record
        text = f"run {record.run_id!r} of tenant {record.tenant!r}: {self.explain()}"
        if self.reason == "InOtherNamespace":
            return text
        if record.state in ("refused", "stopped"):
            return text + "; it never ran to the end, so there is no envelope to collect"
        text += (
            "; its pods went with it, and with them the pod log and termination message that "
            "collect reads"
        )
        url = publish_url or record.publish_url
        if url is None:
            return text + (
                "; no publication URL is recorded for the run (submitted without --publish-url), "
                "so no copy of its envelope is within reach: run it again with submit --rerun "
                "REASON"
            )
        return text + (
            f"; the run published its envelope to {url}: it is at "
            f"{publication_run_url(url, record.tenant, record.run_id)} (attested-replay tenant "
            f"fetch --server {url} --tenant {record.tenant} fetches and verifies it)"
        )

    def to_json_dict(self) -> dict[str, Any]:
        """One ``status`` line, with the same keys as a run's that has a Job, and the record."""
        record = self.record
        return {
            "job": self.name,
            "runId": record.run_id,
            "tenant": record.tenant,
            "phase": "gone",
            "reason": self.reason,
            "message": self.explain(),
            "created": record.history[0].at if record.history else "",
            "record": {"namespace": self.records_namespace, **record.to_json_dict()},
        }


def _when(event: RunIdRecordEvent | None) -> str:
    return f"at {event.at} by {event.by}" if event else "at an unrecorded time"
