"""``tenant fetch --expected``: verify each fetched envelope against one expected-values file.

A tenant's runs differ in their run IDs but usually share everything else it pins (corpus
checksum, workload, image, policy, accepted simulated roots). So one file serves them all:
each envelope is verified against that file with ``runId`` replaced by the run ID of the
envelope's log entry (which the fetch has already matched against the envelope). A ``runId``
in the file, if any, is therefore ignored; a ``nonce`` in it applies to every run (a tenant
that picks a nonce per run verifies those runs one by one with ``verify-attested-run``).
A shard envelope is verified as the shard it is bound as (its run as a whole is verified
through the run's merged envelope).

Verification is CPU-bound Python (parsing, the certificate chain, the report's signature), so
with ``workers`` above 1 the envelopes are verified in that many processes, in batches; the
verdicts come back in log order and are the very ones the sequential loop gives. A worker that
dies is :class:`VerificationWorkerError`: never a verdict, never a pass.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from attestation.contracts import MAX_ENVELOPE_BYTES, MAX_EXPECTED_BYTES
from attestation.encoding.json_document import parse_strict_json, validate_document
from attestation.envelope.expected import ExpectedValues
from attestation.envelope.merged import MergedEnvelope, parse_any_envelope
from attestation.envelope.model import ShardPosition
from attestation.envelope.verification import verify_envelope
from attestation.errors import FailureClass, MalformedError
from attestation.exit_codes import EXIT_CODES
from attestation.files import FileTooLargeError, read_regular
from attestation.tenant.errors import TenantInputError, TenantUsageError, VerificationWorkerError

#: Stands for each entry's run ID while the file is checked, before anything is fetched.
_SOME_RUN_ID: Final = "run"
#: Envelopes a worker process verifies per task: the hand-over costs a fraction of one.
POOL_BATCH: Final = 16
#: The most worker processes (``tenant fetch --verify-workers``).
MAX_WORKERS: Final = 64
#: ``verify-attested-run``'s code for "could not decide" (usage, IO, internal): what an
#: envelope without a verdict is reported with.
UNJUDGED_EXIT_CODE: Final = EXIT_CODES[FailureClass.USAGE]


def default_workers() -> int:
    """One worker per CPU this process may run on."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


@dataclass(frozen=True, slots=True)
class FetchedVerdict:
    """The verification of one fetched envelope."""

    position: int
    digest: str
    run_id: str
    #: The shard a shard envelope is bound as; None for a whole (unsharded or merged) run.
    shard: ShardPosition | None
    ok: bool
    #: ``verify-attested-run``'s exit code for this envelope (0 when it verified).
    exit_code: int
    #: The verdict line, then one line per failed check (``VerificationResult.summary``).
    summary: str
    #: False when the verifier failed before giving a verdict (``ok`` is then False too): the
    #: envelope stays listed as unjudged (:mod:`attestation.tenant.unjudged`).
    judged: bool = True

    def label(self) -> str:
        """``run R`` or ``run R shard I of N``, then the log index."""
        part = "" if self.shard is None else f" shard {self.shard.index} of {self.shard.count}"
        return f"run {self.run_id}{part} (log index {self.position})"


