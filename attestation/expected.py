"""The tenant's expected-values file: what a genuine envelope for *my* run must say.

camelCase JSON. ``runId`` and ``corpusChecksum`` are required; ``tenant``,
``workloadDigest``, ``resultDigest`` and ``evaluationDigest`` are checked when present; every
key of the raw-mode :class:`~attestation.policy.Policy` may appear too (``{}``-style secure
defaults otherwise); ``simulatedRoots`` lists the ``sha256:`` fingerprints (of the DER) of
simulated roots the tenant accepts: the only way simulated evidence can verify.
"""

from __future__ import annotations

import json
from typing import Final

from pydantic import ValidationError

from attestation.envelope import RunId, Sha256Digest, TenantId
from attestation.errors import MalformedError
from attestation.policy import Policy

#: Expected-values files larger than this are refused before parsing.
MAX_EXPECTED_BYTES: Final = 1024 * 1024


class ExpectedValues(Policy):
    """Expectations about one run, plus the verification policy (all Policy keys)."""

    run_id: RunId
    corpus_checksum: Sha256Digest
    tenant: TenantId | None = None
    workload_digest: Sha256Digest | None = None
    result_digest: Sha256Digest | None = None
    evaluation_digest: Sha256Digest | None = None
    simulated_roots: tuple[Sha256Digest, ...] = ()

    def policy(self) -> Policy:
        """The policy part of these expectations."""
        names = set(Policy.model_fields)
        return Policy.model_validate(
            {name: getattr(self, name) for name in names}, by_name=True, by_alias=False
        )

    def to_json_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def load_expected(data: bytes) -> ExpectedValues:
    """Parse an expected-values document (JSON).

    Raises:
        MalformedError: too large, not JSON, not an object, an unknown key or a bad value.
    """
    if len(data) > MAX_EXPECTED_BYTES:
        raise MalformedError(
            f"expected-values file is {len(data)} bytes, over the {MAX_EXPECTED_BYTES}-byte limit"
        )
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedError(f"expected-values file is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise MalformedError("expected-values file must be a JSON object")
    try:
        return ExpectedValues.model_validate(document, by_alias=True, by_name=False)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in error.errors()
        )
        raise MalformedError(f"expected-values file is invalid: {problems}") from None
