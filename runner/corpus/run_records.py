"""``runs.jsonl`` read in bounded pieces: one run record is never held whole.

A run record is the pack's template on one line: a header (``arm_id``, ``run_index``,
``set_ref``, ``marks_ref``, ``usage``) and ``cases``, one result per corpus case, so a
1M-case run is a single line of about 100 MB. :class:`RunReader` reads each line through a
1 MiB window and hands the caller's sink the entries of the ranks it reads in batches, as
columns (:class:`CaseColumns`: built only for those ranks, a shard's share):

* the members other than ``cases`` are small; each is tokenized and parsed on its own;
* ``cases`` is decoded in batches: the window is cut after its last ``}`` and ``[`` + piece
  + ``]`` is decoded by msgspec into :class:`RunCaseLine` structs, validated in C. A cut
  inside a string cannot decode (that string would never end), so a failed decode is tried
  again at an earlier ``}`` and then at the end of the complete elements an exact tokenizer
  finds;
* each batch is re-encoded in its RFC 8785 form (after replacing the numbers msgspec writes
  differently: integral doubles, magnitudes below 1e-5), cut at the block boundaries (every
  :data:`EVALUATION_BLOCK_CASES` results) and hashed into its blocks' leaves; the members
  other than ``cases`` are the record's header, hashed beside the root of its leaves
  (the evaluation digest v2, ``runner.corpus.evaluation_files``);
* a shard with a runs index (``runner.corpus.runs_index``) hashes only its own blocks (the
  reader's ``hashed`` ranks): it seeks to where the index says its first block starts, and
  from the end of its last block to the ``]`` closing ``cases``; the other blocks' leaves
  come from the index, which must hold the same leaves as the blocks hashed here. A run
  whose offsets the index does not list is read whole, the other entries only decoded as
  JSON (msgspec ``Raw``) and counted;
* ``corpus index`` (the reader's ``locate``) records where each block's first entry and the
  end of ``cases`` are, for that index.

Entries must come in ``cases.jsonl`` order (ascending ``case_id``, as ``attested-replay
corpus normalize`` writes them): the entry of rank k is the corpus case of rank k, so the
sink scores it against the k-th label (``runner.corpus.case_labels``). A digest of the
hashed entries' ids, compared with the digest of the corpus ids of the same ranks, checks
that; every entry is counted.

Whatever the fast path cannot vouch for (a JSON or validation error, a duplicate key, an
unknown member, entries that are not the corpus cases in order, an element it cannot cut)
sends the line, from its start, to the exact reader: ``json`` with the corpus hooks and the
pydantic models, which writes every error message (file, line, field) and holds that one
line in memory. A line it accepts gives the same digest and the same columns. So does an
offset of the index that does not lead to the entries it should (the exact reader never
seeks).

Memory: the window, one batch, the sink's state, and each run's header and leaves (32 bytes
per block).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Final, Generic, Protocol, TypeVar

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from attestation.contracts import EVALUATION_BLOCK_CASES, evaluation_block_count
from attestation.encoding.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalizationError,
    canonicalize,
    format_number,
)
from attestation.encoding.gc_pause import paused_gc
from attestation.transparency.merkle import LEAF_PREFIX
from runner.corpus.canonical_lines import colon_count
from runner.corpus.case_labels import IdBlocks, block_parts, ids_digest
from runner.corpus.errors import CorpusError, CorpusOrderError
from runner.corpus.evaluation_files import (
    RUNS_FILE,
    Evaluation,
    RunDigest,
    RunOffsets,
    RunsIndex,
    cases_root,
    evaluation_digest,
    exact_run_parts,
)
from runner.corpus.jsonio import (
    MAX_RUN_LINE_BYTES,
    open_corpus_file,
    parse_json,
    parse_line,
)
from runner.corpus.models import CASE_ID_MAX, RunCase, RunHeader, validate_record

CHUNK_BYTES: Final = 1 << 20
#: A member other than ``cases`` is parsed whole; a valid one is a few hundred bytes.
MAX_MEMBER_BYTES: Final = 1 << 16
#: How far the window may grow while no complete entry fits in it (a very long prediction);
#: past this the exact reader takes the line.
MAX_BATCH_WINDOW: Final = 16 << 20
#: Entries handed to the sink at a time by the exact reader.
_EXACT_BATCH: Final = 4096

_MAX_DOUBLE: Final = 1.7976931348623157e308
_INTEGRAL_LIMIT: Final = 2.0**53
_RUN_KEYS: Final = frozenset(RunHeader.model_fields) | {"cases"}
_REBUILD: Final = "rebuild the index with `attested-replay corpus index DIR`"

_Number = (
    Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
    | Annotated[float, Meta(ge=0, le=_MAX_DOUBLE)]
    | None
)


class RunCaseLine(Struct, forbid_unknown_fields=True, gc=False):
    """One entry of a run's ``cases``: mirrors ``runner.corpus.models.RunCase`` (the exact
    reader's model, which writes the messages). Numbers stay as parsed (int or float). Its
    fields hold no containers, so it cannot be part of a cycle: untracked by the collector."""

    case_id: Annotated[str, Meta(min_length=1, max_length=CASE_ID_MAX)]
    prediction: str | None
    cost_usd: _Number
    latency_ms: _Number
    error: Annotated[str, Meta(max_length=300)] | UnsetType = UNSET


@dataclass(frozen=True, slots=True)
class CaseColumns:
    """Consecutive entries of one run, a list per field, values as a JSON parser reads them
    (numbers int or float; ``errors[i]`` None when the entry has no ``error``)."""

    case_ids: list[str]
    predictions: list[str | None]
    errors: list[str | None]
    costs: list[int | float | None]
    latencies: list[int | float | None]

    def __len__(self) -> int:
        return len(self.case_ids)


class CaseSink(Protocol):
    @property
    def ranks(self) -> range:
        """The ranks of the entries the sink reads; the reader builds no columns for the
        others (it still checks and digests every entry)."""
        ...

    def add(self, rank: int, columns: CaseColumns) -> None:
        """Entries of ranks ``rank`` to ``rank + len(columns) - 1`` of the current run, all
        within :attr:`ranks`."""
        ...

    def read(self, entries: int) -> None:
        """The first ``entries`` entries of the current run have been read (progress)."""
        ...


SinkT = TypeVar("SinkT", bound=CaseSink)


class IgnoreCases:
    """The sink of a reader that wants only the digest and the checks."""

    ranks: Final = range(0)

    def add(self, rank: int, columns: CaseColumns) -> None:
        pass

    def read(self, entries: int) -> None:
        pass


@dataclass(frozen=True, slots=True)
class RunRead(Generic[SinkT]):
    """A run record read whole: its line, its validated header, the sink that got its
    entries (the exact corpus cases, in order), its part of the evaluation digest and the
    leaves this reader computed (of the blocks of its hashed ranks)."""

    line: int
    header: RunHeader
    sink: SinkT
    digest: RunDigest
    leaves: tuple[bytes, ...]
    #: Where its blocks are in ``runs.jsonl``, when the reader was told to ``locate`` them
    #: and could (None from the exact reader).
    offsets: RunOffsets | None = None


@dataclass(frozen=True, slots=True)
class CorpusCases:
    """What the reader checks every run's entries against (from the ``cases.jsonl`` pass)."""

    count: int
    #: The digests of the corpus ids, block by block (``CaseLabels.id_blocks``).
    id_blocks: Sequence[bytes]
    #: The corpus ids in order, read again only to name a wrong entry.
    read_ids: Callable[[], Sequence[str]]


