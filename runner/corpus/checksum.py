"""Streaming corpus checksum over ``cases.jsonl``: a tree over blocks of cases.

The cases, in ascending ``case_id`` order, are cut into blocks of
:data:`~attestation.contracts.EVALUATION_BLOCK_CASES` (block ``j``: ranks ``256 j`` to
``256 j + 255``, the last block possibly shorter). A block's leaf is the RFC 6962 leaf hash
(SHA-256 of ``0x00`` and the bytes) of its cases' RFC 8785 canonical JSON, each followed by
``\\n``; the checksum is :func:`attestation.contracts.corpus_checksum` of the case count and
the RFC 6962 root of the leaves. The file must already be sorted (and is read once, in
bounded chunks), so memory grows only by one leaf per block (32 bytes per 256 cases) unless
the caller asks for the labels. A shard checks only its own blocks against the root
(``runner.corpus.case_blocks``); a large file's blocks are shared among processes
(``runner.corpus.parallel_scan``), each scanning its part with a :class:`Scanner`.

Three paths per 1 MiB chunk, all hashing the same bytes for the same cases:

1. already canonical lines whose strings are printable ASCII: verified by one regular
   expression match in C and hashed as they are;
2. any other valid lines (nested inputs, non-ASCII text, floats, keys in any order, spaces):
   decoded, validated and re-encoded by msgspec in C, a whole chunk per call
   (``runner.corpus.canonical_lines``, which declines whatever it cannot vouch for);
3. the exact path, line by line: parse, validate with the pydantic models, canonicalize in
   Python. It decides every chunk the others decline and writes every error message.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import msgspec

from attestation.contracts import EVALUATION_BLOCK_CASES, corpus_checksum
from attestation.encoding.canonical import CanonicalizationError, canonicalize
from attestation.encoding.gc_pause import paused_gc
from attestation.transparency.merkle import LEAF_PREFIX, CompactRange
from runner.corpus.canonical_lines import CaseLine, LineDecoder
from runner.corpus.case_labels import CaseLabels, LabelsPart
from runner.corpus.errors import CorpusError, CorpusOrderError
from runner.corpus.jsonio import (
    MAX_CASE_LINE_BYTES,
    open_corpus_file,
    parse_line,
    require_corpus_dir,
)
from runner.corpus.models import Case, validate_record

CASES_FILE: Final = "cases.jsonl"
CHUNK_BYTES: Final = 1 << 20

Progress = Callable[[int, int | None], None]

# A canonical case line whose strings hold only printable ASCII other than '"' and '\'
# (such strings are their own RFC 8785 form). Keys appear in RFC 8785 order. Integer
# inputs stay within 15 digits (well inside +-(2**53-1)); "-0" is not canonical.
_SAFE: Final = rb"[\x20\x21\x23-\x5b\x5d-\x7e]"
_FAST_LINE: Final = (
    rb'\{"case_id":"[a-z0-9-]{1,40}"'
    rb'(?:,"group":"' + _SAFE + rb'{1,60}")?'
    rb'(?:,"input":(?:"' + _SAFE + rb'{0,4096}"|0|-?[1-9][0-9]{0,14}))?'
    rb',"label":"' + _SAFE + rb'{1,200}"'
    rb'(?:,"split":"(?:dev|holdout|adversarial)")?'
    rb"\}\n"
)
# Possessive (``*+``): a line is matched one way only, so nothing is given back, and the
# matcher keeps no backtracking record per line (a plain ``*`` over a 1 MiB chunk: ~11 MB).
_FAST_CHUNK: Final = re.compile(rb"(?:" + _FAST_LINE + rb")*+")
_FAST_IDS: Final = re.compile(rb'^\{"case_id":"([a-z0-9-]+)"', re.MULTILINE)
# In a fast chunk no string contains '"', so ',"label":"' can only be the label key.
_FAST_LABELS: Final = re.compile(
    rb'^\{"case_id":"[a-z0-9-]+"[^\n]*?,"label":"([^"]*)"', re.MULTILINE
)

_CASE_LINES: Final = LineDecoder(CaseLine)

_NORMALIZE_HINT: Final = "run `attested-replay corpus normalize DIR --out DIR2` to sort the corpus"


@dataclass(frozen=True, slots=True)
class CaseScan:
    """What one pass over ``cases.jsonl`` found."""

    checksum: str
    case_count: int
    #: Every case's label by rank and the digest of the ids, only when the caller asked for
    #: them (scoring needs them).
    labels: CaseLabels | None
    #: The leaf of every block, in order (what ``corpus index`` writes beside the corpus).
    leaves: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class ScannedPart:
    """What a :class:`Scanner` found in a part of ``cases.jsonl``, in plain values (to cross
    a process boundary: ``runner.corpus.parallel_scan``)."""

    count: int
    first_id: str | None
    last_id: str | None
    #: The leaf of every block of the part (the last one closed).
    leaves: list[bytes]
    labels: LabelsPart | None


class BlockLeaves:
    """The leaves of consecutive blocks of canonical case lines, fed in pieces of any size."""

    def __init__(self) -> None:
        self.leaves: list[bytes] = []
        self._block = hashlib.sha256(LEAF_PREFIX)
        self._filled = 0

    def add(self, canonical: bytes, count: int) -> None:
        """The next ``count`` canonical lines (each ending in a newline), in one piece."""
        room = EVALUATION_BLOCK_CASES - self._filled
        if count < room:
            self._block.update(canonical)
            self._filled += count
            return
        # Cut at block ends: one split in C, then one join per block.
        lines = canonical.split(b"\n")
        lines[-1:] = []
        start = 0
        while start < count:
            end = min(start + room, count)
            self._block.update(b"\n".join(lines[start:end]) + b"\n")
            self._filled += end - start
            if self._filled == EVALUATION_BLOCK_CASES:
                self._close()
            start, room = end, EVALUATION_BLOCK_CASES

    def extend(self, leaves: Sequence[bytes]) -> None:
        """The leaves of the next whole blocks, hashed elsewhere (at a block end only)."""
        if self._filled:
            raise ValueError("block leaves extended in the middle of a block")
        self.leaves.extend(leaves)

    def finish(self) -> list[bytes]:
        """Every block's leaf (the last block closed)."""
        if self._filled:
            self._close()
        return self.leaves

    def _close(self) -> None:
        self.leaves.append(self._block.digest())
        self._block = hashlib.sha256(LEAF_PREFIX)
        self._filled = 0


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """The RFC 6962 root of block leaves, in order."""
    tree = CompactRange()
    for leaf in leaves:
        tree.append(leaf)
    return tree.root()


