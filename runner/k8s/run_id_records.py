"""The durable record of a run ID: one ConfigMap per tenant and run, that outlives its Job.

"One run ID, one replay, one TEE" cannot rest on the Job alone: the TTL controller deletes a
finished Job (``ttlSecondsAfterFinished``), ``cancel`` deletes it, and a Job of the same name
in another namespace does not conflict. So ``submit`` first claims the run in a record kept in
one namespace for every submitter (``--records-namespace``, default ``attested-replay``),
without an owner reference (nothing garbage-collects it). What ``submit`` then decides is in
:meth:`runner.k8s.submit.Submitter.submit`; this module stores and reads the records.

The record is a small JSON document (:class:`RunIdRecord`) in the ConfigMap's ``data``, created
with ``fieldValidation=Strict`` and updated only with the ``resourceVersion`` it was read at,
so two submitters cannot both win. Its history is bounded (:data:`MAX_HISTORY` entries).
"""

from __future__ import annotations

import getpass
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from attestation.contracts import RunId, Sha256Digest, TenantId, WireModel
from attestation.tenant.http import RetryPolicy
from runner.errors import SubmitError
from runner.k8s import retry
from runner.k8s.errors import RunConflictError
from runner.k8s.job import (
    ANNOTATION_RUN_ID,
    ANNOTATION_TENANT,
    LABEL_MANAGED_BY,
    LABEL_TENANT,
    MANAGED_BY,
)

RunIdRecordState = Literal["submitted", "refused", "stopped", "cancelled"]
RunIdRecordEventKind = Literal["submitted", "rerun", "refused", "stopped", "cancelled"]
DEFAULT_RECORDS_NAMESPACE: Final = "attested-replay"
RECORD_KEY: Final = "record.json"
COMPONENT: Final = "run-record"
#: Events kept per record (the oldest are dropped first; a ConfigMap holds at most 1 MiB).
MAX_HISTORY: Final = 64


class RunIdRecordEvent(WireModel):
    event: RunIdRecordEventKind
    at: str
    by: str
    spec_digest: Sha256Digest
    detail: str = ""


class RunIdRecord(WireModel):
    """What is known of one run ID, whatever became of its Job."""

    v: Literal[1] = 1
    run_id: RunId
    tenant: TenantId
    job_name: str
    job_namespace: str
    spec_digest: Sha256Digest
    corpus_checksum: Sha256Digest
    publish_url: str | None = None
    #: Random identifier of the ``submit`` invocation that last claimed the run.
    submission: str
    state: RunIdRecordState
    history: tuple[RunIdRecordEvent, ...] = ()

    def then(self, event: RunIdRecordEvent, **changes: object) -> RunIdRecord:
        """This record with ``event`` appended (history bounded) and ``changes`` applied."""
        history = (*self.history, event)[-MAX_HISTORY:]
        return self.model_copy(update={**changes, "history": history})


@dataclass(frozen=True, slots=True)
class StoredRunIdRecord:
    record: RunIdRecord
    resource_version: str


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def operator_name() -> str:
    """Who runs this command, for the record (the login name; the host's user database may
    not know a container's UID)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class RunIdRecords:
    """Run records in one namespace, through the official client."""

    def __init__(
        self,
        core: client.CoreV1Api,
        namespace: str,
        *,
        retry_policy: RetryPolicy,
        clock: Callable[[], str] = now_rfc3339,
        user: Callable[[], str] = operator_name,
    ) -> None:
        self._core = core
        self.namespace = namespace
        self._retry = retry_policy
        self._clock = clock
        self._user = user

    def event(
        self, kind: RunIdRecordEventKind, spec_digest: str, detail: str = ""
    ) -> RunIdRecordEvent:
        return RunIdRecordEvent(
            event=kind, at=self._clock(), by=self._user(), spec_digest=spec_digest, detail=detail
        )

    def create(self, record: RunIdRecord) -> StoredRunIdRecord | None:
        """Create the record; None when one of that name exists already."""
        try:
            response: Any = retry.call(
                self._retry,
                "create run record",
                self._core.create_namespaced_config_map,
                self.namespace,
                self._body(record),
                field_validation="Strict",
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise self._refused("create", exc) from exc
        retry.log_warnings(response, "create run record")
        return self._stored(retry.read_json(response))

    def read(self, name: str) -> StoredRunIdRecord | None:
        try:
            response: Any = retry.call(
                self._retry,
                "read run record",
                self._core.read_namespaced_config_map,
                name,
                self.namespace,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._refused("read", exc) from exc
        return self._stored(retry.read_json(response))

    def replace(self, stored: StoredRunIdRecord, record: RunIdRecord) -> StoredRunIdRecord:
        """Update the record as read; anyone's change since is a conflict, never overwritten."""
        body = self._body(record)
        body["metadata"]["resourceVersion"] = stored.resource_version
        name = body["metadata"]["name"]
        try:
            response: Any = retry.call(
                self._retry,
                "update run record",
                self._core.replace_namespaced_config_map,
                name,
                self.namespace,
                body,
                field_validation="Strict",
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise RunConflictError(
                    f"run record {self.namespace}/{name} changed while this command updated it "
                    "(another submit, cancel or wait): try again"
                ) from exc
            raise self._refused("update", exc) from exc
        return self._stored(retry.read_json(response))

    def note(self, name: str, state: RunIdRecordState, detail: str) -> None:
        """Record what became of a run (stopped, cancelled); a missing record is left alone."""
        for _ in range(3):
            stored = self.read(name)
            if stored is None:
                return
            record = stored.record
            updated = record.then(self.event(state, record.spec_digest, detail), state=state)
            try:
                self.replace(stored, updated)
            except RunConflictError:
                continue
            return

    def _body(self, record: RunIdRecord) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": record.job_name,
                "namespace": self.namespace,
                "labels": {
                    LABEL_MANAGED_BY: MANAGED_BY,
                    "app.kubernetes.io/component": COMPONENT,
                    LABEL_TENANT: record.tenant,
                },
                "annotations": {ANNOTATION_RUN_ID: record.run_id, ANNOTATION_TENANT: record.tenant},
            },
            "data": {RECORD_KEY: json.dumps(record.to_json_dict(), sort_keys=True, indent=1)},
        }

    def _stored(self, config_map: dict[str, Any]) -> StoredRunIdRecord:
        name = config_map.get("metadata", {}).get("name", "")
        text = (config_map.get("data") or {}).get(RECORD_KEY)
        try:
            record = RunIdRecord.model_validate_json(str(text), strict=False)
        except ValidationError as exc:
            raise SubmitError(
                f"run record {self.namespace}/{name} is malformed ({exc.error_count()} problems, "
                f"first: {exc.errors(include_url=False)[0]['msg']}); it is left as it is: "
                f"inspect it with kubectl get configmap -n {self.namespace} {name} -o yaml"
            ) from None
        return StoredRunIdRecord(record, str(config_map["metadata"]["resourceVersion"]))

    def _refused(self, what: str, exc: ApiException) -> SubmitError:
        if exc.status == 404:
            return SubmitError(
                f"records namespace {self.namespace!r} does not exist: apply k8s/base (it creates "
                "it) or pass --records-namespace"
            )
        if exc.status == 403:
            return SubmitError(
                f"the operator may not {what} run records (configmaps in namespace "
                f"{self.namespace}): apply the Role in k8s/base there"
            )
        return SubmitError(f"{what} run record failed: {retry.describe(exc)}")
