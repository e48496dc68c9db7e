"""What one run is doing while we wait, and when a stall stops being transient. Pure.

A :class:`RunProgress` is fed the run's Job, its pods and the Warning events about those pods,
with the time each was seen, and answers two questions: what to report now (:class:`Report`,
sent once per change), and whether the run has an outcome (the Job's own, or "cannot-run"
once a stall outlives its grace, at once when it cannot heal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from runner.k8s.state import (
    FAILED_MOUNT,
    POLICY_DENIED_REASON,
    SANDBOX_EVENT,
    PodFailure,
    RunOutcome,
    Stall,
    StallKind,
    event_count,
    event_stall,
    events_span,
    job_outcome,
    pod_failure,
    pod_stall,
)

#: Defaults of the graces (seconds), documented in docs/operator.md.
SCHEDULE_GRACE: Final = 600.0
IMAGE_PULL_GRACE: Final = 300.0
START_GRACE: Final = 120.0
SANDBOX_GRACE: Final = 60.0


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    """How long each kind of stall may last before the run counts as unable to run.

    Scheduling waits for capacity (an autoscaler adds a node in minutes); image pulls back off
    from 10 s to 300 s; a missing Secret may be created; a sandbox that keeps failing boots a
    new VM every 10-15 s, so its grace is short.
    """

    schedule_grace: float = SCHEDULE_GRACE
    image_pull_grace: float = IMAGE_PULL_GRACE
    start_grace: float = START_GRACE
    sandbox_grace: float = SANDBOX_GRACE

    def grace(self, kind: StallKind) -> float:
        return {
            "schedule": self.schedule_grace,
            "image-pull": self.image_pull_grace,
            "start": self.start_grace,
            "sandbox": self.sandbox_grace,
            "final": 0.0,
        }[kind]


@dataclass(frozen=True, slots=True)
class Report:
    """One progress line: the run's phase, and the reason and message when it is stalled."""

    name: str
    phase: str
    reason: str = ""
    message: str = ""
    #: Sandbox attempts (VM boots) seen for the current pod.
    attempts: int = 0


@dataclass
class _PodState:
    pod: dict[str, Any]
    #: The pod's sandbox-failure events by name. The kubelet's recorder patches the count of an
    #: identical repeat, keeps up to 9 differently-worded ones (Kata messages carry per-attempt
    #: IDs) as events of their own, then folds every further one into a single "(combined from
    #: similar events)" event whose count grows (client-go ``tools/record/events_cache.go``
    #: EventAggregate, eventObserve): the attempts are the sum over all of them.
    sandbox_events: dict[str, dict[str, Any]] = field(default_factory=dict)
    sandbox_count: int = 0
    sandbox_span: float = 0.0
    sandbox_event: dict[str, Any] | None = None
    #: The latest ``FailedMount``: the pod stays ContainerCreating while a volume is missing.
    mount_event: dict[str, Any] | None = None

    def add_sandbox_event(self, event: dict[str, Any]) -> None:
        key = str((event.get("metadata") or {}).get("name") or len(self.sandbox_events))
        known = self.sandbox_events.get(key)
        if known is not None and event_count(known) > event_count(event):
            return  # an older copy of an event already counted further
        self.sandbox_events[key] = event
        self.sandbox_count = sum(event_count(seen) for seen in self.sandbox_events.values())
        self.sandbox_span = max(self.sandbox_span, events_span(self.sandbox_events.values()))
        self.sandbox_event = event


