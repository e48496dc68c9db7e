"""``plan.json``, ``marks.json`` and ``runs.jsonl``: loading, cross-checks and the
evaluation digest.

evaluationDigest = ``sha256:`` + SHA-256 over
``JCS(plan) \\n JCS(marks) \\n`` followed by ``JCS(run) \\n`` for every run record in
``runs.jsonl``, which must be in ascending ``(arm_id, run_index)`` order. JCS is RFC 8785
over the files' JSON values as written (numbers as IEEE doubles).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import CanonicalizationError, canonicalize
from attestation.evaluation.models import PassMarks, Plan
from runner.corpus.canonical_lines import LineDecoder
from runner.corpus.errors import CorpusError, CorpusOrderError
from runner.corpus.jsonio import (
    MAX_RUN_LINE_BYTES,
    iter_lines,
    open_corpus_file,
    parse_line_with_number_check,
    read_small_json,
    require_corpus_dir,
)
from runner.corpus.models import RunHeader, validate_record

PLAN_FILE: Final = "plan.json"
MARKS_FILE: Final = "marks.json"
RUNS_FILE: Final = "runs.jsonl"
#: A run record as msgspec reads it for its RFC 8785 bytes (any object: validation is the
#: models', with their messages).
_RUN_LINES: Final = LineDecoder(dict[str, Any])


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The committed plan and marks, validated against each other."""

    plan: Plan
    marks: PassMarks
    plan_canonical: bytes
    marks_canonical: bytes

    @property
    def marks_ref(self) -> str:
        """What every run record's ``marks_ref`` must be: the digest of the committed marks."""
        return sha256_digest(self.marks_canonical)

    @property
    def run_count(self) -> int:
        return len(self.plan.arms) * self.plan.runs_per_arm


def _canonical(value: object, file: str, line: int | None = None) -> bytes:
    try:
        return canonicalize(value)
    except CanonicalizationError as exc:
        raise CorpusError(file, str(exc), line=line) from exc


def load_evaluation(corpus_dir: Path) -> Evaluation:
    """Read and validate plan and marks (each on its own; whether the plan's metrics and the
    marks can be scored is the scoring rules' question: ``runner.scoring.checks.check_evaluation``).
    """
    require_corpus_dir(corpus_dir)
    # One parse per file: the values validated and scored are the ones hashed
    # (runner.corpus.numbers).
    plan_data = read_small_json(corpus_dir / PLAN_FILE)
    plan = validate_record(Plan, plan_data, PLAN_FILE)
    marks_data = read_small_json(corpus_dir / MARKS_FILE)
    marks = validate_record(PassMarks, marks_data, MARKS_FILE)
    seen: set[str] = set()
    for index, mark in enumerate(marks.marks):
        if mark.id in seen:
            raise CorpusError(MARKS_FILE, f"field 'marks.{index}.id': duplicate mark {mark.id!r}")
        seen.add(mark.id)
    return Evaluation(
        plan=plan,
        marks=marks,
        plan_canonical=_canonical(plan_data, PLAN_FILE),
        marks_canonical=_canonical(marks_data, MARKS_FILE),
    )


def is_canonical_line(line: bytes, data: object, *, numbers_safe: bool) -> bool:
    """True when ``line`` is provably the RFC 8785 form of ``data`` (parsed from it).

    For ASCII text, sorted-key compact ``json.dumps`` (C-accelerated) escapes strings and
    orders keys exactly as RFC 8785 does; numbers can differ only where ``numbers_safe``
    (from ``parse_line_with_number_check``) is False, and those lines are canonicalized.
    """
    if not numbers_safe or not line.isascii():
        return False
    rendered = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return rendered.encode("utf-8", "surrogatepass") == line


@dataclass(frozen=True, slots=True)
class RunLine:
    line: int
    canonical: bytes
    header: RunHeader
    #: the raw case entries, validated one by one while scoring (no model list per run)
    cases: list[Any]


def iter_runs(corpus_dir: Path, evaluation: Evaluation) -> Iterator[RunLine]:
    """Validated run records in file order; checks arms, indices and their order.

    Each record is one line and is held in memory while it is processed; the values scored
    are the doubles hashed (``runner.corpus.numbers``).
    """
    arm_ids = {arm.arm_id for arm in evaluation.plan.arms}
    previous: tuple[str, int] | None = None
    with open_corpus_file(corpus_dir / RUNS_FILE) as handle:
        for number, line in iter_lines(handle, RUNS_FILE, MAX_RUN_LINE_BYTES):
            data, canonical = _parse_run_line(line, number)
            cases = data.pop("cases", None)
            record = validate_record(RunHeader, data, RUNS_FILE, number)
            if cases is None:
                raise CorpusError(RUNS_FILE, "field 'cases': Field required", line=number)
            if not isinstance(cases, list) or not cases:
                raise CorpusError(RUNS_FILE, "field 'cases': must be a non-empty list", line=number)
            if record.arm_id not in arm_ids:
                raise CorpusError(
                    RUNS_FILE,
                    f"field 'arm_id': arm {record.arm_id!r} is not in the plan",
                    line=number,
                )
            if record.run_index > evaluation.plan.runs_per_arm:
                raise CorpusError(
                    RUNS_FILE,
                    f"field 'run_index': {record.run_index} exceeds the plan's runs_per_arm "
                    f"{evaluation.plan.runs_per_arm}",
                    line=number,
                )
            key = (record.arm_id, record.run_index)
            if previous is not None and key <= previous:
                if key == previous:
                    raise CorpusError(
                        RUNS_FILE,
                        f"field 'run_index': duplicate run {record.arm_id}/{record.run_index}",
                        line=number,
                    )
                raise CorpusOrderError(
                    RUNS_FILE,
                    f"field 'arm_id': run {record.arm_id}/{record.run_index} comes after "
                    f"{previous[0]}/{previous[1]}; runs must be in ascending (arm_id, run_index) "
                    "order: run `attested-replay corpus normalize DIR --out DIR2`",
                    line=number,
                )
            previous = key
            yield RunLine(line=number, canonical=canonical, header=record, cases=cases)


def _parse_run_line(line: bytes, number: int) -> tuple[dict[str, Any], bytes]:
    """A run record's JSON object and its RFC 8785 bytes.

    Fast path: msgspec writes the RFC 8785 bytes in C (``canonical_lines``, which declines any
    line it cannot vouch for: several values, a duplicate key, an integer beyond 2**53, a
    number that is no double, key orders that differ); a line it accepts is then plainly
    ``json.loads``-ed, which reads exactly the values the exact path reads. Everything else
    takes the exact path, which also writes the error messages.
    """
    fast = _RUN_LINES.canonical_chunk(line + b"\n")
    if fast is not None:
        try:
            return json.loads(line), fast[1][:-1]
        except (ValueError, RecursionError):
            pass  # the exact path names the problem
    data, numbers_safe = parse_line_with_number_check(line, RUNS_FILE, number)
    if is_canonical_line(line, data, numbers_safe=numbers_safe):
        return data, line
    return data, _canonical(data, RUNS_FILE, number)
