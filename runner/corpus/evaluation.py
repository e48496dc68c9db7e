"""``plan.json``, ``marks.json`` and ``runs.jsonl``: loading, cross-checks and the
evaluation digest.

evaluationDigest = ``sha256:`` + SHA-256 over
``JCS(plan) \\n JCS(marks) \\n`` followed by ``JCS(run) \\n`` for every run record in
``runs.jsonl``, which must be in ascending ``(arm_id, run_index)`` order. JCS is RFC 8785
over the files' JSON values as written (numbers as IEEE doubles). Run records are read, and
their part of the digest computed, by ``runner.corpus.run_records``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import CanonicalizationError, canonicalize
from attestation.evaluation.models import PassMarks, Plan
from runner.corpus.canonical_lines import LineDecoder
from runner.corpus.errors import CorpusError
from runner.corpus.jsonio import parse_line_with_number_check, read_small_json, require_corpus_dir
from runner.corpus.models import validate_record

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


def parse_run_line(line: bytes, number: int) -> tuple[dict[str, Any], bytes]:
    """A whole run record's JSON object and its RFC 8785 bytes (the reader of a line the
    streaming reader of ``runner.corpus.run_records`` declines).

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