class Scanner:
    """Validates and hashes consecutive chunks of case lines (``line_base`` and ``labels``
    start where the caller's first line is: ``runner.corpus.case_blocks`` scans a shard's
    blocks)."""

    def __init__(self, *, collect_labels: bool, line_base: int = 0) -> None:
        self.blocks = BlockLeaves()
        self.count = 0
        self.first_id: str | None = None
        self.last_id: str | None = None
        self.line_base = line_base  # lines before the current chunk
        self.labels = CaseLabels(first_rank=line_base) if collect_labels else None

    def part(self) -> ScannedPart:
        """What this scanner found, in plain values (the last block closed)."""
        return ScannedPart(
            count=self.count,
            first_id=self.first_id,
            last_id=self.last_id,
            leaves=self.blocks.finish(),
            labels=None if self.labels is None else self.labels.part(),
        )

    def join(self, part: ScannedPart) -> bool:
        """Take the cases of a part scanned elsewhere that starts where this scanner stands
        (at a block end); False, with nothing taken, when its ids do not follow this
        scanner's or it lacks the labels this scanner collects."""
        if part.first_id is None or part.last_id is None:
            return False
        if self.last_id is not None and part.first_id <= self.last_id:
            return False
        if self.labels is not None and part.labels is None:
            return False
        self.blocks.extend(part.leaves)
        if self.labels is not None and part.labels is not None:
            self.labels.extend(part.labels)
        self.first_id = self.first_id or part.first_id
        self.count += part.count
        self.line_base += part.count
        self.last_id = part.last_id
        return True

    def chunk(self, chunk: bytes) -> None:
        if _FAST_CHUNK.fullmatch(chunk) is not None and self._fast(chunk):
            return
        if _lines_fit(chunk):
            with paused_gc():
                accepted = self._decoded(chunk)
            if accepted:
                return
        self._slow(chunk)

    def _decoded(self, chunk: bytes) -> bool:
        # The records die when this returns, before the collector is back (see paused_gc).
        decoded = _CASE_LINES.canonical_chunk(chunk)
        return decoded is not None and self._accept(decoded[0], decoded[1])

    def _accept(self, cases: Sequence[CaseLine], canonical: bytes) -> bool:
        """Take a chunk decoded by msgspec if its ids ascend (else the slow path explains)."""
        ids = [case.case_id for case in cases]
        ascending = ids == sorted(ids) and len(set(ids)) == len(ids)
        if not ascending or (self.last_id is not None and ids[0] <= self.last_id):
            return False
        self.blocks.add(canonical, len(ids))
        self.first_id = self.first_id or ids[0]
        if self.labels is not None:
            self.labels.add(ids, [case.label for case in cases])
        self.count += len(ids)
        self.line_base += len(ids)
        self.last_id = ids[-1]
        return True

    def _fast(self, chunk: bytes) -> bool:
        ids = _FAST_IDS.findall(chunk)
        if not ids:
            return True
        first = ids[0].decode("ascii")
        ascending = ids == sorted(ids) and len(set(ids)) == len(ids)
        if not ascending or (self.last_id is not None and first <= self.last_id):
            return False  # the slow path finds the offending line for the message
        self.blocks.add(chunk, len(ids))
        self.first_id = self.first_id or first
        if self.labels is not None:
            self.labels.add_ascii(ids, _FAST_LABELS.findall(chunk))
        self.count += len(ids)
        self.line_base += len(ids)
        self.last_id = ids[-1].decode("ascii")
        return True

    def _slow(self, chunk: bytes) -> None:
        lines = chunk.split(b"\n")
        lines.pop()  # a chunk always ends with a newline
        for offset, line in enumerate(lines, start=1):
            number = self.line_base + offset
            if not line.strip():
                raise CorpusError(CASES_FILE, "empty line", line=number)
            if len(line) > MAX_CASE_LINE_BYTES:
                raise CorpusError(
                    CASES_FILE, f"line longer than {MAX_CASE_LINE_BYTES} bytes", line=number
                )
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(CASES_FILE, f"not UTF-8: {exc.reason}", line=number) from exc
            data = parse_line(line, CASES_FILE, number)
            case = validate_record(Case, data, CASES_FILE, number)
            self._check_order(case.case_id, number)
            try:
                canonical = canonicalize(data)
            except CanonicalizationError as exc:
                raise CorpusError(CASES_FILE, str(exc), line=number) from exc
            self.blocks.add(canonical + b"\n", 1)
            self.first_id = self.first_id or case.case_id
            if self.labels is not None:
                self.labels.add([case.case_id], [case.label])
            self.count += 1
            self.last_id = case.case_id
        self.line_base += len(lines)

    def _check_order(self, case_id: str, number: int) -> None:
        if self.last_id is None or case_id > self.last_id:
            return
        if case_id == self.last_id:
            raise CorpusError(
                CASES_FILE,
                f"field 'case_id': duplicate case id {case_id!r} (also on line {number - 1})",
                line=number,
            )
        raise CorpusOrderError(
            CASES_FILE,
            f"field 'case_id': {case_id!r} comes after {self.last_id!r}; cases must be in "
            f"ascending case_id order: {_NORMALIZE_HINT}",
            line=number,
        )


