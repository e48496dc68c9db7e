"""The evaluation's committed files as frozen models: ``plan.json`` and ``marks.json``.

Field names are those of docs/replay.md (the corpus format). Numbers are the doubles the
evaluation digest hashes, read as scoring reads them (:data:`ExactNumber`,
:func:`~.numbers.scored_value`). These models are shared by the replay (which reads the
files) and the verifier (which rebuilds a merged report from the plan and marks a shard
attested).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from attestation.contracts import SnakeWireModel
from attestation.scoring.numbers import scored_value


def _exact_number(value: object) -> object:
    # A parsed JSON number (int or float: the double the digests hash) becomes the decimal
    # scoring uses (numbers.scored_value). bool is not a number: the strict Decimal check
    # rejects it, as it rejects strings.
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return scored_value(value)
    return value


#: A JSON number as scoring reads it: the exact value of the double's RFC 8785 text.
ExactNumber = Annotated[Decimal, BeforeValidator(_exact_number)]


class FrozenModel(SnakeWireModel):
    """Frozen, strict, unknown keys refused: the base of the corpus file models."""


class PassMark(FrozenModel):
    id: str = Field(min_length=1, max_length=20)
    metric: str = Field(min_length=1, max_length=60)
    arm: str = Field(min_length=1, max_length=20)
    baseline: str | None = Field(default=None, max_length=20)
    threshold: ExactNumber | None = None
    rule: str = Field(min_length=1, max_length=300)


class PassMarks(FrozenModel):
    """``marks.json``: the pack's pass-marks template."""

    evaluation_ref: str = Field(min_length=1, max_length=300)
    marks: tuple[PassMark, ...] = Field(strict=False, min_length=1, max_length=12)
    committed_by: Literal["human"]
    committed_at: str = Field(max_length=40, pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}")
    immutable: Literal[True]


class Arm(FrozenModel):
    arm_id: str = Field(min_length=1, max_length=20, pattern=r"^[A-Za-z0-9_-]+$")
    role: Literal["baseline", "candidate", "control"]
    change: str = Field(min_length=1, max_length=300)
    arm_ref: str | None = Field(default=None, max_length=300)


class Scoring(FrozenModel):
    method: Literal["exact_match"]
    judge_use: Literal["none", "explanations_only_with_human_spot_check"]


class Plan(FrozenModel):
    """``plan.json``: the pack's evaluation-plan template plus ``positive_label``
    (and the optional ``abstain_label``)."""

    question: str = Field(min_length=1, max_length=300)
    decision: str = Field(min_length=1, max_length=300)
    arms: tuple[Arm, ...] = Field(strict=False, min_length=2, max_length=10)
    set_ref: str = Field(max_length=300)
    metrics: tuple[str, ...] = Field(strict=False, min_length=1, max_length=10)
    runs_per_arm: int = Field(ge=2, le=5)
    scoring: Scoring
    spread_limit_points: ExactNumber = Field(ge=0, le=100)
    cost_accounting: str = Field(min_length=1, max_length=300)
    exclusions_rule: str | None = Field(default=None, max_length=300)
    positive_label: str = Field(min_length=1, max_length=200)
    abstain_label: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _rules(self) -> Plan:
        if not any(arm.role == "baseline" for arm in self.arms):
            raise ValueError("the plan needs at least one baseline arm")
        ids = [arm.arm_id for arm in self.arms]
        if len(set(ids)) != len(ids):
            raise ValueError("arm ids must be unique")
        if self.exclusions_rule:
            raise ValueError(
                "field 'exclusions_rule': exclusions are not supported; errors are scored as wrong"
            )
        if self.abstain_label is not None and self.abstain_label == self.positive_label:
            raise ValueError("abstain_label must differ from positive_label")
        return self
