"""The replay container's side on the real control plane: kwok runs the pods (stages in
tests/k8s/kwok/stages.yaml); this finishes them as the replay would.

For every pod of a Job that kwok reports Running, it writes the container's log (the replay's
stdout with its framed envelope line) as a CRI log file, points a kwok ``Logs`` object at it
(kwok then serves it at the kubelet's containerLogs endpoint, which ``kubectl logs`` and
``collect`` reach through the API server), and annotates the pod with the exit code that
kwok's ``pod-exit`` stage turns into the container's termination.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Final, Self

from runner.k8s.job import INSTANCE_LABEL
from tests.k8s.control_plane import EXIT_CODE_ANNOTATION, NAMESPACE, ControlPlane

POLL_SECONDS: Final = 0.2


def cri_log(text: str) -> str:
    """``text`` as the CRI log file a container runtime writes (cri-api logs: RFC 3339 nano
    timestamp, stream, ``F`` for a full line, the line)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return "".join(f"{stamp} stdout F {line}\n" for line in text.splitlines())


class Replays:
    """Finishes the pods of one Job: each Running pod gets ``log`` and exits ``exit_code``."""

    def __init__(
        self,
        plane: ControlPlane,
        job: str,
        directory: Path,
        *,
        log: str,
        exit_code: int = 0,
        namespace: str = NAMESPACE,
        timeout: float = 120.0,
        hold: threading.Event | None = None,
    ) -> None:
        self._plane = plane
        self._job = job
        self._directory = directory
        self._log = log
        self._exit_code = exit_code
        self._namespace = namespace
        self._deadline = time.monotonic() + timeout
        self._done: set[str] = set()
        self._stop = threading.Event()
        #: While given and not set, pods are left running.
        self._hold = hold
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.error is not None:
            raise self.error

    @property
    def finished(self) -> set[str]:
        return set(self._done)

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and time.monotonic() < self._deadline:
                time.sleep(POLL_SECONDS)
                if self._hold is not None and not self._hold.is_set():
                    continue
                pods = self._plane.json(
                    "GET",
                    f"/api/v1/namespaces/{self._namespace}/pods"
                    f"?labelSelector={INSTANCE_LABEL}%3D{self._job}",
                )
                for pod in pods["items"]:
                    name = str(pod["metadata"]["name"])
                    if name not in self._done and pod["status"].get("phase") == "Running":
                        self._finish(name)
        except BaseException as exc:  # reported by __exit__, in the test's thread
            self.error = exc

    def _finish(self, pod: str) -> None:
        path = self._directory / f"{pod}.log"
        path.write_text(cri_log(self._log))
        self._plane.json(
            "POST",
            f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{self._namespace}/logs",
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": self._namespace},
                "spec": {"logs": [{"containers": ["replay"], "logsFile": str(path)}]},
            },
        )
        # kwok learns of the Logs object through its watch: wait until it serves the log
        log_path = f"/api/v1/namespaces/{self._namespace}/pods/{pod}/log?container=replay"
        self._plane.wait_for(
            f"kwok to serve the log of {pod}",
            lambda: self._plane.request("GET", log_path).status_code == HTTPStatus.OK,
            timeout=30,
        )
        self._plane.json(
            "PATCH",
            f"/api/v1/namespaces/{self._namespace}/pods/{pod}",
            {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: str(self._exit_code)}}},
            content_type="application/merge-patch+json",
        )
        self._done.add(pod)