@dataclass
class RunProgress:
    name: str
    policy: WaitPolicy = field(default_factory=WaitPolicy)
    pods: dict[str, _PodState] = field(default_factory=dict)
    failures: dict[str, PodFailure] = field(default_factory=dict)
    stall: Stall | None = None
    stall_pod: str = ""
    stall_since: float = 0.0
    last_report: Report | None = None
    job_active: bool = False
    #: Failed attempts not reported yet.
    unreported: list[PodFailure] = field(default_factory=list)

    # -- input -----------------------------------------------------------------------------

    def on_job(self, job: dict[str, Any]) -> RunOutcome | None:
        self.job_active = bool((job.get("status") or {}).get("active"))
        outcome = job_outcome(job)
        if outcome is None or outcome.state == "succeeded":
            return outcome
        return RunOutcome(
            outcome.name, outcome.state, outcome.reason, outcome.message, self.attempts()
        )

    def on_pod(self, pod: dict[str, Any], now: float) -> RunOutcome | None:
        name = str(pod["metadata"]["name"])
        state = self.pods.setdefault(name, _PodState(pod))
        state.pod = pod
        failure = pod_failure(pod)
        if failure is not None and name not in self.failures:
            self.failures[name] = failure
            self.unreported.append(failure)
            if failure.final:
                return self._cannot_run(failure.reason, failure.message)
        self._restall(now)
        return None

    def on_pod_deleted(self, pod: dict[str, Any], now: float) -> None:
        self.pods.pop(str(pod["metadata"]["name"]), None)
        self._restall(now)

    def on_event(self, pod_name: str, event: dict[str, Any], now: float) -> RunOutcome | None:
        stall = event_stall(event)
        state = self.pods.get(pod_name)
        if stall is None or state is None:
            return None
        if stall.reason == FAILED_MOUNT:
            state.mount_event = event
        else:
            state.add_sandbox_event(event)
        if stall.kind == "final":
            return self._cannot_run(stall.reason, stall.message)
        self._restall(now)
        return None

    # -- decisions ---------------------------------------------------------------------------

    def check(self, now: float) -> RunOutcome | None:
        """The outcome once the current stall has outlived its grace."""
        if self.stall is None:
            return None
        if now - self.stall_since >= self.policy.grace(self.stall.kind):
            return self._cannot_run(self.stall.reason, self.stall.message)
        return None

    def reports(self) -> list[Report]:
        """Progress lines not sent yet: each failed attempt once (a disruption, an exit), then
        the run's current phase if it changed since the last line."""
        lines = [
            Report(
                self.name,
                "disrupted" if failure.disruption else "attempt-failed",
                failure.reason,
                f"pod {failure.pod}: {failure.message}"
                if failure.message
                else f"pod {failure.pod}",
            )
            for failure in self.unreported
        ]
        self.unreported.clear()
        current = self.current()
        if current != self.last_report:
            self.last_report = current
            lines.append(current)
        return lines

    def attempts(self) -> tuple[str, ...]:
        """The failed attempts (pods) seen so far, oldest first."""
        return tuple(failure.describe() for failure in self.failures.values())

    def current(self) -> Report:
        """What the run is doing now."""
        if self.stall is not None:
            attempts = self.pods[self.stall_pod].sandbox_count if self.stall_pod in self.pods else 0
            return Report(self.name, "pending", self.stall.reason, self.stall.message, attempts)
        running = any(
            (state.pod.get("status") or {}).get("phase") == "Running"
            for state in self.pods.values()
        )
        return Report(self.name, "running" if running or self.job_active else "pending")

    def _restall(self, now: float) -> None:
        """Recompute the stall of the newest live pod; keep its start time while it lasts."""
        stall, pod_name, span = self._find_stall()
        if stall is None:
            self.stall, self.stall_pod = None, ""
            return
        if self.stall is None or (stall.kind, pod_name) != (self.stall.kind, self.stall_pod):
            # A sandbox failing since before we watched: the kubelet's own clock says how long.
            self.stall_since = now - span
        self.stall, self.stall_pod = stall, pod_name

    def _find_stall(self) -> tuple[Stall | None, str, float]:
        for name, state in reversed(self.pods.items()):
            phase = (state.pod.get("status") or {}).get("phase")
            if phase not in (None, "Pending"):
                continue
            stall = pod_stall(state.pod)
            if stall is not None:
                return stall, name, 0.0
            if state.sandbox_event is not None:
                found = event_stall(state.sandbox_event)
                if found is not None:
                    return found, name, state.sandbox_span
            if state.mount_event is not None:
                found = event_stall(state.mount_event)
                if found is not None:
                    return found, name, 0.0
            return None, name, 0.0
        return None, "", 0.0

    def _cannot_run(self, reason: str, message: str) -> RunOutcome:
        if reason in (SANDBOX_EVENT, POLICY_DENIED_REASON) and self.stall_pod in self.pods:
            count = self.pods[self.stall_pod].sandbox_count
            if count > 1:
                message = f"{message} ({count} attempts, each a VM boot)"
        return RunOutcome(self.name, "cannot-run", reason, message, self.attempts())