class _FallbackError(Exception):
    """The fast path cannot vouch for this line: the exact reader takes it."""


_CASE_ID = attrgetter("case_id")
_PREDICTION = attrgetter("prediction")
_ERROR = attrgetter("error")
_COST = attrgetter("cost_usd")
_LATENCY = attrgetter("latency_ms")
_ENCODE: Final = msgspec.json.Encoder(order="sorted").encode
_DECODE_CASES: Final = msgspec.json.Decoder(list[RunCaseLine]).decode
_SKIP_CASES: Final = msgspec.json.Decoder(list[Raw]).decode
_DECODE_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
_CUT_ATTEMPTS: Final = 3

_WS: Final = re.compile(rb"[ \t\r]*")
_KEY: Final = re.compile(rb'"([a-z_]{1,20})"[ \t\r]*:[ \t\r]*')
_STRING: Final = re.compile(rb'"(?:[^"\\]++|\\.)*+"')
_SCALAR: Final = re.compile(rb"[-+.0-9a-zA-Z]+")
_BRACKET_TOKENS: Final = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
# A flat object (no nested object or array: a valid entry is one), strings tokenized
# exactly; and a sequence of them separated by commas. Every alternative is decided by its
# first byte, so possessive repeats (``*+``) match what plain ones would, without the
# matcher keeping a backtracking record per byte (plain repeats over a 1 MiB window cost
# ~150 MB and 0.7 s; these nothing and 0.05 s).
_ELEMENT: Final = rb'\{(?:[^"{}\[\]\n]++|"(?:[^"\\\n]++|\\.)*+")*+\}'
_ELEMENTS: Final = re.compile(_ELEMENT + rb"(?:[ \t\r]*+,[ \t\r]*+" + _ELEMENT + rb")*+")


@lru_cache(maxsize=EVALUATION_BLOCK_CASES)
def _leading_elements(count: int) -> re.Pattern[bytes]:
    """``count`` entries, each with the comma after it: what lies between an entry's start
    and the start of the entry ``count`` places after it."""
    repeat = b"{" + str(count).encode("ascii") + b"}"
    return re.compile(rb"(?:" + _ELEMENT + rb"[ \t\r]*+,[ \t\r]*+)" + repeat)


