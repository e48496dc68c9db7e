"""A shard's part of the corpus checksum: its own blocks of ``cases.jsonl`` and the root.

The corpus checksum is the head of a tree over blocks of cases (``runner.corpus.checksum``).
A shard scores whole blocks, so it reads, validates and hashes only those, from the byte
offsets the runs index lists (``runner.corpus.runs_index``), checks that the index lists the
same leaves for them, and takes every other leaf from the index to compute the root: its work
on ``cases.jsonl`` is divided by the number of shards.

The index is the operator's and is not trusted. Every shard of a run binds the checksum it
computed, and the merged envelope requires them to be equal (``merged.shards``); one checksum
is the head of one list of leaves (a different list would be a SHA-256 collision), and each
block's leaf in it was computed from ``cases.jsonl`` by the shard that scored the block. A
tenant's pinned checksum (computed by ``expected --corpus`` over its own copy, every block
hashed and every rule checked, the order across blocks included) therefore determines every
case every shard scored. A forged leaf makes the shards that took it bind another checksum
than the one that owns the block (which fails on the mismatch): the merge refuses the set, or
the tenant's pin does (``expectation.corpus-checksum``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from attestation.contracts import (
    EVALUATION_BLOCK_CASES,
    corpus_checksum,
    evaluation_block_count,
)
from runner.corpus.case_labels import CaseLabels
from runner.corpus.checksum import CASES_FILE, CHUNK_BYTES, Scanner, scan_lines, tree_root
from runner.corpus.errors import CorpusError
from runner.corpus.jsonio import open_corpus_file, require_corpus_dir
from runner.corpus.runs_index import RUNS_INDEX_FILE, CaseBlocksIndex

_REBUILD: Final = "rebuild the index with `attested-replay corpus index DIR`"
#: A whole block of lines (possessive: nothing to give back).
_BLOCK_LINES: Final = re.compile(rb"(?:[^\n]*+\n){%d}" % EVALUATION_BLOCK_CASES)


@dataclass(frozen=True, slots=True)
class CasesPart:
    """What a replay learned from ``cases.jsonl``: all of it, or a shard's own blocks and the
    index."""

    checksum: str
    case_count: int
    #: The labels of the shard's cases (``first_rank`` is its first case).
    labels: CaseLabels
    #: The digests of the case ids by block (``CaseLabels.id_blocks``): the shard's own
    #: blocks filled in, every other one empty (never compared: those run blocks are
    #: counted, not hashed, by the shard).
    id_blocks: Sequence[bytes]
    #: Every block's leaf, when every block was hashed here (empty for a shard).
    leaves: tuple[bytes, ...] = ()


def blocks_of(first: int, end: int) -> range:
    """The blocks of ranks ``first`` to ``end - 1`` (``first`` starts a block: a shard's
    range); empty when the range is."""
    start = first // EVALUATION_BLOCK_CASES
    return range(start, start + evaluation_block_count(end - first))


def verify_shard_blocks(corpus_dir: Path, index: CaseBlocksIndex, blocks: range) -> CasesPart:
    """Read, validate and hash ``blocks`` of ``cases.jsonl`` at the offsets ``index`` lists,
    check that ``index`` lists their leaves, and compute the corpus checksum from them and the
    index's other leaves.

    Raises:
        CorpusError: a case is invalid, or the index does not describe this ``cases.jsonl``
            (a block's offset, size or leaf), naming the block.
    """
    require_corpus_dir(corpus_dir)
    count = index.case_count
    total = evaluation_block_count(count)
    if not (0 <= blocks.start <= blocks.stop <= total and blocks.step == 1):
        raise ValueError(f"blocks {blocks} are not blocks of a corpus of {total}")
    first_rank = min(blocks.start * EVALUATION_BLOCK_CASES, count)
    end_rank = min(blocks.stop * EVALUATION_BLOCK_CASES, count)
    scanner = Scanner(collect_labels=True, line_base=first_rank)
    start, stop = index.offsets[blocks.start], index.offsets[blocks.stop]
    with open_corpus_file(corpus_dir / CASES_FILE) as handle:
        size = handle.seek(0, 2)
        if index.offsets[-1] != size:
            raise CorpusError(
                RUNS_INDEX_FILE,
                f"field 'cases.offsets.{total}': {index.offsets[-1]} bytes, {CASES_FILE} has "
                f"{size}: {_REBUILD}",
            )
        # Every shard counts the lines of the last block (one block's bytes, unparsed), so
        # that none scores with a case count the file does not have.
        handle.seek(index.offsets[-2])
        tail = handle.read(size - index.offsets[-2])
        lines = tail.count(b"\n") + (not tail.endswith(b"\n"))
        actual = (total - 1) * EVALUATION_BLOCK_CASES + lines
        if actual != count:
            raise CorpusError(
                RUNS_INDEX_FILE,
                f"field 'case_count': an index of {count} cases, {CASES_FILE} has {actual}: "
                f"{_REBUILD}",
            )
        if start:
            handle.seek(start - 1)
            if handle.read(1) != b"\n":
                raise CorpusError(
                    RUNS_INDEX_FILE,
                    f"field 'cases.offsets.{blocks.start}': offset {start} is not the start of "
                    f"a line of {CASES_FILE}: {_REBUILD}",
                )
        handle.seek(start)
        scan_lines(handle, scanner, size=stop - start)
    if scanner.count != end_rank - first_rank:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field 'cases.offsets': blocks {blocks.start} to {blocks.stop - 1} hold "
            f"{scanner.count} cases of {CASES_FILE}, not {end_rank - first_rank}: {_REBUILD}",
        )
    leaves = scanner.blocks.finish()
    for block, leaf in zip(blocks, leaves, strict=True):
        if leaf != index.leaves[block]:
            raise CorpusError(
                RUNS_INDEX_FILE,
                f"field 'cases.leaves': block {block} (cases {block * EVALUATION_BLOCK_CASES + 1}"
                f" to {min((block + 1) * EVALUATION_BLOCK_CASES, count)} of {CASES_FILE}) hashes "
                f"to {leaf.hex()}, the index lists {index.leaves[block].hex()}: {_REBUILD}",
            )
    labels = scanner.labels
    assert labels is not None
    id_blocks = [b""] * total
    id_blocks[blocks.start : blocks.stop] = labels.id_blocks
    return CasesPart(
        checksum=corpus_checksum(count, tree_root(index.leaves)),
        case_count=count,
        labels=labels,
        id_blocks=id_blocks,
    )


def block_offsets(corpus_dir: Path, case_count: int) -> tuple[int, ...]:
    """Where each block of ``cases.jsonl`` (of ``case_count`` cases, already scanned) starts,
    then the file's size: what the index lists for :func:`verify_shard_blocks`."""
    offsets = [0]
    position = 0
    rest = b""
    with open_corpus_file(corpus_dir / CASES_FILE) as handle:
        while block := handle.read(CHUNK_BYTES):
            data = rest + block
            end = 0
            # Anchored at each block's start: a search (finditer) would retry the unmatched
            # rest of the chunk (up to a block, ~100 KB) from every byte, each attempt running
            # to its end: quadratic, 112 s for 100,000 realistic cases.
            while (match := _BLOCK_LINES.match(data, end)) is not None:
                end = match.end()
                offsets.append(position + end)
            position += end
            rest = data[end:]
    size = position + len(rest)
    if len(offsets) == evaluation_block_count(case_count) + 1:
        offsets[-1] = size  # the last block is whole, or the file ends without a newline
    else:
        offsets.append(size)
    return tuple(offsets)
