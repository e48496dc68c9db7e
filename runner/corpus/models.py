"""The corpus files as frozen pydantic models (every file and field: docs/replay.md)."""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

from pydantic import (
    BaseModel,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from attestation.encoding.json_document import plain_message, problem_path
from attestation.scoring.models import ExactNumber, FrozenModel
from runner.corpus.errors import CorpusError

Split = Literal["dev", "holdout", "adversarial"]

#: Case ids are opaque and ASCII-only, so byte, code-point and UTF-16 order all agree.
CASE_ID_PATTERN = r"^[a-z0-9-]+$"
CASE_ID_MAX = 40


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

    # The pattern of Case: an id no case can have is named at its line, never hashed (the id
    # digest is over ASCII bytes).
    case_id: str = Field(min_length=1, max_length=CASE_ID_MAX, pattern=CASE_ID_PATTERN)
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
    problems = model_problems(model, data)
    if not problems:
        return model.model_validate(data)
    loc, message = problems[0]
    loc = ".".join(part for part in (at, loc) if part)
    where = f"field '{loc}': " if loc else ""
    raise CorpusError(file, f"{where}{message}", line=line)


def model_problems(model: type[BaseModel], data: object) -> list[tuple[str, str]]:
    """Every problem of ``data`` as ``model``: ``(dotted field path, message)``, in the order
    pydantic found them; empty when ``data`` is valid. A list whose items failed is not also
    reported as too short (pydantic counts only the items that validated)."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    else:
        return []
    locations = [error["loc"] for error in errors]
    problems = []
    for error in errors:
        loc = error["loc"]
        if error["type"] == "too_short" and any(
            len(other) > len(loc) and other[: len(loc)] == loc for other in locations
        ):
            continue
        path = problem_path(loc)
        problems.append((path, _message(model, loc, error)))
    return problems


def _message(model: type[BaseModel], loc: tuple[str | int, ...], error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        if owner is None:
            return "unknown key"
        return f"unknown key (allowed: {', '.join(owner.model_fields)})"
    if (
        error["type"] == "string_pattern_mismatch"
        and (error.get("ctx") or {}).get("pattern") == CASE_ID_PATTERN
    ):
        message = "a case id is lowercase ASCII letters, digits and '-'"
    else:
        message = plain_message(error["msg"].removeprefix("Value error, "))
    value = error.get("input")
    if error["type"] != "missing" and isinstance(value, str | int | float | bool | None):
        shown = repr(value)
        message += f" (found {shown if len(shown) <= 60 else shown[:57] + '...'})"
    return message


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model of the object at ``loc`` inside ``model`` (through fields and list items)."""
    current: object = model
    for part in loc:
        if isinstance(part, int):
            continue  # an item of the list whose element type is already current
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _element_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _element_model(annotation: object) -> object:
    """``Arm`` for ``tuple[Arm, ...]``, ``Scoring`` for ``Scoring``, ``Usage`` for
    ``Usage | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        found = _element_model(argument)
        if found is not None:
            return found
    return None
