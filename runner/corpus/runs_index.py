"""``runs.index.json``: the leaves of every block of the cases and of every run, so that a
shard hashes only its own blocks.

The corpus checksum is a tree over blocks of ``cases.jsonl`` (``runner.corpus.checksum``):
the index lists every block's leaf and byte offset, and a shard reads, checks and hashes only
its own blocks of ``cases.jsonl`` and takes the other leaves from the index
(``runner.corpus.case_blocks``), with the argument below for its checksum as for its
evaluation digest.

Every shard binds the evaluation digest of the whole corpus, whose run part is a tree over
each run's blocks of case results (``runner.corpus.evaluation_files``). Without this file a shard
decodes, re-encodes and hashes every run record to get it; with it, a shard hashes the blocks
it scores, checks that the file lists the same leaves for them, and takes the other leaves
from the file. The file also lists where each run's line, blocks and end of ``cases`` are, so
a shard seeks past the other entries (``runner.corpus.run_records``: what it finds there is
checked, and a run it cannot read so goes to the exact reader); a run listed without them is
read whole, the other entries decoded only as JSON, to count them.

The file comes from the operator (``attested-replay corpus index DIR`` writes it:
``runner.pipeline.replay.index_corpus``) and is not trusted. A shard never binds a leaf it
did not compute without another shard computing it:
shard ``i`` checks the leaves of its own blocks, so when every shard of a run binds one
evaluation digest (the merged envelope's check) that digest is the root of the leaves the N
shards computed, block by block, from what each of them scored; a tenant's pinned digest then
determines every block each shard scored. An index that disagrees with the blocks a shard
hashes fails that shard (exit 1, naming the run and block); one that lies about another
shard's blocks makes this shard bind another digest than the shard that hashed them, and the
merge refuses the set (exit 7), or the tenant's pinned digest does (exit 8).
"""

from __future__ import annotations

import binascii
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from attestation.contracts import EVALUATION_BLOCK_CASES, evaluation_block_count
from attestation.encoding.canonical import canonicalize
from attestation.encoding.json_document import describe_validation_error
from attestation.files import FileTooLargeError, read_regular
from attestation.transparency.merkle import HASH_SIZE
from runner.corpus.errors import CorpusError
from runner.corpus.evaluation_files import Evaluation, RunOffsets, RunsIndex
from runner.corpus.jsonio import parse_small_json

RUNS_INDEX_FILE: Final = "runs.index.json"
RUNS_INDEX_FORMAT: Final = "attested-replay.runs-index/v3"
#: 64 hex digits and an offset (up to 12 digits) per block of the cases and of each run: about
#: 850,000 blocks in all (over 200 million case results over the cases and all runs) fit; a
#: larger corpus is sharded without an index.
MAX_RUNS_INDEX_BYTES: Final = 64 << 20
_FORMATS: Final = "attested-replay.runs-index/"


_Offset = Annotated[int, Field(ge=0)]


