"""Verifying a merged envelope: every shard as an envelope, then the merge, then expectations.

Checks, in class order (the exit code is the class of the first failing check):

1. ``envelope.parse`` of the merged envelope;
2. every shard envelope's own checks (certificate chain, report, signature, endorsement,
   policy, workload identity, binding, its shard result), named ``shards[i].<check>``; each
   shard's partials are decoded and checked there, once; across shards they are
   ordered by class, so a malformed shard anywhere outranks a binding failure in another;
3. ``merged.shards`` (binding, 7): the shards are exactly shards 0..N-1 of ``shardCount``,
   listed in order, of this run (run, tenant, corpus, evaluation, workload, image, nonce), of
   one launch configuration (equal MEASUREMENT and HOST_DATA) and one platform (all
   ``sev-snp`` or all ``simulated``);
4. ``merged.result`` (binding, 7): each run's p95 in ``tailOpenings`` is proven from every
   shard's attested latency-tail root (its blocks' inclusion proofs and the counts above and
   at it), and the shard results merge (the same code as the replay) into a report whose
   digest is ``resultDigest`` (and whose bytes are ``result`` when present);
5. the expectation checks on the header, and ``expectation.shard`` (a whole run; the
   tenant's ``shardCount`` when pinned).

Cost: the N shard verifications plus the merge: a few additions per run and shard, and per
run and shard one or two inclusion proofs of a tail block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from attestation.encoding.canonical import canonicalize
from attestation.envelope.binding import canonical_result_digest
from attestation.envelope.expectations import (
    EXPECTATION_CHECKS,
    expectation_checks,
    merged_shard_check,
)
from attestation.envelope.expected import ExpectedValues
from attestation.envelope.merged import SHARED_FIELDS, MergedEnvelope, consistency_problem
from attestation.envelope.model import Binding, Envelope, ShardPosition
from attestation.errors import AttestationError, FailureClass
from attestation.scoring.shards import CheckedShard, check_complete, merge_shard_results
from attestation.verify.checks import Check, VerificationResult

_MALFORMED = FailureClass.MALFORMED
_BINDING = FailureClass.BINDING
_EXPECTATION = FailureClass.EXPECTATION
_CLASS_ORDER: Final = {cls: position for position, cls in enumerate(FailureClass)}
MERGED_CHECKS: Final = ("merged.shards", "merged.result")


def verify_merged(
    merged: MergedEnvelope,
    expected: ExpectedValues,
    *,
    verify_shard: Callable[[Envelope], tuple[VerificationResult, CheckedShard | None]],
    shard: ShardPosition | None = None,
) -> VerificationResult:
    """The checks of a parsed merged envelope (see the module docstring).

    ``verify_shard`` verifies one shard envelope with the checks of classes 1-7 (the
    envelope verifier's, with the tenant's policy), and gives its checked shard result
    (decoded once there, merged here). ``shard``: the caller expected one shard's
    envelope (a merged envelope then fails ``expectation.shard``).
    """
    checks = [
        Check.passed(
            "envelope.parse",
            _MALFORMED,
            f"{merged.kind} {merged.api_version}, run {merged.run_id}, "
            f"{len(merged.shards)} shard envelope(s)",
        )
    ]
    outcomes = [verify_shard(part) for part in merged.shards]
    verified = [result for result, _ in outcomes]
    per_shard = [
        Check(f"shards[{position}].{check.name}", check.failure_class, check.ok, check.detail)
        for position, result in enumerate(verified)
        for check in result.checks
    ]
    # Stable: within a class each shard's checks keep their order, shard 0 first.
    checks.extend(sorted(per_shard, key=lambda check: _CLASS_ORDER[check.failure_class]))
    first = verified[0]
    # The verdict rests on every shard's chain: simulated if any of them is.
    chain = next(
        (result.chain for result in verified if result.chain and result.chain.simulated),
        first.chain,
    )
    if not all(result.ok for result in verified):
        why = "a shard envelope does not verify"
        checks.extend(Check.not_run(name, _BINDING, why) for name in MERGED_CHECKS)
        checks.extend(Check.not_run(name, _EXPECTATION, why) for name in EXPECTATION_CHECKS)
        return VerificationResult.from_checks(checks, first.report, first.product_line, chain)

    merge_checks = [_shards_check(merged)]
    if merge_checks[0].ok:
        merge_checks.append(_result_check(merged, [checked for _, checked in outcomes]))
    else:
        merge_checks.append(Check.not_run("merged.result", _BINDING, "the shards are not one set"))
    checks.extend(merge_checks)
    if not all(check.ok for check in merge_checks):
        checks.extend(
            Check.not_run(name, _EXPECTATION, "the merge does not hold")
            for name in EXPECTATION_CHECKS
        )
    else:
        checks.extend(expectation_checks(header_binding(merged), expected))
        checks.append(merged_shard_check(merged.shard_count, expected, shard))
    return VerificationResult.from_checks(checks, first.report, first.product_line, chain)


def header_binding(merged: MergedEnvelope) -> Binding:
    """The merged header as a binding (no shard): what the expectation checks compare."""
    return Binding(
        result_digest=merged.result_digest,
        **{field: getattr(merged, field) for field in SHARED_FIELDS},
    )


def _shards_check(merged: MergedEnvelope) -> Check:
    problem = consistency_problem(merged)
    if problem is not None:
        return Check.failed("merged.shards", _BINDING, problem)
    return Check.passed(
        "merged.shards",
        _BINDING,
        f"shards 0..{merged.shard_count - 1} of {merged.shard_count}, each once, of run "
        f"{merged.run_id}, one launch configuration, {merged.shards[0].platform} evidence",
    )


def _result_check(merged: MergedEnvelope, checked: Sequence[CheckedShard | None]) -> Check:
    name = "merged.result"
    missing = next((position for position, shard in enumerate(checked) if shard is None), None)
    if missing is not None:
        return Check.failed(
            name,
            _BINDING,
            f"the shard results do not merge: shards[{missing}] carries no result: its "
            "partial is needed for the merge",
        )
    try:
        complete = [shard for shard in checked if shard is not None]
        check_complete([shard.result for shard in complete])
        report = merge_shard_results(complete, merged.tail_openings)
    except AttestationError as exc:
        return Check.failed(name, _BINDING, f"the shard results do not merge: {exc}")
    try:
        canonical = canonicalize(report)
    except AttestationError as exc:  # never for a report the merge built
        return Check.failed(name, _BINDING, f"the merged report has no canonical form: {exc}")
    digest = canonical_result_digest(canonical)
    if digest != merged.result_digest:
        return Check.failed(
            name,
            _BINDING,
            f"the shards merge to a report of digest {digest}, the envelope says "
            f"{merged.result_digest}: the merged result was changed",
        )
    if merged.result is not None and not _same_json(merged.result, canonical):
        return Check.failed(
            name,
            _BINDING,
            "the envelope's result is not the merge of its shards: the merged result was changed",
        )
    return Check.passed(name, _BINDING, f"the shards merge to the result {digest}")


def _same_json(claimed: object, recomputed: bytes) -> bool:
    """Whether the envelope's ``result`` is the recomputed report (``recomputed``: its RFC 8785
    bytes, the form its digest is over) as JSON values. A value with no canonical form (a lone
    surrogate, an integer beyond 2**53: valid JSON, never a report's) is a different result,
    not a crash."""
    try:
        return canonicalize(claimed) == recomputed
    except AttestationError:
        return False
