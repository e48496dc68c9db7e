"""The corpus files as frozen pydantic models (field names follow the evaluation-design pack)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from runner.corpus.errors import CorpusError
from runner.corpus.numbers import scored_value

Split = Literal["dev", "holdout", "adversarial"]

#: Case ids are opaque and ASCII-only, so byte, code-point and UTF-16 order all agree.
CASE_ID_PATTERN = r"^[a-z0-9-]+$"
CASE_ID_MAX = 40


def _exact_number(value: object) -> object:
    # A parsed JSON number (int or float: the double the digests hash) becomes the decimal
    # scoring uses (runner.corpus.numbers). bool is not a number: the strict Decimal check
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


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _present_not_null(value: object, info: ValidationInfo) -> object:
    # Runs only for keys that are present (defaults are not validated): an optional field
    # may be omitted, but an explicit null is an error rather than a silent "absent".
    if value is None:
        raise ValueError(f"{info.field_name} may be omitted but not null")
    return value


class Case(FrozenModel):
    """One line of ``cases.jsonl``."""

    case_id: str = Field(min_length=1, max_length=CASE_ID_MAX, pattern=CASE_ID_PATTERN)
    label: str = Field(min_length=1, max_length=200)
    input: JsonValue = None
    split: Split | None = None
    group: str | None = Field(default=None, min_length=1, max_length=60)

    _not_null = field_validator("split", "group", mode="before")(_present_not_null)


class RunCase(FrozenModel):
    """One case's result inside a run record."""

    case_id: str = Field(min_length=1, max_length=CASE_ID_MAX)
    prediction: str | None
    error: str | None = Field(default=None, max_length=300)
    cost_usd: ExactNumber | None = Field(ge=0)
    latency_ms: ExactNumber | None = Field(ge=0)

    _not_null = field_validator("error", mode="before")(_present_not_null)


class Usage(FrozenModel):
    source: str = Field(min_length=1, max_length=120)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    reason: str | None = Field(default=None, max_length=300)


class RunHeader(FrozenModel):
    """A run record without its ``cases``, which replay validates one at a time."""

    arm_id: str = Field(min_length=1, max_length=20)
    run_index: int = Field(ge=1, le=5)
    set_ref: str = Field(min_length=1, max_length=300)
    marks_ref: str = Field(min_length=1, max_length=300)
    usage: Usage


class RunRecord(RunHeader):
    """One line of ``runs.jsonl``: the pack's run-record template (no 2000-case cap)."""

    cases: tuple[RunCase, ...] = Field(strict=False, min_length=1)


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


ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_record(
    model: type[ModelT],
    data: object,
    file: str,
    line: int | None = None,
    *,
    at: str = "",
) -> ModelT:
    """Validate ``data`` as ``model``; a failure names the file, line and field (``at`` is
    the location of ``data`` inside the line, e.g. ``cases.17``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(part) for part in (*([at] if at else []), *first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        where = f"field '{loc}': " if loc else ""
        raise CorpusError(file, f"{where}{message}", line=line) from None