def _lines_fit(chunk: bytes) -> bool:
    """No line of ``chunk`` (which ends with a newline) is longer than a case line may be:
    every window of MAX_CASE_LINE_BYTES + 1 bytes holds a newline (two or three finds per
    chunk, where splitting it would copy every line)."""
    start = 0
    while start < len(chunk):
        newline = chunk.rfind(b"\n", start, start + MAX_CASE_LINE_BYTES + 1)
        if newline < 0:
            return False
        start = newline + 1
    return True


def scan_cases(
    corpus_dir: Path,
    *,
    collect_labels: bool = False,
    progress: Progress | None = None,
    workers: int | None = None,
) -> CaseScan:
    """Validate ``cases.jsonl`` and compute the corpus checksum in one streaming pass, its
    blocks shared among ``workers`` processes (default: ``runner.corpus.parallel_scan``'s
    :func:`~runner.corpus.parallel_scan.worker_count`; 1: this process alone)."""
    from runner.corpus.parallel_scan import scan_in_parts, worker_count  # a cycle: imported here

    require_corpus_dir(corpus_dir)
    path = corpus_dir / CASES_FILE
    with open_corpus_file(path) as handle:
        scanner = scan_in_parts(
            path,
            handle,
            collect_labels=collect_labels,
            workers=worker_count() if workers is None else workers,
            progress=progress,
        )
    if scanner.count == 0:
        raise CorpusError(CASES_FILE, "the corpus has no cases")
    if progress is not None:
        progress(scanner.count, None)
    leaves = scanner.blocks.finish()
    return CaseScan(
        checksum=corpus_checksum(scanner.count, tree_root(leaves)),
        case_count=scanner.count,
        labels=scanner.labels,
        leaves=tuple(leaves),
    )


