"""Per-index progress of a sharded run (an Indexed Job). Pure: Job and Pod wire-form dicts.

The Job controller reports finished indices in ``status.completedIndexes`` and (with
``backoffLimitPerIndex``) ``status.failedIndexes``, as ``"1,3-5,7"``: ascending decimal
numbers, runs of three or more written ``first-last`` (batch/v1 ``JobStatus``, 1.28+). Each pod
carries its index in the annotation ``batch.kubernetes.io/job-completion-index`` (also a label
from 1.28, ``PodIndexLabel``) and, with per-index backoff, the failures of its index so far in
``batch.kubernetes.io/job-index-failure-count``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
FAILURE_COUNT_ANNOTATION: Final = "batch.kubernetes.io/job-index-failure-count"
#: One element of an index list: ``n`` or ``first-last``.
_INTERVAL: Final = re.compile(r"^(0|[1-9][0-9]{0,5})(?:-(0|[1-9][0-9]{0,5}))?$")

IndexState = Literal["pending", "running", "retrying", "succeeded", "failed"]


class IndexListError(ValueError):
    """A ``completedIndexes``/``failedIndexes`` value that is not the controller's format."""


def parse_index_list(text: str | None, *, below: int) -> frozenset[int]:
    """The indices of a ``"1,3-5,7"`` list (empty or absent: none), each below ``below``.

    Raises:
        IndexListError: anything else (the API server is the operator's: its answers are
            checked, not trusted).
    """
    if not text:
        return frozenset()
    indices: set[int] = set()
    for part in text.split(","):
        match = _INTERVAL.fullmatch(part)
        if match is None:
            raise IndexListError(f"index list {text[:80]!r}: {part[:20]!r} is not n or n-m")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first or last >= below:
            raise IndexListError(f"index list {text[:80]!r}: {part!r} is not within 0..{below - 1}")
        indices.update(range(first, last + 1))
    return frozenset(indices)


def pod_index(pod: dict[str, Any]) -> int | None:
    """The completion index of a pod of an Indexed Job, or None without a valid one."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION)
    if not isinstance(text, str) or _INTERVAL.fullmatch(text) is None or "-" in text:
        return None
    return int(text)


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """One index (one shard, one TEE at a time) of a sharded run."""

    index: int
    state: IndexState
    #: Pods of this index that failed so far (evictions the Job ignores included).
    failures: int
    #: The last failure: exit code and reason, or the pod's reason (e.g. Evicted).
    last_failure: str

    def to_json_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "index": self.index,
            "state": self.state,
            "failures": self.failures,
        }
        if self.last_failure:
            document["lastFailure"] = self.last_failure
        return document


def index_progress(job: dict[str, Any], pods: Iterable[dict[str, Any]]) -> list[IndexProgress]:
    """Every index of an Indexed Job, from its status and its pods.

    Raises:
        IndexListError: the Job's index lists are not in the controller's format.
    """
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    completions = int(spec.get("completions") or 0)
    completed = parse_index_list(status.get("completedIndexes"), below=completions)
    failed = parse_index_list(status.get("failedIndexes"), below=completions)
    failures: dict[int, int] = {}
    last_failure: dict[int, str] = {}
    live: set[int] = set()
    for pod in pods:
        index = pod_index(pod)
        if index is None or index >= completions:
            continue
        pod_status = pod.get("status") or {}
        phase = pod_status.get("phase")
        if phase == "Failed":
            failures[index] = failures.get(index, 0) + 1
            last_failure[index] = _failure_of(pod_status)
        elif phase in ("Pending", "Running"):
            live.add(index)
    progress = []
    for index in range(completions):
        state: IndexState
        if index in completed:
            state = "succeeded"
        elif index in failed:
            state = "failed"
        elif index in live:
            state = "retrying" if failures.get(index) else "running"
        else:
            state = "pending"
        progress.append(
            IndexProgress(index, state, failures.get(index, 0), last_failure.get(index, ""))
        )
    return progress


def _failure_of(pod_status: dict[str, Any]) -> str:
    for container in pod_status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return f"exit code {terminated['exitCode']} ({terminated.get('reason') or 'Error'})"
    return str(pod_status.get("reason") or "failed")