class _IndexedRunOffsets(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    #: Where the run's line starts in ``runs.jsonl``.
    line: _Offset
    #: Where each block's first entry starts, in block order.
    blocks: Annotated[tuple[_Offset, ...], Field(strict=False)]
    #: Where the ``]`` closing the run's ``cases`` is.
    cases_end: _Offset


class _IndexedRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    arm_id: str = Field(min_length=1, max_length=20)
    run_index: int = Field(ge=1, le=5)
    #: The run's leaves, in block order, as lowercase hex (32 bytes each).
    leaves: str = Field(pattern=r"^[0-9a-f]*$")
    #: Where its blocks are, or null when ``corpus index`` could not locate them (a line
    #: the exact reader read): shards then read past the other shards' entries.
    offsets: _IndexedRunOffsets | None


class _IndexedCases(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    #: Every block's leaf of the corpus checksum's tree, in order, as lowercase hex.
    leaves: str = Field(pattern=r"^[0-9a-f]*$")
    #: The byte offset in ``cases.jsonl`` where each block starts, then the file's size.
    offsets: Annotated[tuple[_Offset, ...], Field(strict=False)]


class _IndexDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal["attested-replay.runs-index/v3"]
    block_cases: int
    case_count: int = Field(ge=1)
    cases: _IndexedCases
    runs: Annotated[tuple[_IndexedRun, ...], Field(min_length=1, strict=False)]


@dataclass(frozen=True, slots=True)
class CaseBlocksIndex:
    """The index's blocks of ``cases.jsonl``: not trusted (``runner.corpus.case_blocks``
    checks a shard's own blocks against them)."""

    case_count: int
    #: Every block's leaf, in order.
    leaves: tuple[bytes, ...]
    #: Where each block starts in ``cases.jsonl``, then the file's size (one more than
    #: :attr:`leaves`, ascending).
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IndexDocument:
    """A runs index file read and checked on its own (before the corpus is known)."""

    document: _IndexDocument
    cases: CaseBlocksIndex


def read_index_document(corpus_dir: Path) -> IndexDocument | None:
    """The index beside the corpus, checked on its own (format, block size, the cases'
    leaves and offsets), or None when there is none.

    Raises:
        CorpusError: the file cannot be read, or is not an index.
    """
    path = corpus_dir / RUNS_INDEX_FILE
    try:
        data = read_regular(path, MAX_RUNS_INDEX_BYTES)
    except FileNotFoundError:
        return None
    except FileTooLargeError as exc:
        raise CorpusError(
            RUNS_INDEX_FILE, f"file larger than {MAX_RUNS_INDEX_BYTES} bytes"
        ) from exc
    except OSError as exc:
        raise CorpusError(RUNS_INDEX_FILE, f"cannot read: {exc.strerror or exc}") from exc
    parsed = parse_small_json(data, RUNS_INDEX_FILE)
    listed = parsed.get("format")
    if isinstance(listed, str) and listed != RUNS_INDEX_FORMAT and listed.startswith(_FORMATS):
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field 'format': {listed!r}, this replay reads {RUNS_INDEX_FORMAT!r}: rebuild the "
            "index with `attested-replay corpus index DIR`",
        )
    try:
        document = _IndexDocument.model_validate(parsed)
    except ValidationError as exc:
        raise CorpusError(RUNS_INDEX_FILE, describe_validation_error(exc)) from None
    if document.block_cases != EVALUATION_BLOCK_CASES:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field 'block_cases': {document.block_cases}, this evaluation digest has blocks "
            f"of {EVALUATION_BLOCK_CASES} case results",
        )
    return IndexDocument(document, _case_blocks(document))


def _case_blocks(document: _IndexDocument) -> CaseBlocksIndex:
    blocks = evaluation_block_count(document.case_count)
    cases = document.cases
    if len(cases.leaves) != 2 * HASH_SIZE * blocks:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field 'cases.leaves': {len(cases.leaves)} hex digits, {document.case_count} "
            f"cases make {blocks} blocks of {2 * HASH_SIZE}",
        )
    offsets = cases.offsets
    if len(offsets) != blocks + 1 or offsets[0] != 0:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field 'cases.offsets': {len(offsets)} offsets, {blocks} blocks need {blocks + 1} "
            "starting at 0 (each block's start, then the file's size)",
        )
    for position in range(blocks):
        if offsets[position + 1] <= offsets[position]:
            raise CorpusError(
                RUNS_INDEX_FILE,
                f"field 'cases.offsets.{position + 1}': {offsets[position + 1]} does not come "
                f"after {offsets[position]}",
            )
    raw = binascii.unhexlify(cases.leaves)
    return CaseBlocksIndex(
        case_count=document.case_count,
        leaves=tuple(raw[i : i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE)),
        offsets=offsets,
    )


def read_runs_index(corpus_dir: Path, evaluation: Evaluation, case_count: int) -> RunsIndex | None:
    """The runs index beside ``runs.jsonl``, checked against the corpus (its case count and
    the plan's runs), or None when there is none.

    Raises:
        CorpusError: the file cannot be read, or is not an index of this corpus's runs.
    """
    read = read_index_document(corpus_dir)
    return None if read is None else runs_of(read, evaluation, case_count)