def scan_lines(
    handle: BinaryIO,
    scanner: Scanner,
    *,
    size: int | None = None,
    progress: Progress | None = None,
) -> None:
    """Feed ``scanner`` the lines of ``handle`` from where it stands, ``size`` bytes of them
    (or up to the end), in bounded chunks; the last line may lack its newline."""
    rest = b""
    left = size
    while True:
        want = CHUNK_BYTES if left is None else min(CHUNK_BYTES, left)
        block = handle.read(want) if want else b""
        if left is not None:
            left -= len(block)
        if not block:
            break
        data = rest + block if rest else block
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if len(rest) > MAX_CASE_LINE_BYTES:
            raise CorpusError(
                CASES_FILE,
                f"line longer than {MAX_CASE_LINE_BYTES} bytes",
                line=scanner.line_base + data.count(b"\n", 0, cut) + 1,
            )
        if cut:
            scanner.chunk(data[:cut])
            if progress is not None:
                progress(scanner.count, None)
    if rest:
        scanner.chunk(rest + b"\n")  # the last line may lack its newline


def compute_checksum(
    corpus_dir: Path, *, progress: Progress | None = None, workers: int | None = None
) -> str:
    """The corpus checksum of ``corpus_dir`` (validating every case)."""
    return scan_cases(corpus_dir, progress=progress, workers=workers).checksum


class _CaseId(msgspec.Struct):
    case_id: str


_DECODE_IDS: Final = msgspec.json.Decoder(_CaseId).decode_lines


def read_case_ids(corpus_dir: Path) -> list[str]:
    """The case ids of a ``cases.jsonl`` that :func:`scan_cases` accepted, in order (to
    name a wrong run entry: O(cases), never on the way of a valid corpus)."""
    ids: list[str] = []
    rest = b""
    with open_corpus_file(corpus_dir / CASES_FILE) as handle:
        while block := handle.read(CHUNK_BYTES):
            data = rest + block
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            ids.extend(case.case_id for case in _DECODE_IDS(data[:cut]))
    if rest.strip():
        ids.extend(case.case_id for case in _DECODE_IDS(rest))
    return ids
