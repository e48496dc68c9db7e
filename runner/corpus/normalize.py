"""Rewrite a corpus canonically and sorted (``attested-replay corpus normalize``).

``cases.jsonl`` is sorted by an external merge sort when its canonical lines do not fit the
memory budget: sorted runs are spilled to temporary files and merged (at most
``MERGE_FAN_IN`` files at a time). Run records are reordered by ``(arm_id, run_index)``
with their cases sorted by ``case_id``; one record is in memory at a time.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from attestation.encoding.canonical import CanonicalizationError, canonicalize
from runner.corpus.checksum import CASES_FILE, scan_cases
from runner.corpus.errors import CorpusError
from runner.corpus.evaluation_files import MARKS_FILE, PLAN_FILE, RUNS_FILE
from runner.corpus.jsonio import (
    MAX_CASE_LINE_BYTES,
    MAX_RUN_LINE_BYTES,
    iter_lines,
    open_corpus_file,
    parse_line,
    read_small_json,
    require_corpus_dir,
)
from runner.corpus.models import Case, RunRecord, validate_record
from runner.errors import UsageError

DEFAULT_MEMORY_BUDGET: Final = 256 << 20
MERGE_FAN_IN: Final = 64
#: Rough per-line bookkeeping cost (list slot, bytes header, key) charged to the budget.
_LINE_OVERHEAD: Final = 120
_KEY_START: Final = len(b'{"case_id":"')


@dataclass(frozen=True, slots=True)
class NormalizeResult:
    checksum: str
    case_count: int
    #: sorted runs written to disk; 0 means the cases were sorted in memory
    spill_files: int


def normalize_corpus(
    source: Path, target: Path, *, memory_budget: int = DEFAULT_MEMORY_BUDGET
) -> NormalizeResult:
    require_corpus_dir(source)
    if memory_budget <= 0:
        raise UsageError("--memory-budget must be positive")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} exists and is not an empty directory")
    if target.resolve() == source.resolve():
        raise UsageError("--out must differ from the source corpus")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".normalize-", dir=target) as scratch:
        spill_count = _sort_cases(source, target, Path(scratch), memory_budget)
        _sort_runs(source, target)
    for name in (PLAN_FILE, MARKS_FILE):
        _write_lines(target / name, [canonicalize(read_small_json(source / name))])
    scan = scan_cases(target)
    return NormalizeResult(scan.checksum, scan.case_count, spill_count)


def _case_key(line: bytes) -> bytes:
    # "case_id" is the first key of every canonical case and ids need no escaping.
    return line[_KEY_START : line.index(b'"', _KEY_START)]


def _canonical_cases(source: Path) -> Iterator[tuple[int, bytes]]:
    with open_corpus_file(source / CASES_FILE) as handle:
        for number, line in iter_lines(handle, CASES_FILE, MAX_CASE_LINE_BYTES):
            data = parse_line(line, CASES_FILE, number)
            validate_record(Case, data, CASES_FILE, number)
            try:
                yield number, canonicalize(data)
            except CanonicalizationError as exc:
                raise CorpusError(CASES_FILE, str(exc), line=number) from exc


def _sort_cases(source: Path, target: Path, scratch: Path, budget: int) -> int:
    spills: list[Path] = []
    buffer: list[bytes] = []
    used = 0
    for _number, canonical in _canonical_cases(source):
        buffer.append(canonical)
        used += len(canonical) + _LINE_OVERHEAD
        if used >= budget:
            spills.append(_spill(scratch, len(spills), sorted(buffer, key=_case_key)))
            buffer = []
            used = 0
    if not spills:
        _write_lines(target / CASES_FILE, _unique(sorted(buffer, key=_case_key)))
        return 0
    if buffer:
        spills.append(_spill(scratch, len(spills), sorted(buffer, key=_case_key)))
    buffer = []
    spill_count = len(spills)
    generation = 0
    while len(spills) > MERGE_FAN_IN:  # multi-pass merge keeps open files bounded
        generation += 1
        merged: list[Path] = []
        for start in range(0, len(spills), MERGE_FAN_IN):
            group = spills[start : start + MERGE_FAN_IN]
            path = scratch / f"merge-{generation}-{start}.jsonl"
            with _open_all(group) as handles, path.open("wb") as out:
                out.writelines(_merge(handles))
            for used_path in group:
                used_path.unlink()
            merged.append(path)
        spills = merged
    with _open_all(spills) as handles:
        _write_lines(target / CASES_FILE, _unique(_merge(handles)), newline=False)
    return spill_count


def _spill(scratch: Path, index: int, lines: list[bytes]) -> Path:
    path = scratch / f"spill-{index}.jsonl"
    with path.open("wb") as out:
        for line in lines:
            out.write(line)
            out.write(b"\n")
    return path


@contextlib.contextmanager
def _open_all(paths: list[Path]) -> Iterator[list[IO[bytes]]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(path.open("rb")) for path in paths]


def _merge(handles: list[IO[bytes]]) -> Iterator[bytes]:
    return heapq.merge(*handles, key=_case_key)


def _unique(lines: Iterable[bytes]) -> Iterator[bytes]:
    previous: bytes | None = None
    for line in lines:
        key = _case_key(line)
        if key == previous:
            raise CorpusError(
                CASES_FILE, f"field 'case_id': duplicate case id {key.decode('ascii')!r}"
            )
        previous = key
        yield line


def _sort_runs(source: Path, target: Path) -> None:
    # Pass 1 keeps only (key, offset) per record; pass 2 rewrites them in order.
    index: list[tuple[tuple[str, int], int, int]] = []
    seen: set[tuple[str, int]] = set()
    with open_corpus_file(source / RUNS_FILE) as handle:
        offset = 0
        number = 0
        while True:
            raw = handle.readline(MAX_RUN_LINE_BYTES + 1)
            if not raw:
                break
            number += 1
            if len(raw) > MAX_RUN_LINE_BYTES:
                raise CorpusError(
                    RUNS_FILE, f"line longer than {MAX_RUN_LINE_BYTES} bytes", line=number
                )
            if not raw.strip():
                raise CorpusError(RUNS_FILE, "empty line", line=number)
            record = validate_record(
                RunRecord, parse_line(raw, RUNS_FILE, number), RUNS_FILE, number
            )
            key = (record.arm_id, record.run_index)
            if key in seen:
                raise CorpusError(
                    RUNS_FILE, f"field 'run_index': duplicate run {key[0]}/{key[1]}", line=number
                )
            seen.add(key)
            index.append((key, offset, number))
            offset += len(raw)
    index.sort()

    def records() -> Iterator[bytes]:
        with open_corpus_file(source / RUNS_FILE) as handle:
            for _key, offset, number in index:
                handle.seek(offset)
                data: dict[str, Any] = parse_line(
                    handle.readline(MAX_RUN_LINE_BYTES + 1), RUNS_FILE, number
                )
                data["cases"] = sorted(data["cases"], key=lambda case: case["case_id"])
                try:
                    yield canonicalize(data)
                except CanonicalizationError as exc:
                    raise CorpusError(RUNS_FILE, str(exc), line=number) from exc

    _write_lines(target / RUNS_FILE, records())


def _write_lines(path: Path, lines: Iterable[bytes], *, newline: bool = True) -> None:
    """Stream ``lines`` into ``path`` atomically (temporary file, fsync, rename)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for line in lines:
                out.write(line)
                if newline:
                    out.write(b"\n")
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


__all__ = ["DEFAULT_MEMORY_BUDGET", "NormalizeResult", "normalize_corpus"]
