"""The tenant's expected-values file: what a genuine envelope for *my* run must say.

camelCase JSON. ``runId`` and ``corpusChecksum`` are required; ``tenant``,
``workloadDigest``, ``resultDigest``, ``evaluationDigest`` and ``imageDigest`` are checked when
present (a binding without ``imageDigest`` then fails); ``shardCount`` pins into how many
shards the run was split (1: an unsharded run; a merged envelope of N shards has N); every
key of the raw-mode :class:`~attestation.verify.policy.Policy` may appear too (``{}``-style secure
defaults otherwise); ``simulatedRoots`` lists the ``sha256:`` fingerprints (of the DER) of
simulated roots the tenant accepts: the only way simulated evidence can verify.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from attestation.contracts import (
    MAX_EXPECTED_BYTES,
    MAX_SHARD_COUNT,
    RunId,
    Sha256Digest,
    TenantId,
)
from attestation.encoding.json_document import load_json_document
from attestation.verify.policy import Policy


class ExpectedValues(Policy):
    """Expectations about one run, plus the verification policy (all Policy keys)."""

    run_id: RunId
    corpus_checksum: Sha256Digest
    tenant: TenantId | None = None
    workload_digest: Sha256Digest | None = None
    result_digest: Sha256Digest | None = None
    evaluation_digest: Sha256Digest | None = None
    #: The container image the tenant expects the operator to have run (bound by the Job).
    image_digest: Sha256Digest | None = None
    #: Into how many shards the run was split (1 = unsharded); any count when absent.
    shard_count: Annotated[int, Field(strict=True, ge=1, le=MAX_SHARD_COUNT)] | None = None
    simulated_roots: tuple[Sha256Digest, ...] = ()

    def policy(self) -> Policy:
        """The policy part of these expectations."""
        names = set(Policy.model_fields)
        return Policy.model_validate(
            {name: getattr(self, name) for name in names}, by_name=True, by_alias=False
        )


def load_expected(data: bytes) -> ExpectedValues:
    """Parse an expected-values document (JSON).

    Raises:
        MalformedError: too large, not strict JSON, not an object, an unknown key or a bad value.
    """
    return load_json_document(
        data, ExpectedValues, what="expected-values file", limit=MAX_EXPECTED_BYTES
    )
