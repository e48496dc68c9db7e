"""The labels scoring needs, in a few bits per case: every case's label by its rank in
``cases.jsonl``, and a digest of the case ids in order.

Run entries are scored in ``cases.jsonl`` order (ascending ``case_id``, the order the
checksum already requires), so the k-th entry of a run is scored against the k-th label and
no ``case_id -> label`` mapping is kept: a label is a small code into the list of distinct
labels, packed in as few bits as their number needs (``runner.corpus.packed_codes``: a bit a
case for two labels, at most a byte while there are at most 256). Whether a
run's entries are exactly the corpus cases in that order is checked by comparing the digests
of their ids, block by block (:class:`IdBlocks`: the blocks of the evaluation digest), with
:attr:`CaseLabels.id_blocks` (and their count with the case count): a shard that hashes only
its own blocks of the runs compares the ids of those blocks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar, overload

from attestation.contracts import EVALUATION_BLOCK_CASES
from runner.corpus.packed_codes import PackedCodes

ItemT = TypeVar("ItemT")

#: The framing of the id digest: every id followed by a newline (ids never hold one).
ID_SEPARATOR: Final = b"\n"


def block_parts(items: Sequence[ItemT], filled: int) -> Iterator[Sequence[ItemT]]:
    """``items`` cut where blocks of :data:`EVALUATION_BLOCK_CASES` end, the first part
    filling a block that holds ``filled`` already."""
    done = 0
    room = EVALUATION_BLOCK_CASES - filled
    while done < len(items):
        yield items[done : done + room]
        done += room
        room = EVALUATION_BLOCK_CASES


#: The size of a SHA-256 digest.
DIGEST_BYTES: Final = 32


class BlockDigests(Sequence[bytes]):
    """SHA-256 digests in order, held as one byte string (32 bytes each) rather than as an
    object each: a block of 256 cases costs 32 bytes, not the 65 of a ``bytes`` object and
    its pointer (at 4M cases, 0.5 MB instead of 1.1 MB of small objects that outlive every
    transient around them)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes | bytearray = b"") -> None:
        if len(data) % DIGEST_BYTES:
            raise ValueError(f"{len(data)} bytes are not whole {DIGEST_BYTES}-byte digests")
        self._data = bytes(data)

    @classmethod
    def of(cls, digests: Sequence[bytes]) -> BlockDigests:
        """``digests`` (each of 32 bytes) in one byte string."""
        if isinstance(digests, BlockDigests):
            return digests
        if any(len(digest) != DIGEST_BYTES for digest in digests):
            raise ValueError(f"a block digest is not {DIGEST_BYTES} bytes")
        return cls(b"".join(digests))

    def joined(self) -> bytes:
        """Every digest, concatenated."""
        return self._data

    def __len__(self) -> int:
        return len(self._data) // DIGEST_BYTES

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> BlockDigests: ...

    def __getitem__(self, index: int | slice) -> bytes | BlockDigests:
        positions = range(len(self))[index]  # IndexError, negative indices, clipping
        if isinstance(positions, int):
            return self._data[positions * DIGEST_BYTES : (positions + 1) * DIGEST_BYTES]
        if positions.step == 1:
            return BlockDigests(
                self._data[positions.start * DIGEST_BYTES : positions.stop * DIGEST_BYTES]
            )
        return BlockDigests.of([self[position] for position in positions])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockDigests):
            return self._data == other._data
        if isinstance(other, list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which have none

    def __repr__(self) -> str:
        return f"BlockDigests({len(self)} digests)"


class IdBlocks:
    """Digests of consecutive blocks of case ids, :data:`EVALUATION_BLOCK_CASES` ids each (the
    last block may be shorter): a block's digest is the SHA-256 of its ids, each followed by
    a newline. Ids come in order, in batches of any size."""

    def __init__(self) -> None:
        self._digests = bytearray()
        self._block = hashlib.sha256()
        self._filled = 0

    def add(self, ids: Sequence[str]) -> None:
        """The next ids (ASCII text)."""
        for part in block_parts(ids, self._filled):
            self._block.update(("\n".join(part) + "\n").encode("ascii"))
            self._filled += len(part)
            if self._filled == EVALUATION_BLOCK_CASES:
                self._close()

    def add_ascii(self, ids: Sequence[bytes]) -> None:
        """The next ids, as their ASCII bytes."""
        for part in block_parts(ids, self._filled):
            self._block.update(ID_SEPARATOR.join(part) + ID_SEPARATOR)
            self._filled += len(part)
            if self._filled == EVALUATION_BLOCK_CASES:
                self._close()

    def extend(self, digests: Sequence[bytes]) -> None:
        """The digests of the next whole blocks, hashed elsewhere (at a block end only)."""
        if self._filled:
            raise ValueError("id blocks extended in the middle of a block")
        self._digests += BlockDigests.of(digests).joined()

    def finish(self) -> BlockDigests:
        """Every block's digest (the last block closed)."""
        if self._filled:
            self._close()
        return BlockDigests(self._digests)

    def _close(self) -> None:
        self._digests += self._block.digest()
        self._block = hashlib.sha256()
        self._filled = 0


def ids_digest(block_digests: Sequence[bytes]) -> bytes:
    """The digest compared for a run of blocks: SHA-256 over their id digests in order."""
    return hashlib.sha256(BlockDigests.of(block_digests).joined()).digest()


@dataclass(frozen=True, slots=True)
class LabelsPart:
    """The labels of a part of ``cases.jsonl`` in plain values (to cross a process
    boundary): its distinct labels, each case's code into them, its blocks' id digests."""

    names: tuple[str, ...]
    codes: PackedCodes
    id_blocks: BlockDigests


class CaseLabels:
    """Labels by rank, built while ``cases.jsonl`` is scanned in order."""

    def __init__(self, *, first_rank: int = 0) -> None:
        #: The rank of the first case added (a shard's labels start at its first block).
        self.first_rank = first_rank
        #: The distinct labels, in order of first appearance.
        self.names: list[str] = []
        #: Code ``k`` is the index in :attr:`names` of the label of the case of rank
        #: ``first_rank + k``.
        self.codes = PackedCodes()
        self._code_of: dict[str, int] = {}
        self._code_of_ascii: dict[bytes, int] = {}
        self._ids = IdBlocks()

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def id_blocks(self) -> BlockDigests:
        """The digests of the ids, block by block (:class:`IdBlocks`), once every case is in."""
        return self._ids.finish()

    def label(self, rank: int) -> str:
        index = rank - self.first_rank
        if not 0 <= index < len(self.codes):
            raise IndexError(f"no label of rank {rank}")
        return self.names[self.codes.unpacked(index, index + 1)[0]]

    def labels(self, first: int, end: int) -> list[str]:
        """The labels of ranks ``first`` to ``end - 1``."""
        base = self.first_rank
        return list(map(self.names.__getitem__, self.codes.unpacked(first - base, end - base)))

    def add(self, ids: Sequence[str], labels: Sequence[str]) -> None:
        """The next cases, in order."""
        self._ids.add(ids)  # ids are ASCII (Case's pattern)
        try:
            self._extend(map(self._code_of.__getitem__, labels))
        except KeyError:
            self._extend(map(self._code, labels))

    def add_ascii(self, ids: Sequence[bytes], labels: Sequence[bytes]) -> None:
        """The next cases, ids and labels as the ASCII bytes of a canonical line."""
        self._ids.add_ascii(ids)
        try:
            self._extend(map(self._code_of_ascii.__getitem__, labels))
        except KeyError:
            self._extend(self._code(label.decode("ascii"), label) for label in labels)

    def extend(self, part: LabelsPart) -> None:
        """The cases of the next part of ``cases.jsonl``, labelled elsewhere (a part starts
        at a block end): the result is what :meth:`add` would have made of its cases."""
        self._ids.extend(part.id_blocks)
        codes = [self._code(name) for name in part.names]
        self.codes.extend_from(part.codes, codes, len(self.names))

    def part(self) -> LabelsPart:
        """What :meth:`extend` takes: the labels of every case added, the last block closed."""
        return LabelsPart(names=tuple(self.names), codes=self.codes, id_blocks=self.id_blocks)

    def _extend(self, codes: Iterable[int]) -> None:
        # Materialized first: a KeyError half-way must not leave half the codes appended
        # (and every new label is named before the codes are sized by their number).
        values = list(codes)
        self.codes.extend(values, len(self.names))

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
