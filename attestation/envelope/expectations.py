"""The expectation checks (class 8): the tenant's expected values against what is bound.

They apply to one envelope's binding, or to a merged envelope's header (which repeats what
every shard binds); ``expectation.shard`` says whether the envelope is the whole run the
tenant expects, split into the number of shards it may pin.
"""

from __future__ import annotations

from typing import Final

from attestation.envelope.expected import ExpectedValues
from attestation.envelope.model import Binding, ShardPosition
from attestation.errors import FailureClass
from attestation.verify.checks import Check

_EXPECTATION = FailureClass.EXPECTATION

EXPECTATION_CHECKS: Final = (
    "expectation.run-id",
    "expectation.corpus-checksum",
    "expectation.tenant",
    "expectation.workload",
    "expectation.result-digest",
    "expectation.evaluation-digest",
    "expectation.image-digest",
    "expectation.nonce",
    "expectation.shard",
)


def expectation_checks(binding: Binding, expected: ExpectedValues) -> list[Check]:
    """Every expectation check except ``expectation.shard``, in order."""
    comparisons: list[tuple[str, str, str | None, str | None]] = [
        ("expectation.run-id", "runId", expected.run_id, binding.run_id),
        (
            "expectation.corpus-checksum",
            "corpusChecksum",
            expected.corpus_checksum,
            binding.corpus_checksum,
        ),
        ("expectation.tenant", "tenant", expected.tenant, binding.tenant),
        (
            "expectation.workload",
            "workloadDigest",
            expected.workload_digest,
            binding.workload.digest,
        ),
        (
            "expectation.result-digest",
            "resultDigest",
            expected.result_digest,
            binding.result_digest,
        ),
        (
            "expectation.evaluation-digest",
            "evaluationDigest",
            expected.evaluation_digest,
            binding.evaluation_digest,
        ),
        ("expectation.image-digest", "imageDigest", expected.image_digest, binding.image_digest),
        # Freshness: the tenant chose the nonce, so an envelope carrying another (or none) is
        # not the run it asked for, however genuine.
        ("expectation.nonce", "nonce", expected.nonce, binding.nonce),
    ]
    checks = []
    for name, key, wanted, actual in comparisons:
        if wanted is None and key == "evaluationDigest":
            checks.append(_unpinned_evaluation(actual, accepted=expected.accept_any_evaluation))
        elif wanted is None:
            checks.append(Check.passed(name, _EXPECTATION, f"{key} not pinned by the tenant"))
        elif wanted == actual:
            checks.append(Check.passed(name, _EXPECTATION, f"{key} {actual}"))
        else:
            shown = "absent from the binding" if actual is None else actual
            checks.append(
                Check.failed(name, _EXPECTATION, f"{key} is {shown}, the tenant expected {wanted}")
            )
    return checks


#: How a tenant pins the evaluation (the refusal names it).
PIN_EVALUATION_HINT: Final = (
    "`attested-replay expected --corpus DIR|ARCHIVE` pins the digest of the approved corpus' "
    "plan, marks and run records"
)


def _unpinned_evaluation(actual: str | None, *, accepted: bool) -> Check:
    """``expectation.evaluation-digest`` when the tenant pinned none: refused, unless the
    tenant gave it up explicitly (and the verdict says what was not pinned)."""
    name = "expectation.evaluation-digest"
    if accepted:
        return Check.passed(
            name,
            _EXPECTATION,
            f"evaluationDigest {actual} not pinned (acceptAnyEvaluation: the predictions, marks "
            "and plan this run scored are the operator's)",
        )
    return Check.failed(
        name,
        _EXPECTATION,
        f"evaluationDigest {actual} is not pinned: the predictions (runs.jsonl), marks and plan "
        f"this run scored could be any the operator chose; {PIN_EVALUATION_HINT} "
        "(acceptAnyEvaluation: true gives this up)",
    )


def shard_check(
    bound: ShardPosition | None, expected: ExpectedValues, wanted: ShardPosition | None
) -> Check:
    """``expectation.shard`` for one envelope bound at ``bound`` (None: a whole run); ``wanted``
    is the shard the caller asked for (None: a whole run)."""
    name = "expectation.shard"
    if bound is None:
        if wanted is not None:
            return Check.failed(
                name,
                _EXPECTATION,
                f"the envelope is a whole run, not shard {wanted.index} of {wanted.count}",
            )
        if expected.shard_count not in (None, 1):
            return Check.failed(
                name,
                _EXPECTATION,
                f"the envelope is an unsharded run; the tenant expected {expected.shard_count} "
                "shards",
            )
        return Check.passed(name, _EXPECTATION, "a whole, unsharded run")
    position = f"shard {bound.index} of {bound.count}"
    if wanted is None:
        return Check.failed(
            name,
            _EXPECTATION,
            f"the envelope is {position} of a sharded run, not a whole run: verify the "
            "merged envelope of all its shards",
        )
    if bound != wanted:
        return Check.failed(
            name,
            _EXPECTATION,
            f"the envelope is {position}, expected shard {wanted.index} of {wanted.count}",
        )
    return Check.passed(name, _EXPECTATION, f"{position}, as asked")


def merged_shard_check(
    shard_count: int, expected: ExpectedValues, wanted: ShardPosition | None
) -> Check:
    """``expectation.shard`` for a merged envelope of ``shard_count`` shards: a whole run."""
    name = "expectation.shard"
    if wanted is not None:
        return Check.failed(
            name,
            _EXPECTATION,
            f"the envelope is a merged run of {shard_count} shards, not shard {wanted.index} "
            f"of {wanted.count}",
        )
    if expected.shard_count is not None and expected.shard_count != shard_count:
        return Check.failed(
            name,
            _EXPECTATION,
            f"the run was split into {shard_count} shards; the tenant expected "
            f"{expected.shard_count}",
        )
    return Check.passed(name, _EXPECTATION, f"a whole run, merged from {shard_count} shards")