def runs_of(read: IndexDocument, evaluation: Evaluation, case_count: int) -> RunsIndex:
    """The runs of an index, checked against the corpus (its case count and the plan's runs).

    Raises:
        CorpusError: it is not an index of this corpus's runs.
    """
    document = read.document
    if document.case_count != case_count:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field 'case_count': an index of {document.case_count} cases, cases.jsonl has "
            f"{case_count}: rebuild the index with `attested-replay corpus index DIR`",
        )
    plan = evaluation.plan
    wanted = {(arm.arm_id, index) for arm in plan.arms for index in range(1, plan.runs_per_arm + 1)}
    blocks = evaluation_block_count(case_count)
    leaves: dict[tuple[str, int], tuple[bytes, ...]] = {}
    offsets: dict[int, RunOffsets] = {}
    for position, run in enumerate(document.runs):
        key = (run.arm_id, run.run_index)
        if key not in wanted or key in leaves:
            what = "a second entry for" if key in leaves else "not a run of the plan:"
            raise CorpusError(
                RUNS_INDEX_FILE, f"field 'runs.{position}': {what} run {key[0]}/{key[1]}"
            )
        if len(run.leaves) != 2 * HASH_SIZE * blocks:
            raise CorpusError(
                RUNS_INDEX_FILE,
                f"field 'runs.{position}.leaves': {len(run.leaves)} hex digits, {case_count} "
                f"cases make {blocks} blocks of {2 * HASH_SIZE}",
            )
        raw = binascii.unhexlify(run.leaves)  # lowercase hex of the right length
        leaves[key] = tuple(raw[i : i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE))
        if run.offsets is not None:
            located = _run_offsets(run, run.offsets, f"runs.{position}.offsets", blocks)
            if located.line in offsets:
                raise CorpusError(
                    RUNS_INDEX_FILE,
                    f"field 'runs.{position}.offsets.line': {located.line} is where run "
                    f"{offsets[located.line].arm_id}/{offsets[located.line].run_index} starts",
                )
            offsets[located.line] = located
    _check_apart(offsets)
    return RunsIndex(file=RUNS_INDEX_FILE, leaves=leaves, offsets=offsets)


def _check_apart(offsets: Mapping[int, RunOffsets]) -> None:
    """Each run's offsets end before the next listed run's line starts."""
    ordered = sorted(offsets.values(), key=lambda run: run.line)
    for run, after in itertools.pairwise(ordered):
        if run.cases_end >= after.line:
            raise CorpusError(
                RUNS_INDEX_FILE,
                f"the offsets of run {run.arm_id}/{run.run_index} reach byte {run.cases_end}, "
                f"past the start of run {after.arm_id}/{after.run_index}'s line at "
                f"{after.line}",
            )


def _run_offsets(
    run: _IndexedRun, listed: _IndexedRunOffsets, where: str, blocks: int
) -> RunOffsets:
    """A run's offsets, checked on their own: one per block, each after the one before,
    between the line's start and the end of its ``cases``."""
    if len(listed.blocks) != blocks:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field '{where}.blocks': {len(listed.blocks)} offsets, the run has {blocks} blocks",
        )
    previous = listed.line
    for position, offset in enumerate((*listed.blocks, listed.cases_end)):
        if offset <= previous:
            field = f"blocks.{position}" if position < blocks else "cases_end"
            raise CorpusError(
                RUNS_INDEX_FILE,
                f"field '{where}.{field}': {offset} does not come after {previous}",
            )
        previous = offset
    return RunOffsets(
        arm_id=run.arm_id,
        run_index=run.run_index,
        line=listed.line,
        blocks=listed.blocks,
        cases_end=listed.cases_end,
    )


@dataclass(frozen=True, slots=True)
class BuiltIndex:
    """A runs index, ready to be written to :data:`RUNS_INDEX_FILE`."""

    data: bytes
    runs: int
    blocks: int
    evaluation_digest: str
    #: Runs listed without offsets (their blocks could not be located): shards read them whole.
    unlocated: int = 0


def encode_runs_index(
    cases: CaseBlocksIndex,
    runs: Mapping[tuple[str, int], Sequence[bytes]],
    offsets: Mapping[tuple[str, int], RunOffsets],
) -> bytes:
    """The file's bytes (RFC 8785 and a newline) for the cases' blocks and ``runs``' leaves,
    in the given order, with the offsets of the runs in ``offsets`` (null for the others).

    Raises:
        CorpusError: they would exceed :data:`MAX_RUNS_INDEX_BYTES`, which every shard
            refuses (without an index each shard hashes every run record).
    """
    document = {
        "format": RUNS_INDEX_FORMAT,
        "block_cases": EVALUATION_BLOCK_CASES,
        "case_count": cases.case_count,
        "cases": {"leaves": b"".join(cases.leaves).hex(), "offsets": list(cases.offsets)},
        "runs": [
            {
                "arm_id": arm_id,
                "run_index": run_index,
                "leaves": b"".join(leaves).hex(),
                "offsets": _encoded_offsets(offsets.get((arm_id, run_index))),
            }
            for (arm_id, run_index), leaves in runs.items()
        ],
    }
    data = canonicalize(document) + b"\n"
    if len(data) > MAX_RUNS_INDEX_BYTES:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"the index of {len(runs)} runs of {cases.case_count} cases would be {len(data)} "
            "bytes, "
            f"over the {MAX_RUNS_INDEX_BYTES}-byte limit: shard without it",
        )
    return data


def _encoded_offsets(located: RunOffsets | None) -> dict[str, object] | None:
    if located is None:
        return None
    return {"line": located.line, "blocks": list(located.blocks), "cases_end": located.cases_end}
