"""Where each value of a JSON document starts: its line, for messages about small files.

``plan.json`` and ``marks.json`` are multi-line documents a person edits; an error about
``arms.1.role`` is only useful with the line it is on. :func:`value_lines` walks text that
``json.loads`` has already accepted (so it need not diagnose anything) and records, for the
path of every value (object keys and array indices), the line its value starts on; an object
key's path also records the line of the key itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

Path = tuple[str | int, ...]

_SPACE: Final = re.compile(r"[ \t\n\r]*")
# Possessive repeats: a string matches one way only; plain ones keep backtracking state for
# every character of a long string.
_STRING: Final = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_SCALAR: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")


class _Walker:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines: dict[Path, int] = {}
        self._newlines = [index for index, char in enumerate(text) if char == "\n"]

    def line_at(self, offset: int) -> int:
        low, high = 0, len(self._newlines)
        while low < high:  # the number of newlines before offset, plus one
            middle = (low + high) // 2
            if self._newlines[middle] < offset:
                low = middle + 1
            else:
                high = middle
        return low + 1

    def skip(self, offset: int) -> int:
        match = _SPACE.match(self.text, offset)
        return offset if match is None else match.end()

    def value(self, offset: int, path: Path) -> int:
        offset = self.skip(offset)
        self.lines.setdefault(path, self.line_at(offset))
        char = self.text[offset]
        if char == "{":
            return self._object(offset + 1, path)
        if char == "[":
            return self._array(offset + 1, path)
        match = (_STRING if char == '"' else _SCALAR).match(self.text, offset)
        if match is None:
            raise ValueError(f"not JSON at offset {offset}")
        return match.end()

    def _object(self, offset: int, path: Path) -> int:
        offset = self.skip(offset)
        if self.text[offset] == "}":
            return offset + 1
        while True:
            offset = self.skip(offset)
            key_line = self.line_at(offset)
            match = _STRING.match(self.text, offset)
            if match is None:
                raise ValueError(f"not a JSON key at offset {offset}")
            key = json.loads(match.group())
            offset = self.skip(match.end()) + 1  # the colon
            self.lines[(*path, key)] = key_line
            offset = self.value(offset, (*path, key))
            offset = self.skip(offset)
            if self.text[offset] == "}":
                return offset + 1
            offset += 1  # the comma

    def _array(self, offset: int, path: Path) -> int:
        offset = self.skip(offset)
        if self.text[offset] == "]":
            return offset + 1
        index = 0
        while True:
            offset = self.value(offset, (*path, index))
            index += 1
            offset = self.skip(offset)
            if self.text[offset] == "]":
                return offset + 1
            offset += 1


def value_lines(text: str) -> dict[Path, int]:
    """Path -> line of every key and value in ``text`` (valid JSON); the root is ``()``."""
    walker = _Walker(text)
    walker.value(0, ())
    return walker.lines


def line_of(lines: Mapping[Path, int], path: Path) -> int | None:
    """The line of ``path``, else of its closest enclosing value (a missing key is reported
    on the line of the object that lacks it)."""
    for end in range(len(path), -1, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None
