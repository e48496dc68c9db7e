"""Bounded JSON reading: size caps, line numbers, no NaN, no duplicate keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

from attestation.files import UTF8_BOM, FileTooLargeError, open_regular, read_regular
from runner.corpus.errors import CorpusError
from runner.corpus.numbers import NumberRangeError, parse_float, parse_int

#: One case line; a case is a label and a modest input, never a document.
MAX_CASE_LINE_BYTES: Final = 1 << 20
#: One run record (all of a run's per-case results live on one line).
MAX_RUN_LINE_BYTES: Final = 1 << 30
#: ``plan.json`` and ``marks.json``.
MAX_SMALL_FILE_BYTES: Final = 1 << 20


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json(text: bytes | str) -> object:
    """Parse JSON refusing NaN/Infinity, duplicate keys and numbers no double holds
    (``runner.corpus.numbers``: every number is read once, as the double it denotes).

    Raises ``ValueError`` (``json.JSONDecodeError``, ``NumberRangeError`` or our own) for the
    caller to place.
    """
    return json.loads(
        text,
        parse_float=parse_float,
        parse_int=parse_int,
        parse_constant=_reject_constant,
        object_pairs_hook=_unique_pairs,
    )


def _json_problem(exc: ValueError | RecursionError) -> str:
    if isinstance(exc, NumberRangeError):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "invalid JSON: nested too deeply"
    return f"invalid JSON: {exc}"


def iter_lines(handle: BinaryIO, file: str, max_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, line_without_newline)``; a final line may lack its newline."""
    number = 0
    while True:
        raw = handle.readline(max_bytes + 1)
        if not raw:
            return
        number += 1
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            raise CorpusError(file, f"line longer than {max_bytes} bytes", line=number)
        line = raw.removesuffix(b"\n")
        if not line.strip():
            raise CorpusError(file, "empty line", line=number)
        yield number, line


def parse_line(line: bytes, file: str, number: int) -> dict[str, Any]:
    """One JSON-lines record, which must be an object."""
    try:
        value = parse_json(line)
    except (ValueError, RecursionError) as exc:
        raise CorpusError(file, _json_problem(exc), line=number) from exc
    if not isinstance(value, dict):
        raise CorpusError(file, "a line must be a JSON object", line=number)
    return value


def read_small_file(path: Path) -> bytes:
    """The bytes of ``plan.json`` / ``marks.json``: a regular file (never a FIFO or device,
    which would block or never end), refused past the size cap or with a byte order mark."""
    file = path.name
    try:
        data = read_regular(path, MAX_SMALL_FILE_BYTES)
    except FileNotFoundError as exc:
        raise CorpusError(file, "file is missing") from exc
    except FileTooLargeError as exc:
        raise CorpusError(file, f"file larger than {MAX_SMALL_FILE_BYTES} bytes") from exc
    except OSError as exc:
        raise CorpusError(file, f"cannot read: {exc.strerror}") from exc
    _refuse_bom(data, file)
    return data


def _refuse_bom(start: bytes, file: str) -> None:
    if start.startswith(UTF8_BOM):
        raise CorpusError(
            file,
            "starts with a UTF-8 byte order mark; corpus files are plain UTF-8 without one",
            line=1,
        )


def read_small_json(path: Path) -> dict[str, Any]:
    """``plan.json`` / ``marks.json``: a capped JSON object."""
    return parse_small_json(read_small_file(path), path.name)


def parse_small_json(data: bytes, file: str) -> dict[str, Any]:
    """The JSON object in ``data``, the bytes of the small file ``file``."""
    try:
        value = parse_json(data)
    except (ValueError, RecursionError) as exc:
        raise CorpusError(file, _json_problem(exc)) from exc
    if not isinstance(value, dict):
        raise CorpusError(file, "the file must hold a JSON object")
    return value


def require_corpus_dir(corpus_dir: Path) -> None:
    if not corpus_dir.is_dir():
        raise CorpusError(
            str(corpus_dir), "not a corpus directory (it does not exist or is a file)"
        )


def open_corpus_file(path: Path) -> BinaryIO:
    """A corpus file opened for reading: a regular file (a symbolic link to one is fine; a
    FIFO, device, socket or directory is refused without blocking), not starting with a
    byte order mark."""
    try:
        handle = open_regular(path)
    except FileNotFoundError as exc:
        raise CorpusError(path.name, "file is missing") from exc
    except OSError as exc:
        raise CorpusError(path.name, f"cannot read: {exc.strerror}") from exc
    try:
        _refuse_bom(handle.read(len(UTF8_BOM)), path.name)
        handle.seek(0)
    except BaseException:
        handle.close()
        raise
    return handle
