"""The tenant's verifier, run by the operator side before it trusts or publishes an envelope:
``self_verify`` for the envelope a run just built, ``envelope_verifier`` for ``collect``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import structlog

from attestation.envelope.expected import ExpectedValues, load_expected
from attestation.envelope.merged import MergedEnvelope
from attestation.envelope.model import Binding, ShardPosition
from attestation.envelope.verification import verify_envelope
from attestation.errors import AttestationError
from attestation.verify.checks import VerificationResult
from attestation.verify.policy import CRYPTO_ONLY
from attestation.verify.verifier import Verifier
from runner.errors import InputError, UsageError, VerificationFailedError

log = structlog.get_logger(__name__)


def self_verify(
    envelope_bytes: bytes,
    *,
    binding: Binding,
    simulated_root: str | None,
    shard: ShardPosition | None = None,
    verifier: Verifier | None = None,
    now: datetime | None = None,
) -> VerificationResult:
    """Check a freshly built envelope exactly as a tenant would (crypto, binding, expectations).

    The platform policy is the tenant's decision, so only the crypto-only policy is applied
    here; simulated evidence is accepted only under ``simulated_root`` (this machine's). A
    shard's envelope is checked as that ``shard`` (a tenant verifies the merged envelope).
    ``verifier`` is the one that already verified this evidence (``pipeline.envelope.endorse``):
    its memoized chain validation is reused (with the same ``now``), so a run validates its
    chain once.
    """
    result = verify_envelope(
        envelope_bytes,
        expect_what_is_bound(binding, simulated_root=simulated_root),
        now=now or datetime.now(UTC),
        shard=shard,
        verifier=verifier,
    )
    raise_unless_verified(result, "the envelope this run built does not verify")
    log.info("envelope_self_verified", checks=len(result.checks))
    return result


def expect_what_is_bound(
    bound: Binding | MergedEnvelope, *, simulated_root: str | None
) -> ExpectedValues:
    """The operator side's expectations of an envelope it built: exactly the values it binds
    (and a merged envelope's shard count), under the crypto-only policy (the platform policy
    is the tenant's decision); simulated evidence only under ``simulated_root``."""
    return ExpectedValues(
        run_id=bound.run_id,
        corpus_checksum=bound.corpus_checksum,
        tenant=bound.tenant,
        workload_digest=bound.workload.digest,
        result_digest=bound.result_digest,
        evaluation_digest=bound.evaluation_digest,
        shard_count=bound.shard_count if isinstance(bound, MergedEnvelope) else None,
        simulated_roots=(simulated_root,) if simulated_root else (),
        policy=CRYPTO_ONLY,
    )


def load_expected_file(path: Path) -> ExpectedValues:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read expected-values file {path}: {exc}") from exc
    try:
        return load_expected(data)
    except AttestationError as exc:
        raise InputError(f"{path}: {exc}") from exc


def envelope_verifier(expected_path: Path, now: datetime | None = None) -> Callable[[bytes], None]:
    """A function that verifies envelope bytes against a tenant's expected-values file and
    raises :class:`VerificationFailedError` (carrying the verifier's exit code) on failure."""
    expected = load_expected_file(expected_path)

    def verify(envelope_bytes: bytes) -> None:
        result = verify_envelope(envelope_bytes, expected, now=now or datetime.now(UTC))
        raise_unless_verified(result, "envelope rejected")

    return verify


def raise_unless_verified(
    result: VerificationResult, what: str, *, most: int | None = None
) -> None:
    """Raise :class:`VerificationFailedError` (with the verifier's exit code) unless verified,
    naming the failed checks (the first ``most`` of them, when given)."""
    if result.ok:
        return
    failed = "; ".join(f"{check.name}: {check.detail}" for check in result.failed_checks[:most])
    raise VerificationFailedError(
        f"{what} ({result.failure_class}, exit {result.exit_code}): {failed}",
        verifier_exit_code=result.exit_code,
    )
