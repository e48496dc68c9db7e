"""Merge a sharded replay's shard envelopes into one merged envelope (``attested-replay merge``).

The shards are read (each at most the envelope cap) with their tails files (``<shard>.tails.json``
beside each, ``runner.shard_tails``: checked against the tail roots the shards
attest, and opened at each run's p95), joined by the verifier's own merge
(``attestation.envelope.merged.merge_envelopes``: one complete, consistent set, the report
rebuilt with the replay's code), and the merged envelope is verified exactly as a tenant would
before it is written: against the tenant's expected values when given, else the crypto-only
policy with the header's own values (simulated evidence only under this machine's simulated
root, as ``run`` does).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog
from pydantic import JsonValue

from attestation.contracts import MAX_SHARD_COUNT, sha256_digest
from attestation.encoding.canonical import canonicalize
from attestation.envelope.expected import ExpectedValues
from attestation.envelope.merged import (
    MergedBudget,
    MergedEnvelope,
    merged_envelope_bytes,
)
from attestation.envelope.model import Envelope, parse_envelope
from attestation.envelope.verification import verify_envelope
from attestation.errors import AttestationError
from attestation.files import open_regular
from attestation.tenant.fsutil import atomic_write
from attestation.verify.checks import VerificationResult
from runner.errors import InputError, UsageError
from runner.pipeline.envelope import read_envelope_file
from runner.pipeline.run import default_tails_path
from runner.pipeline.verification import expect_what_is_bound, raise_unless_verified
from runner.shard_tails import merge_with_tails

log = structlog.get_logger("attested-replay.merge")


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What a merge wrote."""

    envelope: MergedEnvelope
    envelope_bytes: bytes
    envelope_digest: str
    envelope_path: Path
    result_path: Path
    #: The merged evaluation report (written to ``result_path``).
    report: dict[str, JsonValue]
    verification: VerificationResult


def merge_shards(
    shard_paths: Sequence[Path],
    *,
    out: Path,
    result_out: Path | None = None,
    omit_result: bool = False,
    expected: ExpectedValues | None = None,
    simulated_root: str | None = None,
    now: datetime | None = None,
) -> MergeResult:
    """Merge the shard envelopes in ``shard_paths`` into ``out`` (and the report into
    ``result_out``, default ``<out>.result.json``).

    Raises:
        UsageError: no shards, an unreadable file, or ``out`` among the inputs.
        InputError: a file that is not a shard envelope, shards that are not one complete
            set of one replay, or a merged envelope over the envelope cap.
        VerificationFailedError: the merged envelope does not verify (carrying the verifier's
            exit code).
    """
    if not shard_paths:
        raise UsageError("merge needs the shard envelopes (one file per shard)")
    result_path = result_out or out.with_name(out.name + ".result.json")
    resolved = {path.resolve() for path in shard_paths}
    for target, option in ((out, "--out"), (result_path, "--result-out")):
        if target.resolve() in resolved:
            raise UsageError(f"{option} {target} is one of the shard envelopes")
    shards = _read_shards(shard_paths)
    try:
        merged = merge_with_tails(
            [
                (shard, functools.partial(_read_tails, path), str(path))
                for shard, path in zip(shards, shard_paths, strict=True)
            ]
        )
    except AttestationError as exc:
        raise InputError(f"the shard envelopes do not merge: {exc}") from exc
    assert merged.result is not None
    report = merged.result
    if omit_result:
        merged = merged.model_copy(update={"result": None})
    try:
        envelope_bytes = merged_envelope_bytes(merged)
    except AttestationError as exc:
        raise InputError(str(exc)) from exc
    verification = _verify(envelope_bytes, merged, expected, simulated_root, now)
    atomic_write(result_path, canonicalize(report) + b"\n")
    atomic_write(out, envelope_bytes)
    digest = sha256_digest(envelope_bytes)
    log.info("merged_envelope_written", path=str(out), envelope_digest=digest)
    return MergeResult(merged, envelope_bytes, digest, out, result_path, report, verification)


def _read_shards(paths: Sequence[Path]) -> list[Envelope]:
    """The shard envelopes, refused before reading when there are more than a replay can have,
    and while reading once those read could no longer fit in one merged envelope (so at most
    about one envelope cap is held, whatever the number of files)."""
    if len(paths) > MAX_SHARD_COUNT:
        raise InputError(
            f"{len(paths)} shard envelopes, more than the {MAX_SHARD_COUNT} shards a replay "
            "can have"
        )
    shards: list[Envelope] = []
    budget = MergedBudget()
    for path in paths:
        shard = _read_shard(path)
        problem = budget.add(shard)
        if problem is not None:
            raise InputError(f"{path}: {problem}")
        shards.append(shard)
    return shards


def _read_tails(shard: Path, limit: int) -> bytes:
    """A shard's tails file, beside its envelope, read up to ``limit`` bytes and one more (the
    most its shard's attested tails take: ``read_tails`` names a larger one); a regular file
    only."""
    path = default_tails_path(shard)
    try:
        with open_regular(path) as handle:
            return handle.read(limit + 1)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: missing: the tails file `run --shard-count` wrote beside shard envelope "
            f"{shard} (its latency tails, which the merge opens at each run's p95)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None


def _read_shard(path: Path) -> Envelope:
    data = read_envelope_file(path, what="shard envelope")
    try:
        envelope = parse_envelope(data)
    except AttestationError as exc:
        raise InputError(f"{path}: {exc}") from exc
    if envelope.binding.shard is None:
        raise InputError(f"{path}: the envelope of a whole run, not of a shard")
    return envelope


def _verify(
    envelope_bytes: bytes,
    merged: MergedEnvelope,
    expected: ExpectedValues | None,
    simulated_root: str | None,
    now: datetime | None,
) -> VerificationResult:
    if expected is None:
        expected = expect_what_is_bound(merged, simulated_root=simulated_root)
    result = verify_envelope(envelope_bytes, expected, now=now or datetime.now(UTC))
    raise_unless_verified(result, "the merged envelope does not verify", most=3)
    log.info("merged_envelope_verified", checks=len(result.checks))
    return result
