"""Corpus errors: every message names the file, the line (when there is one) and the field."""

from __future__ import annotations

from runner.errors import InputError


class CorpusError(InputError):
    """A corpus file is malformed, inconsistent or too large."""

    def __init__(self, file: str, message: str, *, line: int | None = None) -> None:
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {message}")
        self.file = file
        self.line = line
        #: The message without its place (``corpus check`` reports file and line apart).
        self.detail = message


class CorpusOrderError(CorpusError):
    """``cases.jsonl`` or ``runs.jsonl`` is not in the order the checksum needs."""