def load_expectations(path: Path, *, option: str = "--expected") -> dict[str, object]:
    """The expected-values file at ``path`` as a JSON object without ``runId``, checked as
    the verifier checks it (strict UTF-8 JSON, known keys, valid values) with a stand-in run ID.

    Raises:
        TenantUsageError: the file cannot be read (exit 9).
        TenantInputError: its content is not a valid expected-values file (exit 1).
    """
    try:
        data = read_regular(path, MAX_EXPECTED_BYTES)
    except FileTooLargeError as exc:
        raise TenantInputError(
            f"{option} {path}: larger than the {MAX_EXPECTED_BYTES}-byte limit of an "
            "expected-values file"
        ) from exc
    except OSError as exc:
        raise TenantUsageError(f"{option} {path}: {exc.strerror or exc}") from exc
    try:
        document = parse_strict_json(data, what="the expected-values file")
    except MalformedError as exc:
        raise TenantInputError(f"{option} {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise TenantInputError(f"{option} {path}: the expected-values file must be a JSON object")
    document.pop("runId", None)
    try:
        validate_document(
            {**document, "runId": _SOME_RUN_ID}, ExpectedValues, what="the expected-values file"
        )
    except MalformedError as exc:
        raise TenantInputError(f"{option} {path}: {exc}") from exc
    return document


def expectations_for(document: Mapping[str, object], run_id: str) -> ExpectedValues:
    """The expectations for one run: ``document`` with ``runId`` set to ``run_id``."""
    try:
        return validate_document(
            {**document, "runId": run_id}, ExpectedValues, what="the expected-values file"
        )
    except MalformedError as exc:  # only a run ID the log entry's own rules would refuse
        raise TenantInputError(f"run ID {run_id!r} of a log entry: {exc}") from exc


def verify_fetched(
    envelopes_dir: Path,
    entries: Iterable[tuple[int, str, str]],
    document: Mapping[str, object],
    *,
    now: datetime,
    workers: int = 1,
) -> list[FetchedVerdict]:
    """Verify each stored envelope ``(log position, sha256 digest, run ID)`` against
    ``document`` with that run ID (see the module docstring), in ``workers`` processes when
    that is more than 1. Never raises for a failed check.

    Raises:
        TenantUsageError: a stored envelope cannot be read (the first in log order).
        VerificationWorkerError: a worker process died; nothing is reported as verified.
    """
    if not 1 <= workers <= MAX_WORKERS:
        raise TenantUsageError(f"--verify-workers {workers}: must be between 1 and {MAX_WORKERS}")
    items = list(entries)
    batches = [items[i : i + POOL_BATCH] for i in range(0, len(items), POOL_BATCH)]
    if workers == 1 or len(batches) <= 1:  # a process costs more than one batch
        return verify_batch(envelopes_dir, items, document, now)
    verdicts: list[FetchedVerdict] = []
    # A forked worker starts at once with every module imported, but a fork copies the locks
    # other threads hold: fork only when this is the one thread, else spawn (a fresh
    # interpreter that imports what it needs, a second or so).
    start = "fork" if threading.active_count() == 1 else "spawn"
    context = multiprocessing.get_context(start)
    try:
        with ProcessPoolExecutor(min(workers, len(batches)), mp_context=context) as pool:
            for batch in pool.map(
                verify_batch,
                [envelopes_dir] * len(batches),
                batches,
                [dict(document)] * len(batches),
                [now] * len(batches),
            ):
                verdicts.extend(batch)
    except BrokenProcessPool as exc:
        raise VerificationWorkerError(
            f"a verification worker process died ({exc}): no envelope is reported verified"
        ) from exc
    return verdicts


def verify_batch(
    envelopes_dir: Path,
    entries: Sequence[tuple[int, str, str]],
    document: Mapping[str, object],
    now: datetime,
) -> list[FetchedVerdict]:
    """The verdicts of ``entries`` in their order, in this process (a worker's task)."""
    verdicts = []
    for position, digest, run_id in entries:
        path = envelopes_dir / f"sha256-{digest.removeprefix('sha256:')}.json"
        try:
            data = read_regular(path, MAX_ENVELOPE_BYTES)
        except OSError as exc:
            raise TenantUsageError(f"{path}: {exc.strerror or exc}") from exc
        shard = _bound_shard(data)
        try:
            result = verify_envelope(data, expectations_for(document, run_id), now=now, shard=shard)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - no verdict is recorded as such, never a pass
            verdicts.append(
                FetchedVerdict(
                    position,
                    digest,
                    run_id,
                    shard,
                    ok=False,
                    exit_code=UNJUDGED_EXIT_CODE,
                    summary=f"NO VERDICT: the verifier failed: {type(exc).__name__}: {exc}\n",
                    judged=False,
                )
            )
            continue
        verdicts.append(
            FetchedVerdict(
                position, digest, run_id, shard, result.ok, result.exit_code, result.summary()
            )
        )
    return verdicts


def _bound_shard(data: bytes) -> ShardPosition | None:
    try:
        envelope = parse_any_envelope(data)
    except MalformedError:
        return None  # the verification reports it (envelope.parse)
    return None if isinstance(envelope, MergedEnvelope) else envelope.binding.shard
