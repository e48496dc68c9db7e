"""The labels scoring needs, in a byte per case: every case's label by its rank in
``cases.jsonl``, and a digest of the case ids in order.

Run entries are scored in ``cases.jsonl`` order (ascending ``case_id``, the order the
checksum already requires), so the k-th entry of a run is scored against the k-th label and
no ``case_id -> label`` mapping is kept: a label is a small code (``array('B')``, one byte
while there are at most 256 distinct labels) into the list of distinct labels. Whether a
run's entries are exactly the corpus cases in that order is checked by comparing a digest
of their ids with :attr:`CaseLabels.ids_digest` (and their count with the case count).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Sequence
from typing import Final

#: The framing of the id digest: every id followed by a newline (ids never hold one).
ID_SEPARATOR: Final = b"\n"


class CaseLabels:
    """Labels by rank, built while ``cases.jsonl`` is scanned in order."""

    def __init__(self) -> None:
        #: The distinct labels, in order of first appearance.
        self.names: list[str] = []
        #: ``codes[k]`` is the index in :attr:`names` of the label of the case of rank k.
        self.codes = array("B")
        self._code_of: dict[str, int] = {}
        self._code_of_ascii: dict[bytes, int] = {}
        self._ids = hashlib.sha256()

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def ids_digest(self) -> bytes:
        """SHA-256 over every case id in order, each followed by a newline."""
        return self._ids.digest()

    def label(self, rank: int) -> str:
        return self.names[self.codes[rank]]

    def labels(self, first: int, end: int) -> list[str]:
        """The labels of ranks ``first`` to ``end - 1``."""
        return list(map(self.names.__getitem__, self.codes[first:end]))

    def add(self, ids: Sequence[str], labels: Sequence[str]) -> None:
        """The next cases, in order."""
        self._ids.update("\n".join(ids).encode("ascii"))  # ids are ASCII (Case's pattern)
        self._ids.update(ID_SEPARATOR)
        try:
            self._extend(map(self._code_of.__getitem__, labels))
        except KeyError:
            self._extend(map(self._code, labels))

    def add_ascii(self, ids: Sequence[bytes], labels: Sequence[bytes]) -> None:
        """The next cases, ids and labels as the ASCII bytes of a canonical line."""
        self._ids.update(ID_SEPARATOR.join(ids))
        self._ids.update(ID_SEPARATOR)
        try:
            self._extend(map(self._code_of_ascii.__getitem__, labels))
        except KeyError:
            self._extend(self._code(label.decode("ascii"), label) for label in labels)

    def _extend(self, codes: Iterable[int]) -> None:
        # Materialized first: a KeyError half-way must not leave half the codes appended.
        values = list(codes)
        size = len(self.codes)
        try:
            self.codes.extend(values)
        except OverflowError:  # the 257th distinct label: four bytes per case from now on
            del self.codes[size:]
            self.codes = array("I", self.codes)
            self.codes.extend(values)

    def _code(self, label: str, ascii_label: bytes | None = None) -> int:
        code = self._code_of.get(label)
        if code is None:
            code = len(self.names)
            self.names.append(label)
            self._code_of[label] = code
            if label.isascii():
                self._code_of_ascii[label.encode("ascii")] = code
        if ascii_label is not None:
            self._code_of_ascii[ascii_label] = code
        return code
