"""``tenant fetch --expected``: verify each fetched envelope against one expected-values file.

A tenant's runs differ in their run IDs but usually share everything else it pins (corpus
checksum, workload, image, policy, accepted simulated roots). So one file serves them all:
each envelope is verified against that file with ``runId`` replaced by the run ID of the
envelope's log entry (which the fetch has already matched against the envelope). A ``runId``
in the file, if any, is therefore ignored; a ``nonce`` in it applies to every run (a tenant
that picks a nonce per run verifies those runs one by one with ``verify-attested-run``).
A shard envelope is verified as the shard it is bound as (its run as a whole is verified
through the run's merged envelope).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
from attestation.errors import MalformedError
from attestation.files import FileTooLargeError, read_regular
from attestation.verify.checks import VerificationResult
from tenant.errors import TenantInputError, TenantUsageError

#: Stands for each entry's run ID while the file is checked, before anything is fetched.
_SOME_RUN_ID: Final = "run"


@dataclass(frozen=True, slots=True)
class FetchedVerdict:
    """The verification of one fetched envelope."""

    position: int
    digest: str
    run_id: str
    #: The shard a shard envelope is bound as; None for a whole (unsharded or merged) run.
    shard: ShardPosition | None
    result: VerificationResult

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
) -> list[FetchedVerdict]:
    """Verify each stored envelope ``(log position, sha256 digest, run ID)`` against
    ``document`` with that run ID (see the module docstring). Never raises for a failed check."""
    verdicts = []
    for position, digest, run_id in entries:
        path = envelopes_dir / f"sha256-{digest.removeprefix('sha256:')}.json"
        try:
            data = read_regular(path, MAX_ENVELOPE_BYTES)
        except OSError as exc:
            raise TenantUsageError(f"{path}: {exc.strerror or exc}") from exc
        shard = _bound_shard(data)
        result = verify_envelope(data, expectations_for(document, run_id), now=now, shard=shard)
        verdicts.append(FetchedVerdict(position, digest, run_id, shard, result))
    return verdicts


def _bound_shard(data: bytes) -> ShardPosition | None:
    try:
        envelope = parse_any_envelope(data)
    except MalformedError:
        return None  # the verification reports it (envelope.parse)
    return None if isinstance(envelope, MergedEnvelope) else envelope.binding.shard
