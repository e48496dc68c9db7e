"""The tenant's expected-values file: what a genuine envelope for *my* run must say.

camelCase JSON, one flat object. ``runId`` and ``corpusChecksum`` are required; ``tenant``,
``workloadDigest``, ``resultDigest``, ``evaluationDigest``, ``imageDigest`` and ``nonce`` are
checked when present (a binding without ``imageDigest`` or ``nonce`` then fails);
``evaluationDigest`` is required unless ``acceptAnyEvaluation`` is true (without it the
predictions and marks the run scored are the operator's choice); ``initDataDigest`` pins the
init-data (HOST_DATA of SEV-SNP evidence, PCR 8 of az-snp-vtpm evidence); ``shardCount``
pins into how many shards the run was split (1: an unsharded run; a merged envelope of N shards
has N); every key of the raw-mode :class:`~attestation.verify.policy.Policy` may appear too
(``{}``-style secure defaults otherwise): in Python they are ``expected.policy``, a
:class:`Policy` of its own; ``simulatedRoots`` lists the ``sha256:`` fingerprints (of the DER)
of simulated roots the tenant accepts: the only way simulated evidence can verify.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import InitErrorDetails

from attestation.contracts import (
    MAX_EXPECTED_BYTES,
    MAX_SHARD_COUNT,
    Hex32,
    Nonce,
    RunId,
    Sha256Digest,
    TenantId,
    WireModel,
)
from attestation.encoding.json_document import load_json_document
from attestation.verify.policy import Policy

#: The keys (names and camelCase aliases) that belong to the policy, flat on the wire.
_POLICY_KEYS: Final = frozenset(
    key for name, info in Policy.model_fields.items() for key in (name, info.alias or name)
)
_POLICY_FIELD: Final = "policy"


class ExpectedValues(WireModel):
    """Expectations about one run, and the policy they are checked under (its keys sit flat
    beside the expectations)."""

    run_id: RunId
    corpus_checksum: Sha256Digest
    tenant: TenantId | None = None
    workload_digest: Sha256Digest | None = None
    result_digest: Sha256Digest | None = None
    evaluation_digest: Sha256Digest | None = None
    #: The container image the tenant expects the operator to have run (bound by the Job).
    image_digest: Sha256Digest | None = None
    #: The nonce the tenant chose for this run (freshness): a binding without it fails.
    nonce: Nonce | None = None
    #: Into how many shards the run was split (1 = unsharded); any count when absent.
    shard_count: Annotated[int, Field(strict=True, ge=1, le=MAX_SHARD_COUNT)] | None = None
    simulated_roots: tuple[Sha256Digest, ...] = ()
    #: The explicit opt-out of pinning ``evaluationDigest``: the run's predictions, marks and
    #: plan are then whatever the operator fed it (the verdict says so).
    accept_any_evaluation: Annotated[bool, Field(strict=True)] = False
    #: The init-data digest (SHA-256, hex) the evidence must carry: HOST_DATA of SEV-SNP
    #: evidence, PCR 8 (one extend from zero) of az-snp-vtpm evidence.
    init_data_digest: Hex32 | None = None
    #: The platform and workload policy (flat on the wire, see the class docstring).
    policy: Policy = Field(default_factory=Policy)

    @model_validator(mode="wrap")
    @classmethod
    def _flat_policy(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> ExpectedValues:  # noqa: ANN401 - any input
        """Read the policy's keys from the flat wire object; errors keep their flat location."""
        if not isinstance(data, dict) or isinstance(data.get(_POLICY_FIELD), Policy):
            result: ExpectedValues = handler(data)
            return result
        if _POLICY_FIELD in data:  # not a key of the wire format
            raise ValidationError.from_exception_data(
                cls.__name__,
                [InitErrorDetails(type="extra_forbidden", loc=(_POLICY_FIELD,), input=data)],
            )
        nested = {key: value for key, value in data.items() if key not in _POLICY_KEYS}
        nested[_POLICY_FIELD] = {key: value for key, value in data.items() if key in _POLICY_KEYS}
        try:
            result = handler(nested)
        except ValidationError as error:
            raise ValidationError.from_exception_data(
                cls.__name__, [_flat(detail) for detail in error.errors(include_url=False)]
            ) from None
        return result

    @model_serializer(mode="wrap")
    def _flat_dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The policy's keys first, then the expectations: the order of the wire format."""
        document: dict[str, Any] = handler(self)
        policy = document.pop(_POLICY_FIELD, None) or {}
        return {**policy, **document}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # noqa: ANN401 - pydantic's signature
        """The schema of the flat wire object (the policy's properties at the top level)."""
        schema = super().model_json_schema(*args, **kwargs)
        definitions = schema.get("$defs", {})
        policy = definitions.pop(Policy.__name__)
        properties = schema["properties"]
        properties.pop(_POLICY_FIELD)
        schema["properties"] = {**policy["properties"], **properties}
        return schema


def _flat(detail: Any) -> InitErrorDetails:  # noqa: ANN401 - pydantic's ErrorDetails
    loc = tuple(detail["loc"])
    if loc[:1] == (_POLICY_FIELD,):
        loc = loc[1:]
    flat = InitErrorDetails(type=detail["type"], loc=loc, input=detail["input"])
    if "ctx" in detail:
        flat["ctx"] = detail["ctx"]
    return flat


def load_expected(data: bytes) -> ExpectedValues:
    """Parse an expected-values document (JSON).

    Raises:
        MalformedError: too large, not strict JSON, not an object, an unknown key or a bad value.
    """
    return load_json_document(
        data, ExpectedValues, what="expected-values file", limit=MAX_EXPECTED_BYTES
    )
