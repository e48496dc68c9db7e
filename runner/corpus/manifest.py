"""The frozen-set manifest (the pack's frozen-set-manifest template, extended).

Per case: ``input_sha256`` = SHA-256 hex of RFC 8785 JSON of ``input`` (``null`` when the
case has none), ``label_sha256`` = SHA-256 hex of RFC 8785 JSON of the label string.
Extensions beyond the template: ``set_checksum`` (the corpus checksum) and ``case_count``.
The manifest is built in memory (it lists every case).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import JsonValue

from attestation.encoding.canonical import canonicalize
from runner.corpus.checksum import CASES_FILE, scan_cases
from runner.corpus.errors import CorpusError
from runner.corpus.jsonio import MAX_CASE_LINE_BYTES, iter_lines, open_corpus_file, parse_line
from runner.corpus.models import Case, validate_record


def build_manifest(
    corpus_dir: Path, *, set_id: str | None, frozen_at: str, generator_ref: str
) -> dict[str, JsonValue]:
    scan = scan_cases(corpus_dir)  # validates every case and their order first
    entries: list[JsonValue] = []
    with open_corpus_file(corpus_dir / CASES_FILE) as handle:
        for number, line in iter_lines(handle, CASES_FILE, MAX_CASE_LINE_BYTES):
            data = parse_line(line, CASES_FILE, number)
            case = validate_record(Case, data, CASES_FILE, number)
            if case.split is None or case.group is None:
                missing = "split" if case.split is None else "group"
                raise CorpusError(
                    CASES_FILE,
                    f"field '{missing}': the frozen-set manifest needs a {missing} on every case",
                    line=number,
                )
            entries.append(
                {
                    "case_id": case.case_id,
                    "input_sha256": hashlib.sha256(canonicalize(data.get("input"))).hexdigest(),
                    "label_sha256": hashlib.sha256(canonicalize(case.label)).hexdigest(),
                    "split": case.split,
                    "group": case.group,
                }
            )
    return {
        "set_id": set_id or "set-" + scan.checksum.removeprefix("sha256:")[:16],
        "frozen_at": frozen_at,
        "generator_ref": generator_ref,
        "cases": entries,
        "label_access": "scorer_only",
        "id_check": "case ids are opaque: lowercase letters, digits and '-' only",
        "set_checksum": scan.checksum,
        "case_count": scan.case_count,
    }
