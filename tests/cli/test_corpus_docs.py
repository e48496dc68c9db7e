"""docs/replay.md is enough to write a corpus: its field tables match the models field for
field, and a corpus built from those tables alone (no example copied) checks and replays.

The builder below reads only the tables of docs/replay.md: each row's name, whether it is
required, its type in the documented vocabulary, and, for the cross-references the meaning
column names ("a plan arm", "a case of cases.jsonl", "a mark metric from the pass-mark table",
"names from the metric table"), the table it points to. The two references a corpus must
carry come from `corpus check`, as the docs say.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
import pytest
from pydantic import BaseModel

from attestation.scoring.models import Arm, PassMark, PassMarks, Plan, Scoring
from runner.cli import main
from runner.corpus.models import Case, RunCase, RunRecord, Usage

REPO = Path(__file__).parents[2]
#: The docs write ranges with an en dash (U+2013), as in "1 to 300 characters" written short.
DASH = "\N{EN DASH}"
DOC = (REPO / "docs" / "replay.md").read_text(encoding="utf-8")

#: The table of each object, by the heading the docs give it.
MODELS: dict[str, type[BaseModel]] = {
    "plan.json": Plan,
    "arm": Arm,
    "scoring": Scoring,
    "marks.json": PassMarks,
    "mark": PassMark,
    "cases.jsonl": Case,
    "runs.jsonl": RunRecord,
    "usage": Usage,
    "case result": RunCase,
}


@dataclass(frozen=True)
class Row:
    field: str
    required: bool
    type: str
    meaning: str


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _tables(text: str) -> dict[str, list[list[str]]]:
    """Every markdown table under a heading, keyed by the heading's name (`plan.json`,
    "arm (an element of `arms`)" -> "arm")."""
    tables: dict[str, list[list[str]]] = {}
    heading = ""
    for line in text.splitlines():
        match = re.match(r"^#{2,4} (.+)$", line)
        if match:
            heading = re.sub(r"\s*\(.*\)$", "", match[1]).strip("` ")
            continue
        if line.startswith("|") and not set(line) <= set("|-: "):
            tables.setdefault(heading, []).append(_cells(line))
    return tables


TABLES = _tables(DOC)


def field_rows(name: str) -> list[Row]:
    header, *rows = TABLES[name]
    assert header == ["field", "required", "type", "meaning"], name
    return [
        Row(
            cells[0].strip("`"),
            cells[1] == "yes",
            cells[2].replace("`", ""),
            cells[3].replace("`", ""),
        )
        for cells in rows
    ]


def first_column(heading_prefix: str) -> list[str]:
    """The names in the first column of the table whose header starts with ``heading_prefix``
    (the metric table, the pass-mark table)."""
    for rows in TABLES.values():
        if rows and rows[0][0] == heading_prefix and len(rows[0]) > 1:
            return [row[0].strip("`") for row in rows[1:]]
    raise AssertionError(f"no table starting with {heading_prefix!r}")


# -- the tables match the models -----------------------------------------------------------------


def _literal_values(annotation: object) -> list[object] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if get_origin(annotation) in (Union, type(int | None)):
        for argument in get_args(annotation):
            values = _literal_values(argument)
            if values is not None:
                return values
    return None


def _bound(metadata: list[object], kind: type, attribute: str) -> object:
    for item in metadata:
        if isinstance(item, kind):
            return getattr(item, attribute)
    return None


@pytest.mark.parametrize("name", list(MODELS))
def test_each_table_lists_exactly_the_model_fields(name: str) -> None:
    model = MODELS[name]
    rows = field_rows(name)
    assert [row.field for row in rows] == list(model.model_fields), name
    for row in rows:
        info = model.model_fields[row.field]
        assert row.required == info.is_required(), (name, row.field)
        values = _literal_values(info.annotation)
        if values is not None:
            written = re.search(r"one of: ([^;]+)", row.type)
            assert written is not None, (name, row.field)
            shown = [json.dumps(value) if isinstance(value, bool) else value for value in values]
            assert written[1].split(", ") == shown, (name, row.field)
        low = _bound(info.metadata, annotated_types.MinLen, "min_length")
        high = _bound(info.metadata, annotated_types.MaxLen, "max_length")
        ge = _bound(info.metadata, annotated_types.Ge, "ge")
        le = _bound(info.metadata, annotated_types.Le, "le")
        if row.type.startswith("string") and high is not None:
            expected = f"{low}{DASH}{high} characters" if low else f"up to {high} characters"
            assert expected in row.type, (name, row.field, row.type)
        if row.type.startswith("list of"):
            expected = f"list of {low}{DASH}{high} " if high else f"list of at least {low} "
            assert row.type.startswith(expected), (name, row.field, row.type)
        if ge is not None:
            expected = f"{ge}{DASH}{le}" if le is not None else f"\N{GREATER-THAN OR EQUAL TO} {ge}"
            assert expected in row.type, (name, row.field, row.type)
        assert ("or null" in row.type) == (
            type(None) in get_args(info.annotation) and "not null" not in row.type
        ) or row.type == "any JSON value", (name, row.field, row.type)


def test_the_docs_reference_nothing_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.md", "*.py", "*.toml", "*.yaml", "*.json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    patterns = ("../shared", "design/snp-attestation", "design/coco-runtime", "design notes")
    offending = [
        f"{name}: {pattern}"
        for name in tracked
        if name != "tests/cli/test_corpus_docs.py"
        for pattern in patterns
        if pattern in (REPO / name).read_text(encoding="utf-8", errors="replace")
    ]
    assert offending == []


# -- a corpus from the tables alone ---------------------------------------------------------------


class Builder:
    """Values of the documented types; cross-references resolved as the meanings say."""

    def __init__(self) -> None:
        self.arm_ids: list[str] = []
        self.case_ids: list[str] = []
        self.counter = 0

    def value(self, row: Row, table: str) -> Any:
        kind, meaning = row.type, row.meaning
        self.counter += 1
        if "a plan arm" in meaning or meaning.startswith("the plan arm"):
            return self.arm_ids[0] if row.field != "baseline" else self.arm_ids[1]
        if "a case of cases.jsonl" in meaning:
            raise AssertionError("case results are built per case")
        if "a mark metric" in meaning:
            # A mark metric that needs nothing but a threshold, per the pass-mark table.
            return next(name for name, needs in _pass_mark_needs() if needs == "threshold")
        if kind.startswith("one of: "):
            return _scalar(kind.removeprefix("one of: ").split(";")[0].split(", ")[0])
        if kind.startswith("list of "):
            match = re.match(rf"list of (?:at least )?(\d+)(?:{DASH}\d+)? (.+)$", kind)
            assert match is not None, kind
            count, element = int(match[1]), match[2]
            if element == "metric name":
                return first_column("metric")[1 : 1 + count]
            return [self.object(element, index) for index in range(count)]
        if kind.startswith("string of letters"):
            identifier = f"arm-{len(self.arm_ids)}"
            self.arm_ids.append(identifier)
            return identifier
        if kind.startswith("string of lowercase letters"):
            identifier = f"c-{len(self.case_ids):03d}"
            self.case_ids.append(identifier)
            return identifier
        if kind.startswith("date YYYY-MM-DD"):
            return "2026-02-01"
        if kind.startswith("string, up to"):
            return ""
        if kind.startswith("string"):
            return f"{row.field} {self.counter}"
        if kind.startswith(("integer", "number")):
            low = re.search(r"(\d+)", kind)
            return int(low[1]) if low else 0
        if kind in MODEL_NAMES:
            return self.object(kind, 0)
        raise AssertionError(f"{table}.{row.field}: undocumented type {kind!r}")

    def object(self, table: str, index: int) -> dict[str, Any]:
        del index
        rows = field_rows(table)
        built = {row.field: self.value(row, table) for row in rows if row.required}
        # "for the mark metrics that need one": the pass-mark table's "needs" column says which.
        needs = dict(_pass_mark_needs()).get(str(built.get("metric")), "")
        for row in rows:
            if "for the mark metrics that need one" in row.meaning and row.field in needs:
                built[row.field] = 50 if row.field == "threshold" else self.arm_ids[1]
        return built


MODEL_NAMES = set(MODELS)


def _scalar(text: str) -> object:
    return json.loads(text) if text in {"true", "false", "null"} else text


def _pass_mark_needs() -> list[tuple[str, str]]:
    """(mark metric, what it needs) from the pass-mark table."""
    for rows in TABLES.values():
        if rows and rows[0][:2] == ["metric", "needs"]:
            return [(row[0].strip("`"), row[1]) for row in rows[1:]]
    raise AssertionError("no pass-mark table")


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def _check(capsys: pytest.CaptureFixture[str], corpus: Path) -> tuple[int, dict[str, Any]]:
    code = main(["corpus", "check", str(corpus), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _runs(
    builder: Builder, plan: dict[str, Any], refs: tuple[str, str]
) -> Iterator[dict[str, Any]]:
    run_rows = field_rows("runs.jsonl")
    case_rows = [row for row in field_rows("case result") if row.required]
    for arm_id in builder.arm_ids:
        for run_index in range(1, plan["runs_per_arm"] + 1):
            record: dict[str, Any] = {}
            for row in run_rows:
                if row.field == "arm_id":
                    record[row.field] = arm_id
                elif row.field == "run_index":
                    record[row.field] = run_index
                elif row.field == "set_ref":
                    record[row.field] = refs[0]
                elif row.field == "marks_ref":
                    record[row.field] = refs[1]
                elif row.field == "cases":
                    record[row.field] = [
                        {
                            row.field: case_id
                            if "a case of cases.jsonl" in row.meaning
                            else builder.value(row, "case result")
                            for row in case_rows
                        }
                        for case_id in builder.case_ids
                    ]
                else:
                    record[row.field] = builder.value(row, "runs.jsonl")
            yield record


def test_a_corpus_built_from_the_field_tables_alone_checks_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    builder = Builder()
    plan = builder.object("plan.json", 0)
    assert builder.arm_ids, "the plan table describes the arms"
    plan["arms"][0]["role"] = "baseline"  # "at least one arm has role baseline"
    marks = builder.object("marks.json", 0)
    cases = [builder.object("cases.jsonl", index) for index in range(3)]
    corpus = tmp_path / "from-docs"
    corpus.mkdir()
    (corpus / "plan.json").write_text(json.dumps(plan, indent=2))
    (corpus / "marks.json").write_text(json.dumps(marks, indent=2))
    (corpus / "cases.jsonl").write_text(_jsonl(cases))
    placeholder = ("set_ref from corpus check", "marks_ref from corpus check")
    (corpus / "runs.jsonl").write_text(_jsonl(list(_runs(builder, plan, placeholder))))

    # As the docs say: corpus check names what is wrong and prints the two references.
    code, report = _check(capsys, corpus)
    assert code == 1, report
    assert {(error["file"], error["field"]) for error in report["errors"]} == {
        ("runs.jsonl", "set_ref"),
        ("runs.jsonl", "marks_ref"),
    }
    refs = (report["set_ref"], report["marks_ref"])
    (corpus / "runs.jsonl").write_text(_jsonl(list(_runs(builder, plan, refs))))
    code, report = _check(capsys, corpus)
    assert (code, report["ok"], report["errors"]) == (0, True, [])

    # And it replays: every mark the docs' types allowed is scored.
    assert main(["score", str(corpus)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["case_count"] == 3
    assert result["set_checksum"] == refs[0]
    assert [mark["id"] for mark in result["marks"]] == [marks["marks"][0]["id"]]
    assert [arm["arm_id"] for arm in result["arms"]] == builder.arm_ids


def test_docs_python_example_of_corpus_check_runs() -> None:
    """The commands the docs show for corpus authoring exist with these options."""
    for command in ("corpus new", "corpus check"):
        assert f"attested-replay {command}" in DOC
    completed = subprocess.run(
        [sys.executable, "-m", "runner", "corpus", "check", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0
    assert "--max-errors N" in completed.stdout
    assert "--json" in completed.stdout
