"""``corpus check``: every problem of a corpus directory at once, and its two references.

The replay stops at the first problem, which suits a run but not a person writing a corpus:
a plan missing nine fields would take nine attempts. :func:`check_corpus` applies the
replay's rules (the same models, parsers and scoring checks, and the same messages) to all
four files and their cross-references, keeps going after each problem, and reports every one
with its file, line and field. It also computes what a new corpus needs filled in: the corpus
checksum (every run record's ``set_ref``, and the plan's) and the digest of the committed
marks (every run record's ``marks_ref``).

Reading is bounded like the replay's: the files go through the same capped readers, labels
are kept for the run cross-check (O(cases)), one run record is held at a time, and at most
``max_problems`` problems are kept (the rest are counted).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import CanonicalizationError, canonicalize
from attestation.scoring.marks import (
    mark_definition_error,
    mark_problem_message,
    metric_name_error,
)
from attestation.scoring.models import PassMark, PassMarks, Plan
from attestation.scoring.numbers import beyond_double, scored_value
from runner.corpus.checksum import CASES_FILE, scan_cases
from runner.corpus.errors import CorpusError
from runner.corpus.evaluation_files import MARKS_FILE, PLAN_FILE, RUNS_FILE
from runner.corpus.jsonio import (
    MAX_CASE_LINE_BYTES,
    MAX_RUN_LINE_BYTES,
    open_corpus_file,
    parse_line,
    parse_small_json,
    read_small_file,
)
from runner.corpus.models import Case, RunCase, RunHeader, model_problems
from runner.corpus.run_records import first_out_of_order
from runner.corpus.value_lines import line_of, value_lines

#: How many problems a report keeps by default (the rest are counted, not listed).
DEFAULT_MAX_PROBLEMS: Final = 200
#: The files of a corpus, in the order they are checked and reported.
CORPUS_FILES: Final = (PLAN_FILE, MARKS_FILE, CASES_FILE, RUNS_FILE)
_FIELD_PREFIX: Final = re.compile(r"^field '([^']*)': (.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem: where (file, line, field) and what."""

    file: str
    line: int | None
    field: str | None
    message: str

    def text(self) -> str:
        """``file:line: field 'a.b': message``, the replay's error format."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        what = self.message if self.field is None else f"field '{self.field}': {self.message}"
        return f"{where}: {what}"

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class CorpusCheck:
    """What :func:`check_corpus` found."""

    problems: tuple[Problem, ...]
    #: problems found beyond ``max_problems`` (counted, not kept)
    omitted: int
    #: the corpus checksum, when cases.jsonl is valid
    set_ref: str | None
    #: the digest of the committed marks, when marks.json is valid
    marks_ref: str | None
    case_count: int | None
    run_count: int

    @property
    def ok(self) -> bool:
        return not self.problems and not self.omitted

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "errors": [problem.to_json() for problem in self.problems],
            "omitted": self.omitted,
            "set_ref": self.set_ref,
            "marks_ref": self.marks_ref,
        }


@dataclass
class _Problems:
    limit: int
    kept: list[Problem] = field(default_factory=list)
    omitted: int = 0

    def add(self, file: str, message: str, *, line: int | None = None, at: str = "") -> None:
        """Record a problem; a message that starts with ``field 'x': `` names its field (the
        replay's messages do), prefixed with ``at`` (where its object sits in the line)."""
        field_path: str | None = None
        match = _FIELD_PREFIX.match(message)
        if match is not None:
            field_path, message = match[1], match[2]
        if at:
            field_path = f"{at}.{field_path}" if field_path else at
        if len(self.kept) < self.limit:
            self.kept.append(Problem(file, line, field_path, message))
        else:
            self.omitted += 1

    def error(self, error: CorpusError, *, at: str = "") -> None:
        self.add(error.file, error.detail, line=error.line, at=at)

    def model(
        self,
        model: type[BaseModel],
        data: object,
        file: str,
        *,
        line: int | None = None,
        at: str = "",
        lines: Mapping[tuple[str | int, ...], int] | None = None,
    ) -> bool:
        """Validate ``data`` as ``model``, recording every problem; True when it is valid.
        ``lines`` (a document's value lines) gives each field its own line."""
        problems = model_problems(model, data)
        for path, message in problems:
            where = line
            if lines is not None:
                where = line_of(lines, _path_parts(path))
            self.add(file, f"field '{path}': {message}" if path else message, line=where, at=at)
        return not problems

    def count(self) -> int:
        return len(self.kept) + self.omitted


def _reading_order(problem: Problem) -> tuple[int, int]:
    """Files in corpus order, each from top to bottom (problems of no line last)."""
    rank = CORPUS_FILES.index(problem.file) if problem.file in CORPUS_FILES else len(CORPUS_FILES)
    return rank, problem.line if problem.line is not None else 1 << 62


def _path_parts(path: str) -> tuple[str | int, ...]:
    return tuple(int(part) if part.isdigit() else part for part in path.split(".") if part)


@dataclass
class _Document:
    """A parsed plan.json or marks.json, with the line of each of its values."""

    data: dict[str, Any]
    lines: dict[tuple[str | int, ...], int]
    canonical: bytes | None


def check_corpus(directory: Path, *, max_problems: int = DEFAULT_MAX_PROBLEMS) -> CorpusCheck:
    """Check every file of the corpus in ``directory`` and their cross-references.

    Never raises for a problem of the corpus (it is reported); ``directory`` itself must be
    a readable directory (the caller checks the path).
    """
    problems = _Problems(max_problems)
    plan_doc = _document(directory, PLAN_FILE, problems)
    marks_doc = _document(directory, MARKS_FILE, problems)
    plan = _plan(plan_doc, problems)
    marks_ref = _marks(marks_doc, plan_doc, problems)
    scan = _cases(directory, plan, problems)
    set_ref = None if scan is None else scan[0]
    labels = None if scan is None else scan[1]
    if plan is not None and plan.set_ref and set_ref is not None and plan.set_ref != set_ref:
        problems.add(
            PLAN_FILE,
            f"field 'set_ref': {plan.set_ref} is not the corpus checksum {set_ref}",
            line=None if plan_doc is None else line_of(plan_doc.lines, ("set_ref",)),
        )
    run_count = _runs(directory, _RunRules(plan, set_ref, marks_ref, labels), problems)
    return CorpusCheck(
        problems=tuple(sorted(problems.kept, key=_reading_order)),
        omitted=problems.omitted,
        set_ref=set_ref,
        marks_ref=marks_ref,
        case_count=None if labels is None else len(labels),
        run_count=run_count,
    )


def _document(directory: Path, file: str, problems: _Problems) -> _Document | None:
    try:
        raw = read_small_file(directory / file)
        data = parse_small_json(raw, file)
    except CorpusError as exc:
        problems.error(exc)
        return None
    try:
        canonical: bytes | None = canonicalize(data)
    except CanonicalizationError as exc:
        problems.add(file, str(exc))
        canonical = None
    # The bytes parsed as JSON above, so they are UTF-8 (the readers refuse anything else).
    return _Document(data, value_lines(raw.decode("utf-8")), canonical)


def _plan(document: _Document | None, problems: _Problems) -> Plan | None:
    if document is None:
        return None
    valid = problems.model(Plan, document.data, PLAN_FILE, lines=document.lines)
    metrics = document.data.get("metrics")
    if isinstance(metrics, list) and (valid or not _has_field_problem(problems, "metrics")):
        for index, name in enumerate(metrics):
            if isinstance(name, str):
                message = metric_name_error(index, name)
                if message is not None:
                    where = line_of(document.lines, ("metrics", index))
                    problems.add(PLAN_FILE, message, line=where)
    return Plan.model_validate(document.data) if valid else None


def _has_field_problem(problems: _Problems, prefix: str) -> bool:
    return any(
        problem.file == PLAN_FILE and (problem.field or "").startswith(prefix)
        for problem in problems.kept
    )


def _marks(
    document: _Document | None, plan_doc: _Document | None, problems: _Problems
) -> str | None:
    if document is None:
        return None
    before = problems.count()
    problems.model(PassMarks, document.data, MARKS_FILE, lines=document.lines)
    raw_marks = document.data.get("marks")
    marks = raw_marks if isinstance(raw_marks, list) else []
    arm_ids = _plan_arm_ids(plan_doc)
    seen: set[str] = set()
    for index, raw in enumerate(marks):
        if not isinstance(raw, dict) or model_problems(PassMark, raw):
            continue  # reported above
        mark = PassMark.model_validate(raw)
        where = line_of(document.lines, ("marks", index))
        if mark.id in seen:
            problems.add(
                MARKS_FILE, f"field 'marks.{index}.id': duplicate mark {mark.id!r}", line=where
            )
        seen.add(mark.id)
        if arm_ids is not None:
            problem = mark_definition_error(mark, arm_ids)
            if problem is not None:
                message = mark_problem_message(index, problem)
                field_path = _FIELD_PREFIX.match(message)
                if field_path is not None:
                    where = line_of(document.lines, _path_parts(field_path[1]))
                problems.add(MARKS_FILE, message, line=where)
    # marks_ref only for marks that can be committed: any fix would change it.
    if problems.count() != before or document.canonical is None:
        return None
    return sha256_digest(document.canonical)


def _plan_arm_ids(plan_doc: _Document | None) -> frozenset[str] | None:
    """The plan's arm ids as written (None when they cannot be read), so that the marks are
    checked against the plan even when another part of the plan is invalid."""
    arms = None if plan_doc is None else plan_doc.data.get("arms")
    if not isinstance(arms, list):
        return None
    ids = [arm.get("arm_id") for arm in arms if isinstance(arm, dict)]
    if not ids or not all(isinstance(arm_id, str) for arm_id in ids):
        return None
    return frozenset(str(arm_id) for arm_id in ids)


def _lines(
    directory: Path, file: str, limit: int, problems: _Problems
) -> Iterator[tuple[int, bytes]]:
    """The non-empty lines of a JSON-lines file; an empty or over-long line is a problem
    (and skipped), as in the replay."""
    try:
        handle = open_corpus_file(directory / file)
    except CorpusError as exc:
        problems.error(exc)
        return
    with handle:
        number = 0
        while raw := handle.readline(limit + 1):
            number += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                problems.add(file, f"line longer than {limit} bytes", line=number)
                while raw and not raw.endswith(b"\n"):  # skip the rest of that line
                    raw = handle.readline(limit + 1)
                continue
            line = raw.removesuffix(b"\n")
            if not line.strip():
                problems.add(file, "empty line", line=number)
                continue
            yield number, line


def _record(line: bytes, file: str, number: int, problems: _Problems) -> dict[str, Any] | None:
    try:
        return parse_line(line, file, number)
    except CorpusError as exc:
        problems.error(exc)
        return None


def _cases(
    directory: Path, plan: Plan | None, problems: _Problems
) -> tuple[str, dict[str, str]] | None:
    """Check every line of cases.jsonl; the checksum and the labels when it is valid."""
    before = problems.count()
    labels: dict[str, str] = {}
    lines_of: dict[str, int] = {}
    previous: str | None = None
    groups = _GroupSplits()
    for number, line in _lines(directory, CASES_FILE, MAX_CASE_LINE_BYTES, problems):
        data = _record(line, CASES_FILE, number, problems)
        if data is None or not problems.model(Case, data, CASES_FILE, line=number):
            continue
        case = Case.model_validate(data)
        if case.case_id in lines_of:
            problems.add(
                CASES_FILE,
                f"field 'case_id': duplicate case id {case.case_id!r} "
                f"(also on line {lines_of[case.case_id]})",
                line=number,
            )
            continue
        if previous is not None and case.case_id < previous:
            problems.add(
                CASES_FILE,
                f"field 'case_id': {case.case_id!r} comes after {previous!r}; cases must be in "
                "ascending case_id order: run `attested-replay corpus normalize DIR --out DIR2` "
                "to sort the corpus",
                line=number,
            )
        previous = case.case_id if previous is None else max(previous, case.case_id)
        lines_of[case.case_id] = number
        labels[case.case_id] = case.label
        _check_frozen_set_rules(case, number, groups, problems)
        if plan is not None and plan.abstain_label is not None and case.label == plan.abstain_label:
            problems.add(
                CASES_FILE,
                f"field 'label': case {case.case_id!r} is labelled with the plan's abstain_label "
                f"{case.label!r}; a label must be an answer, not an abstention",
                line=number,
            )
    if problems.count() != before:
        return None
    if not labels:
        problems.add(CASES_FILE, "the corpus has no cases")
        return None
    try:
        # The replay's own pass: the checksum is exactly the one a run binds.
        return scan_cases(directory).checksum, labels
    except CorpusError as exc:  # a rule of the checksum pass this check does not repeat
        problems.error(exc)
        return None


def _words(text: str) -> str:
    """``text`` lowercased, each run of other characters than letters and digits one ``-``,
    with ``-`` at both ends: ``"Case_FLAG.7"`` -> ``"-case-flag-7-"``."""
    return "-" + "-".join(_WORD.findall(text.lower())) + "-"


_WORD: Final = re.compile(r"[^\W_]+")


@dataclass
class _GroupSplits:
    """The split of each group seen so far, and the line of its first case."""

    seen: dict[str, tuple[str | None, int]] = field(default_factory=dict)


def _check_frozen_set_rules(
    case: Case, number: int, groups: _GroupSplits, problems: _Problems
) -> None:
    """The evaluation design pack's frozen-set rules: "case ids are opaque and never encode
    labels" (the label's words may not appear as whole words of the id, so a reader of ids
    cannot read answers) and "near-duplicates share a group and a split" (a group never spans
    two splits, so a near-duplicate cannot sit in the set one tunes on and the one scored)."""
    if _words(case.label) in _words(case.case_id):
        problems.add(
            CASES_FILE,
            f"field 'case_id': {case.case_id!r} contains its label {case.label!r}; case ids "
            "are opaque and never encode the label",
            line=number,
        )
    if case.group is None:
        return
    first = groups.seen.setdefault(case.group, (case.split, number))
    if first[0] != case.split:
        problems.add(
            CASES_FILE,
            f"field 'split': case {case.case_id!r} of group {case.group!r} is in split "
            f"{_split_name(case.split)}, the group's first case (line {first[1]}) in "
            f"{_split_name(first[0])}; a group never spans splits",
            line=number,
        )


def _split_name(split: str | None) -> str:
    return "none" if split is None else repr(split)


@dataclass(frozen=True, slots=True)
class _RunRules:
    """What every run record is checked against (each part only when it is known)."""

    plan: Plan | None
    set_ref: str | None
    marks_ref: str | None
    labels: dict[str, str] | None

    def check_header(self, record: RunHeader, number: int, problems: _Problems) -> None:
        plan = self.plan
        if plan is not None and record.arm_id not in {arm.arm_id for arm in plan.arms}:
            problems.add(
                RUNS_FILE, f"field 'arm_id': arm {record.arm_id!r} is not in the plan", line=number
            )
        if plan is not None and record.run_index > plan.runs_per_arm:
            problems.add(
                RUNS_FILE,
                f"field 'run_index': {record.run_index} exceeds the plan's runs_per_arm "
                f"{plan.runs_per_arm}",
                line=number,
            )
        if self.set_ref is not None and record.set_ref != self.set_ref:
            problems.add(
                RUNS_FILE,
                f"field 'set_ref': {record.set_ref!r} is not the corpus checksum {self.set_ref}",
                line=number,
            )
        if self.marks_ref is not None and record.marks_ref != self.marks_ref:
            problems.add(
                RUNS_FILE,
                f"field 'marks_ref': {record.marks_ref!r} is not the committed marks "
                f"{self.marks_ref}",
                line=number,
            )


def _runs(directory: Path, rules: _RunRules, problems: _Problems) -> int:
    """Check every run record; the number of records read."""
    seen_runs: dict[tuple[str, int], int] = {}
    previous: tuple[str, int] | None = None
    count = 0
    for number, line in _lines(directory, RUNS_FILE, MAX_RUN_LINE_BYTES, problems):
        count += 1
        data = _record(line, RUNS_FILE, number, problems)
        if data is None:
            continue
        cases = data.pop("cases", None)
        if cases is None:
            problems.add(RUNS_FILE, "field 'cases': Field required", line=number)
        elif not isinstance(cases, list) or not cases:
            problems.add(RUNS_FILE, "field 'cases': must be a non-empty list", line=number)
            cases = None
        if not problems.model(RunHeader, data, RUNS_FILE, line=number):
            for index, raw in enumerate(cases or ()):
                problems.model(RunCase, raw, RUNS_FILE, line=number, at=f"cases.{index}")
            continue
        record = RunHeader.model_validate(data)
        key = (record.arm_id, record.run_index)
        rules.check_header(record, number, problems)
        if key in seen_runs:
            problems.add(
                RUNS_FILE,
                f"field 'run_index': duplicate run {record.arm_id}/{record.run_index} "
                f"(also on line {seen_runs[key]})",
                line=number,
            )
        elif previous is not None and key < previous:
            problems.add(
                RUNS_FILE,
                f"field 'arm_id': run {record.arm_id}/{record.run_index} comes after "
                f"{previous[0]}/{previous[1]}; runs must be in ascending (arm_id, run_index) "
                "order: run `attested-replay corpus normalize DIR --out DIR2`",
                line=number,
            )
        seen_runs.setdefault(key, number)
        previous = key if previous is None else max(previous, key)
        if cases is not None and rules.labels is not None:
            _check_run_cases(record, cases, rules.labels, number, problems)
    plan = rules.plan
    if plan is not None:
        for arm in plan.arms:
            for index in range(1, plan.runs_per_arm + 1):
                if (arm.arm_id, index) not in seen_runs:
                    problems.add(
                        RUNS_FILE,
                        f"arm {arm.arm_id!r} has no run record for run_index {index} "
                        f"(the plan asks for {plan.runs_per_arm} runs per arm)",
                    )
    return count


def _check_run_cases(
    record: RunHeader,
    cases: list[Any],
    labels: dict[str, str],
    number: int,
    problems: _Problems,
) -> None:
    seen: set[str] = set()
    ids: list[str] = []
    costs: list[Decimal] = []
    for index, raw in enumerate(cases):
        at = f"cases.{index}"
        if not problems.model(RunCase, raw, RUNS_FILE, line=number, at=at):
            # Its problem is reported: the case it names is not also reported missing.
            if isinstance(raw, dict) and isinstance(raw.get("case_id"), str):
                seen.add(raw["case_id"])
            continue
        entry = RunCase.model_validate(raw)
        case_id = entry.case_id
        ids.append(case_id)
        if entry.cost_usd is not None:
            costs.append(scored_value(raw["cost_usd"]))
        if case_id not in labels:
            problems.add(
                RUNS_FILE,
                f"field '{at}.case_id': case {case_id!r} is not in cases.jsonl",
                line=number,
            )
        elif case_id in seen:
            problems.add(
                RUNS_FILE,
                f"field '{at}.case_id': duplicate case {case_id!r} in this run",
                line=number,
            )
        seen.add(case_id)
    total = sum(costs, Decimal(0))  # 28 digits are enough to compare with the bound
    if beyond_double(total):
        problems.add(
            RUNS_FILE,
            f"field 'cases': the known costs of run {record.arm_id}/{record.run_index} sum to "
            f"{total:.6E} USD, beyond the largest double (about 1.8E+308): no report can "
            "state that total",
            line=number,
        )
    missing = [case_id for case_id in labels if case_id not in seen]
    if missing:
        problems.add(
            RUNS_FILE,
            f"field 'cases': run {record.arm_id}/{record.run_index} is missing "
            f"{len(missing)} case(s), first {min(missing)!r}",
            line=number,
        )
    elif len(ids) == len(cases) == len(labels):
        # Every case once: they must also be in cases.jsonl order (labels keeps file order).
        order = first_out_of_order(ids, list(labels))
        if order is not None:
            problems.add(RUNS_FILE, order, line=number)


def require_valid_corpus(directory: Path) -> CorpusCheck:
    """:func:`check_corpus` for commands that go on only with a valid corpus (``corpus
    checksum``, ``corpus export``): the first problem as a :class:`CorpusError` naming its
    file, line and field, and how many there are."""
    report = check_corpus(directory, max_problems=1)
    if report.ok:
        return report
    first = report.problems[0]
    what = first.message if first.field is None else f"field '{first.field}': {first.message}"
    total = len(report.problems) + report.omitted
    more = (
        "" if total == 1 else f" (and {total - 1} more: `attested-replay corpus check` lists them)"
    )
    raise CorpusError(first.file, what + more, line=first.line)