class _Window:
    """``data[pos:]`` is unread; ``offset`` is the file offset of ``data[0]``; ``end`` is
    the index in ``data`` of the newline ending the current line, -1 until it is read."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        #: The file's size when opened: no offset at or past it is an entry or a ``]``.
        self.size = os.fstat(handle.fileno()).st_size
        self.data = b""
        self.pos = 0
        self.offset = 0
        self.end = -1
        self.eof = False
        self.line_start = 0
        self.line_number = 0

    @property
    def position(self) -> int:
        """The file offset of ``data[pos]``."""
        return self.offset + self.pos

    def reset(self, offset: int) -> None:
        self.handle.seek(offset)
        self.data = b""
        self.pos = 0
        self.offset = offset
        self.end = -1
        self.eof = False

    def start_line(self) -> bool:
        """Begin the next line at ``pos``; False at the end of the file."""
        self.end = -1
        self.line_start = self.position
        self.line_number += 1
        if self.pos == len(self.data) and not self.fill():
            self.line_number -= 1
            return False
        self.end = self.data.find(b"\n", self.pos)
        return True

    @property
    def limit(self) -> int:
        return self.end if self.end != -1 else len(self.data)

    @property
    def line_read(self) -> bool:
        """The rest of the line is in ``data``."""
        return self.end != -1 or self.eof

    def fill(self) -> bool:
        """Read the next piece of the file; False at its end."""
        block = self.handle.read(CHUNK_BYTES)
        if not block:
            self.eof = True
            return False
        kept = len(self.data) - self.pos
        self.offset += self.pos
        if self.end != -1:
            self.end -= self.pos
        self.data = self.data[self.pos :] + block
        self.pos = 0
        if self.end == -1:
            self.end = self.data.find(b"\n", kept)
            if self.end == -1 and self.offset + len(self.data) - self.line_start > (
                MAX_RUN_LINE_BYTES
            ):
                raise CorpusError(
                    RUNS_FILE,
                    f"line longer than {MAX_RUN_LINE_BYTES} bytes",
                    line=self.line_number,
                )
        return True

    def within_line(self, offset: int) -> bool:
        """No newline between ``pos`` and the file offset ``offset``: the bytes not in the
        window are read (not kept, not decoded) to find out, up to the line length cap."""
        if self.end != -1:
            return offset < self.offset + self.end
        if offset - self.line_start > MAX_RUN_LINE_BYTES:
            return False
        at = self.offset + len(self.data)  # where the handle is
        if offset <= at:
            return True  # every byte before it is in the window, which holds no newline
        # Read into one buffer at explicit offsets (the handle's position is left alone): at
        # a shard's seek this is most of the file, and a fresh megabyte object a read would
        # be a mapping and its page faults each time (runner.heap pins that threshold).
        buffer = bytearray(min(CHUNK_BYTES, offset - at))
        view = memoryview(buffer)
        while at < offset:
            read = os.preadv(self.handle.fileno(), [view[: offset - at]], at)
            if not read or buffer.find(b"\n", 0, read) != -1:
                return False
            at += read
        return True

    def skip_space(self) -> None:
        while True:
            self.pos = _WS.match(self.data, self.pos, self.limit).end()  # type: ignore[union-attr]
            if self.pos < self.limit or self.line_read or not self.fill():
                return

    def ensure(self, size: int) -> None:
        """``size`` bytes after ``pos``, or the rest of the line if it is shorter."""
        while self.limit - self.pos < size and not self.line_read and self.fill():
            pass

    def expect(self, char: bytes) -> None:
        self.skip_space()
        if self.data[self.pos : self.pos + 1] != char or self.pos >= self.limit:
            raise _FallbackError
        self.pos += 1


class RunReader:
    """Reads ``runs.jsonl`` record by record (see the module docstring) and computes the
    evaluation digest.

    ``checksum`` is the corpus checksum every ``set_ref`` must name; ``count_first`` makes
    an entry count that differs from the corpus case count the first complaint about a
    run's entries (what a shard reports). ``hashed`` (whole blocks; every rank by default)
    are the ranks whose entries are decoded, checked and hashed here; the others are
    skipped (to the offsets the index lists) or only counted, and their blocks' leaves come
    from ``index``, which must then be given and must hold the same leaves for the hashed
    blocks (``runner.corpus.runs_index``). ``locate`` (a reader of every rank) records where
    each run's blocks are (:attr:`RunRead.offsets`), for ``corpus index``.
    """

    def __init__(
        self,
        corpus_dir: Path,
        evaluation: Evaluation,
        *,
        checksum: str,
        cases: CorpusCases,
        count_first: bool = False,
        hashed: range | None = None,
        index: RunsIndex | None = None,
        locate: bool = False,
    ) -> None:
        self.corpus_dir = corpus_dir
        self.evaluation = evaluation
        self.checksum = checksum
        self.cases = cases
        self.count_first = count_first
        self.hashed = range(cases.count) if hashed is None else hashed
        self.index = index
        self.locate = locate
        if self.hashed != range(cases.count) and (index is None or locate):
            raise ValueError("a reader that hashes some ranks only needs the runs index")
        if self.hashed.start % EVALUATION_BLOCK_CASES or (
            self.hashed.stop % EVALUATION_BLOCK_CASES and self.hashed.stop != cases.count
        ):
            raise ValueError(f"ranks {self.hashed} are not whole blocks")
        first_block = self.hashed.start // EVALUATION_BLOCK_CASES
        self.blocks = range(first_block, first_block + evaluation_block_count(len(self.hashed)))
        self._ids_digest = ids_digest(cases.id_blocks[self.blocks.start : self.blocks.stop])
        self.run_digests: list[RunDigest] = []
        self._arm_ids = {arm.arm_id for arm in evaluation.plan.arms}
        self._previous: tuple[str, int] | None = None
        self._corpus_ids: Sequence[str] | None = None

    @property
    def evaluation_digest(self) -> str:
        """``sha256:`` + the evaluation digest of plan, marks and the runs read so far."""
        return evaluation_digest(self.evaluation, self.run_digests)

    def runs(self, new_sink: Callable[[], SinkT]) -> Iterator[RunRead[SinkT]]:
        """Every run record in file order; ``new_sink()`` gets each run's entries (a line the
        exact reader restarts gets a new sink), which must be among the hashed ranks."""
        with open_corpus_file(self.corpus_dir / RUNS_FILE) as handle:
            window = _Window(handle)
            while window.start_line():
                number = window.line_number
                start = window.position
                previous = self._previous
                line = _FastLine(self, window, self._checked(new_sink()), self._offsets(start))
                try:
                    read = line.read()
                except CorpusError:
                    if not line.sought:
                        raise
                    # What it read after a seek may not be this line's: the exact reader
                    # reads the line itself, and names what is wrong with it, if anything.
                    self._previous = previous
                    read = self._exact_line(window, start, number, self._checked(new_sink()))
                except _FallbackError:
                    self._previous = previous
                    read = self._exact_line(window, start, number, self._checked(new_sink()))
                self.run_digests.append(read.digest)
                yield read
                # Not held while the next line is read: a run's sink and leaves can be
                # megabytes (a 4M-case run's latency tail), and the caller may drop them.
                del read, line

    def _offsets(self, line_start: int) -> RunOffsets | None:
        """The index's offsets of the run whose line starts at ``line_start``, when this
        reader skips entries (None: it reads every entry)."""
        if self.index is None or self.hashed == range(self.cases.count):
            return None
        return self.index.offsets.get(line_start)

    def _checked(self, sink: SinkT) -> SinkT:
        if sink.ranks and not (
            self.hashed.start <= sink.ranks.start and sink.ranks.stop <= self.hashed.stop
        ):
            raise ValueError(f"ranks {sink.ranks} are not all hashed here ({self.hashed})")
        return sink

    def run_digest(
        self, header: RunHeader, header_bytes: bytes, leaves: Sequence[bytes], number: int
    ) -> RunDigest:
        """A run's part of the digest from its header and the leaves of the hashed blocks
        (the others from the index, which must agree on the hashed ones)."""
        if self.index is None:
            return RunDigest(header_bytes, cases_root(leaves))
        key = (header.arm_id, header.run_index)
        known = self.index.leaves.get(key)
        where = f"run {header.arm_id}/{header.run_index} (runs.jsonl line {number})"
        if known is None:
            raise CorpusError(self.index.file, f"{where} is not in the index: {_REBUILD}")
        for block, leaf in zip(self.blocks, leaves, strict=True):
            if known[block] != leaf:
                first = block * EVALUATION_BLOCK_CASES
                last = min(first + EVALUATION_BLOCK_CASES, self.cases.count) - 1
                raise CorpusError(
                    self.index.file,
                    f"{where}: block {block} (case results {first}..{last}) differs from "
                    f"runs.jsonl: {_REBUILD}",
                )
        return RunDigest(header_bytes, cases_root(known))

    # -- checks shared by both paths ----------------------------------------------------

    def check_header(self, header: RunHeader, number: int) -> None:
        """The plan's arms and run count, the file order, and the run's references."""
        plan = self.evaluation.plan
        if header.arm_id not in self._arm_ids:
            raise CorpusError(
                RUNS_FILE, f"field 'arm_id': arm {header.arm_id!r} is not in the plan", line=number
            )
        if header.run_index > plan.runs_per_arm:
            raise CorpusError(
                RUNS_FILE,
                f"field 'run_index': {header.run_index} exceeds the plan's runs_per_arm "
                f"{plan.runs_per_arm}",
                line=number,
            )
        key = (header.arm_id, header.run_index)
        if self._previous is not None and key <= self._previous:
            if key == self._previous:
                raise CorpusError(
                    RUNS_FILE,
                    f"field 'run_index': duplicate run {header.arm_id}/{header.run_index}",
                    line=number,
                )
            raise CorpusOrderError(
                RUNS_FILE,
                f"field 'arm_id': run {header.arm_id}/{header.run_index} comes after "
                f"{self._previous[0]}/{self._previous[1]}; runs must be in ascending (arm_id, "
                "run_index) order: run `attested-replay corpus normalize DIR --out DIR2`",
                line=number,
            )
        self._previous = key
        # The scoring procedure's first step: the run must name this set and these marks.
        if header.set_ref != self.checksum:
            raise CorpusError(
                RUNS_FILE,
                f"field 'set_ref': {header.set_ref!r} is not the corpus checksum {self.checksum}",
                line=number,
            )
        if header.marks_ref != self.evaluation.marks_ref:
            raise CorpusError(
                RUNS_FILE,
                f"field 'marks_ref': {header.marks_ref!r} is not the committed marks "
                f"{self.evaluation.marks_ref}",
                line=number,
            )

    def entries_match(self, count: int, hashed_ids: bytes) -> bool:
        """A run of ``count`` entries whose hashed ones have ids of digest ``hashed_ids``
        (:func:`~runner.corpus.case_labels.ids_digest`) lists the corpus cases in order."""
        return count == self.cases.count and hashed_ids == self._ids_digest

    def check_entries(
        self, header: RunHeader, ids: Sequence[str], number: int, *, complete: bool
    ) -> None:
        """Name the first entry that is not the corpus case of its rank: one not in the
        corpus or repeated; if ``complete`` (``ids`` are all the run's entries), then the
        cases missing and finally the first entry out of order."""
        corpus_ids = self._read_corpus_ids()
        known = set(corpus_ids)
        seen: set[str] = set()
        for index, case_id in enumerate(ids):
            if case_id not in known:
                raise CorpusError(
                    RUNS_FILE,
                    f"field 'cases.{index}.case_id': case {case_id!r} is not in cases.jsonl",
                    line=number,
                )
            if case_id in seen:
                raise CorpusError(
                    RUNS_FILE,
                    f"field 'cases.{index}.case_id': duplicate case {case_id!r} in this run",
                    line=number,
                )
            seen.add(case_id)
        if not complete:
            return
        if len(seen) != len(known):
            missing = [case_id for case_id in corpus_ids if case_id not in seen]
            raise CorpusError(
                RUNS_FILE,
                f"field 'cases': run {header.arm_id}/{header.run_index} is missing "
                f"{len(missing)} case(s), first {missing[0]!r}",
                line=number,
            )
        problem = first_out_of_order(ids, corpus_ids)
        if problem is not None:
            raise CorpusOrderError(RUNS_FILE, problem, line=number)
        raise CorpusError(
            RUNS_FILE, "field 'cases': the entries are not the corpus cases", line=number
        )

    def check_count(self, header: RunHeader, count: int, number: int) -> None:
        if self.count_first and count != self.cases.count:
            raise CorpusError(
                RUNS_FILE,
                f"field 'cases': run {header.arm_id}/{header.run_index} has {count} case "
                f"results, the corpus has {self.cases.count} cases",
                line=number,
            )

    def _read_corpus_ids(self) -> Sequence[str]:
        if self._corpus_ids is None:
            self._corpus_ids = self.cases.read_ids()
        return self._corpus_ids

    # -- the exact reader ---------------------------------------------------------------

    def _exact_line(self, window: _Window, start: int, number: int, sink: SinkT) -> RunRead[SinkT]:
        window.reset(start)
        raw = window.handle.readline(MAX_RUN_LINE_BYTES + 1)
        if len(raw) > MAX_RUN_LINE_BYTES and not raw.endswith(b"\n"):
            raise CorpusError(
                RUNS_FILE, f"line longer than {MAX_RUN_LINE_BYTES} bytes", line=number
            )
        window.reset(start + len(raw))
        line = raw.removesuffix(b"\n")
        if not line.strip():
            raise CorpusError(RUNS_FILE, "empty line", line=number)
        data = parse_line(line, RUNS_FILE, number)
        cases = data.pop("cases", None)
        header = validate_record(RunHeader, data, RUNS_FILE, number)
        if cases is None:
            raise CorpusError(RUNS_FILE, "field 'cases': Field required", line=number)
        if not isinstance(cases, list) or not cases:
            raise CorpusError(RUNS_FILE, "field 'cases': must be a non-empty list", line=number)
        self.check_header(header, number)
        self.check_count(header, len(cases), number)
        ids: list[str] = []
        for first in range(0, len(cases), _EXACT_BATCH):
            batch = cases[first : first + _EXACT_BATCH]
            for index, entry in enumerate(batch, start=first):
                try:
                    validate_record(RunCase, entry, RUNS_FILE, number, at=f"cases.{index}")
                except CorpusError:
                    # An entry that is not a corpus case, before this one, comes first.
                    self.check_entries(header, ids, number, complete=False)
                    raise
                ids.append(entry["case_id"])
            start, end = _overlap(sink.ranks, first, len(batch))
            if start < end:
                wanted = batch[start - first : end - first]
                sink.add(
                    start,
                    CaseColumns(
                        case_ids=[entry["case_id"] for entry in wanted],
                        predictions=[entry["prediction"] for entry in wanted],
                        errors=[entry.get("error") for entry in wanted],
                        costs=[entry["cost_usd"] for entry in wanted],
                        latencies=[entry["latency_ms"] for entry in wanted],
                    ),
                )
            sink.read(first + len(batch))
        hashed_ids = IdBlocks()
        hashed_ids.add(ids[self.hashed.start : self.hashed.stop])
        if not self.entries_match(len(ids), ids_digest(hashed_ids.finish())):
            self.check_entries(header, ids, number, complete=True)
        header_bytes, leaves = exact_run_parts(data, cases, self.blocks, number)
        digest = self.run_digest(header, header_bytes, leaves, number)
        return RunRead(number, header, sink, digest, tuple(leaves))


class _FastLine(Generic[SinkT]):
    """One line on the fast path; raises :class:`_FallbackError` where it cannot vouch."""

    def __init__(
        self, reader: RunReader, window: _Window, sink: SinkT, seek: RunOffsets | None
    ) -> None:
        self.reader = reader
        self.window = window
        self.number = window.line_number
        self.line_start = window.line_start
        self.sink = sink
        self.hashed = reader.hashed
        self.seek = seek
        #: It went on reading where the index said (what it read may not be this line's).
        self.sought = False
        self.members: dict[str, Any] = {}
        self.count = 0
        self.ids = IdBlocks()
        self.blocks = _Blocks()
        #: Where each block's first entry is (``locate``; None once one cannot be found).
        self.block_starts: list[int] | None = [] if reader.locate else None
        self.cases_end = -1

    def read(self) -> RunRead[SinkT]:
        window = self.window
        reader = self.reader
        window.expect(b"{")
        while True:
            window.ensure(MAX_MEMBER_BYTES)
            window.skip_space()
            key_match = _KEY.match(window.data, window.pos, window.limit)
            if key_match is None:
                raise _FallbackError
            key = key_match.group(1).decode("ascii")
            if key not in _RUN_KEYS or key in self.members:
                raise _FallbackError  # the exact reader names the unknown or repeated key
            window.pos = key_match.end()
            if key == "cases":
                self.members[key] = None
                window.expect(b"[")
                self._stream_cases()
            else:
                self.members[key] = self._member_value()
            window.skip_space()
            separator = window.data[window.pos : window.pos + 1]
            if window.pos >= window.limit or separator not in (b",", b"}"):
                raise _FallbackError
            window.pos += 1
            if separator == b"}":
                break
        window.skip_space()
        if window.pos < window.limit or (window.end == -1 and not window.eof):
            raise _FallbackError  # something after the object
        window.pos = window.limit + (1 if window.end != -1 else 0)
        cases_present = self.members.pop("cases", UNSET) is not UNSET
        header = validate_record(RunHeader, self.members, RUNS_FILE, self.number)
        if not cases_present:
            raise CorpusError(RUNS_FILE, "field 'cases': Field required", line=self.number)
        reader.check_header(header, self.number)
        if self.seek is not None and (self.seek.arm_id, self.seek.run_index) != (
            header.arm_id,
            header.run_index,
        ):
            raise _FallbackError  # the index has another run's line here
        header_bytes = self._canonical(self.members)
        if self.seek is not None and self.count != reader.cases.count:
            raise _FallbackError  # not counted from the line's start: the exact reader counts
        reader.check_count(header, self.count, self.number)
        if not reader.entries_match(self.count, ids_digest(self.ids.finish())):
            raise _FallbackError  # the exact reader names the first wrong entry
        leaves = self.blocks.finish()
        digest = reader.run_digest(header, header_bytes, leaves, self.number)
        return RunRead(self.number, header, self.sink, digest, tuple(leaves), self._located(header))

    def _located(self, header: RunHeader) -> RunOffsets | None:
        starts = self.block_starts
        if starts is None or len(starts) != evaluation_block_count(self.count):
            return None
        return RunOffsets(
            arm_id=header.arm_id,
            run_index=header.run_index,
            line=self.line_start,
            blocks=tuple(starts),
            cases_end=self.cases_end,
        )

    def _canonical(self, value: object) -> bytes:
        try:
            return canonicalize(value)
        except CanonicalizationError:
            raise _FallbackError from None

    def _member_value(self) -> object:
        """The value of a member other than ``cases``, parsed whole."""
        # A value cut by the window or by MAX_MEMBER_BYTES does not match (strings and
        # containers) or is not followed by "," or "}" (scalars): no valid member is that long.
        window = self.window
        data, start = window.data, window.pos
        limit = min(window.limit, start + MAX_MEMBER_BYTES)
        first = data[start : start + 1]
        if first == b'"':
            match = _STRING.match(data, start, limit)
            end = -1 if match is None else match.end()
        elif first in (b"{", b"["):
            end = _container_end(data, start, limit)
        else:
            match = _SCALAR.match(data, start, limit)
            end = -1 if match is None else match.end()
        if end == -1:
            raise _FallbackError
        window.pos = end
        try:
            return parse_json(data[start:end])
        except (ValueError, RecursionError):
            raise _FallbackError from None

    def _stream_cases(self) -> None:
        """The entries after ``[`` up to the closing ``]``, in batches: those of the hashed
        ranks decoded, checked and hashed, the others only decoded as JSON and counted."""
        window = self.window
        window.skip_space()
        if window.data[window.pos : window.pos + 1] == b"]":
            raise _FallbackError  # an empty list: the exact reader says so
        if self.seek is not None and self.hashed.start:
            # Past the entries before this shard's: where the index says they end.
            self._seek(self.seek.blocks[self.hashed.start // EVALUATION_BLOCK_CASES])
            self._counted(self.hashed.start)
        while True:
            window.skip_space()
            hashing = self.hashed.start <= self.count < self.hashed.stop
            with paused_gc():  # until the batch is dropped (see paused_gc)
                if hashing:
                    end = _decode_batch(window, _DECODE_CASES, self._decoded)
                    if end < 0:
                        # The window may hold entries past the hashed ranks that do not
                        # decode (the shard that owns them refuses them): read the batch as
                        # JSON, then decode only the hashed entries in full.
                        end = _decode_batch(window, _SKIP_CASES, self._skipped)
                else:
                    end = _decode_batch(window, _SKIP_CASES, self._skipped)
            if end < 0:
                if window.line_read or window.limit - window.pos >= MAX_BATCH_WINDOW:
                    raise _FallbackError
                window.fill()
                continue
            window.pos = end
            window.skip_space()
            separator = window.data[window.pos : window.pos + 1]
            if window.pos >= window.limit or separator not in (b",", b"]"):
                raise _FallbackError
            if separator == b"]":
                self.cases_end = window.position
                window.pos += 1
                return
            window.pos += 1
            if self.seek is not None and self.count >= self.hashed.stop:
                # Past the entries after this shard's: to the end of ``cases``.
                self._seek(self.seek.cases_end)
                after = self.reader.cases.count - self.count
                if window.data[window.pos : window.pos + 1] != b"]" or after < 0:
                    raise _FallbackError
                self._counted(after)
                window.pos += 1
                return

    def _seek(self, offset: int) -> None:
        """Go on reading at ``offset``, where the (untrusted) index says an entry starts or
        ``cases`` ends: what is read there is checked as if it had been reached by reading
        (ids, leaves), and anything that does not fit sends the line to the exact reader."""
        window = self.window
        # An offset past the file's end is not sought: the operating system refuses those
        # past the file system's largest file (EINVAL), and none of them can be an entry.
        # Nor is one in a later line: what is there is another line's (a run's the index
        # lists without offsets, or one no run has), which this line's reading would step
        # over uncounted (an error in a later line would name the wrong line, a run there
        # would be missing).
        if not window.position < offset < window.size or not window.within_line(offset):
            raise _FallbackError
        self.sought = True
        window.reset(offset)
        window.ensure(1)

    def _skipped(self, _piece: bytes, raws: list[Raw]) -> None:
        """Entries outside the hashed ranks: counted; those from the start of the hashed
        ranks on (a batch that crosses it, once per run) decoded in full and hashed."""
        first = self.count
        start, end = _overlap(self.hashed, first, len(raws))
        if start >= end:
            self._counted(len(raws))
            return
        self.block_starts = None  # the entries' text is joined anew below
        self._counted(start - first)
        inner = b",".join(raws[start - first : end - first])
        try:
            records = _DECODE_CASES(b"[" + inner + b"]")
        except _DECODE_ERRORS:
            raise _FallbackError from None
        self._hash(inner, records)
        self._counted(first + len(raws) - end)

    def _decoded(self, piece: bytes, records: list[RunCaseLine]) -> None:
        """Entries decoded in full from inside the hashed ranks: hashed; any past their end
        (a batch that crosses it, once per run) only counted."""
        inside = min(self.count + len(records), self.hashed.stop) - self.count
        if inside == len(records):
            if self.block_starts is not None:
                self._locate(self.block_starts, piece, len(records))
            self._hash(piece, records)
            return
        raws = _SKIP_CASES(b"[" + piece + b"]")  # the same text: it decodes
        self._hash(b",".join(raws[:inside]), records[:inside])
        self._counted(len(records) - inside)

    def _locate(self, starts: list[int], piece: bytes, count: int) -> None:
        """Add to ``starts`` where the blocks that start among the ``count`` entries of
        ``piece`` (the text of the next entries, from the first's ``{``) start in the file."""
        offset = self.window.position  # of piece[0]
        rank = self.count
        boundary = -(-rank // EVALUATION_BLOCK_CASES) * EVALUATION_BLOCK_CASES
        position = 0
        while boundary < self.count + count:
            if boundary > rank:
                match = _leading_elements(boundary - rank).match(piece, position)
                if match is None:  # not the entries' text as written: no offsets
                    self.block_starts = None
                    return
                position = match.end()
                rank = boundary
            starts.append(offset + position)
            boundary += EVALUATION_BLOCK_CASES

    def _counted(self, count: int) -> None:
        if count:
            self.count += count
            self.sink.read(self.count)

    def _hash(self, piece: bytes, records: list[RunCaseLine]) -> None:
        """Entries of the hashed ranks (``piece`` their text): to the sink (its ranks), into
        the ids digest and, in their RFC 8785 form, into their blocks' leaves."""
        ids = list(map(_CASE_ID, records))
        costs = list(map(_COST, records))
        latencies = list(map(_LATENCY, records))
        start, end = _overlap(self.sink.ranks, self.count, len(records))
        if start < end:  # before the numbers below are changed to their RFC 8785 form
            part = slice(start - self.count, end - self.count)
            self.sink.add(start, _columns(ids, records, costs, latencies, part=part))
        self.sink.read(self.count + len(records))
        _rfc8785_numbers(records, costs, "cost_usd")
        _rfc8785_numbers(records, latencies, "latency_ms")
        colons = 0
        for segment in block_parts(records, self.count % EVALUATION_BLOCK_CASES):
            canonical = _ENCODE(segment)
            colons += canonical.count(b":")
            self.blocks.add(canonical[1:-1], len(segment))
        # msgspec keeps the last of two equal keys: a dropped member drops its colon.
        if colon_count(piece) != colons:
            raise _FallbackError
        try:
            self.ids.add(ids)
        except UnicodeEncodeError:  # an id no case has: the exact reader names its line
            raise _FallbackError from None
        self.count += len(records)


class _Blocks:
    """The leaves of consecutive blocks of a run's case results, from the RFC 8785 text of
    the results: a block's leaf is the SHA-256 of ``0x00`` and the block as a JSON array
    (``runner.corpus.evaluation_files``), the block closed after every
    :data:`EVALUATION_BLOCK_CASES` results and at the end."""

    def __init__(self) -> None:
        self.leaves: list[bytes] = []
        self._block: Any = None  # hashlib's object: no public type
        self._filled = 0

    def add(self, inner: bytes, count: int) -> None:
        """The next ``count`` results (within one block), their texts joined by commas."""
        if self._block is None:
            self._block = hashlib.sha256(LEAF_PREFIX + b"[" + inner)
        else:
            self._block.update(b"," + inner)
        self._filled += count
        if self._filled == EVALUATION_BLOCK_CASES:
            self._close()

    def finish(self) -> list[bytes]:
        if self._block is not None:
            self._close()
        return self.leaves

    def _close(self) -> None:
        self._block.update(b"]")
        self.leaves.append(self._block.digest())
        self._block = None
        self._filled = 0


def _overlap(ranks: range, first: int, count: int) -> tuple[int, int]:
    """The ranks of ``ranks`` among ``first`` to ``first + count - 1`` (start, end)."""
    return max(first, ranks.start), min(first + count, ranks.stop)


def _columns(
    ids: list[str],
    records: list[RunCaseLine],
    costs: list[Any],
    latencies: list[Any],
    *,
    part: slice,
) -> CaseColumns:
    """The columns of ``records[part]`` (ids, costs and latencies already taken out)."""
    if (part.start, part.stop) != (0, len(records)):
        ids, costs, latencies = ids[part], costs[part], latencies[part]
        records = records[part]
    return CaseColumns(
        case_ids=ids,
        predictions=list(map(_PREDICTION, records)),
        errors=[None if error is UNSET else error for error in map(_ERROR, records)],
        costs=costs,
        latencies=latencies,
    )


def _decode_batch(
    window: _Window,
    decode: Callable[[bytes], list[Any]],
    on_batch: Callable[[bytes, Any], None] | None,
) -> int:
    """Decode the complete entries at ``window.pos`` (as many as the window holds), hand
    them to ``on_batch`` with their text, and return the index after the last; -1 when
    there are none (or they do not decode)."""
    data, start, limit = window.data, window.pos, window.limit
    cut = data.rfind(b"}", start, limit)
    for _ in range(_CUT_ATTEMPTS):
        if cut < start:
            return -1
        try:
            records = decode(b"[" + data[start : cut + 1] + b"]")
        except _DECODE_ERRORS:
            cut = data.rfind(b"}", start, cut)
        else:
            break
    else:
        match = _ELEMENTS.match(data, start, limit)
        if match is None:
            return -1
        cut = match.end() - 1
        try:
            records = decode(b"[" + data[start : cut + 1] + b"]")
        except _DECODE_ERRORS:
            return -1
    if on_batch is not None:
        on_batch(data[start : cut + 1], records)
    return cut + 1


def _container_end(data: bytes, start: int, limit: int) -> int:
    depth = 0
    for token in _BRACKET_TOKENS.finditer(data, start, limit):
        char = token.group()
        if char in (b"{", b"["):
            depth += 1
        elif char in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                return token.end()
    return -1


def _rfc8785_numbers(records: list[RunCaseLine], values: list[Any], field: str) -> None:
    """Give msgspec the numbers it writes unlike RFC 8785 in their RFC 8785 form: integral
    doubles (``12.0``, ``1e16``: as integers below 2**53, else as text) and doubles below
    1e-5 (``1e-6``: as text). Every other double msgspec writes as RFC 8785 does."""
    for index in [
        index
        for index, value in enumerate(values)
        if value.__class__ is float and (value < 1e-5 or value.is_integer())
    ]:
        value = values[index]
        if value.is_integer() and value < _INTEGRAL_LIMIT:
            setattr(records[index], field, int(value))
        else:
            setattr(records[index], field, Raw(format_number(value).encode("ascii")))


def first_out_of_order(ids: Sequence[str], corpus_ids: Sequence[str]) -> str | None:
    """Where a run's case ids (each corpus case once) first leave the corpus order: the
    message (``field 'cases.K.case_id': ...``), or None when they keep it."""
    for index, (case_id, expected) in enumerate(zip(ids, corpus_ids, strict=True)):
        if case_id != expected:
            return (
                f"field 'cases.{index}.case_id': case {case_id!r} comes before {expected!r}; "
                "a run's cases must be in ascending case_id order, as in cases.jsonl: run "
                "`attested-replay corpus normalize DIR --out DIR2`"
            )
    return None
