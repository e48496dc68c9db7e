"""``runs.index.json``: every run's block leaves, so that a shard hashes only its own blocks.

Every shard binds the evaluation digest of the whole corpus, whose run part is a tree over
each run's blocks of case results (``runner.corpus.evaluation_files``). Without this file a shard
decodes, re-encodes and hashes every run record to get it; with it, a shard hashes the blocks
it scores, checks that the file lists the same leaves for them, and takes the other leaves
from the file: it reads the other entries only as JSON, to count them.

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
from runner.corpus.evaluation_files import Evaluation, RunsIndex
from runner.corpus.jsonio import parse_small_json

RUNS_INDEX_FILE: Final = "runs.index.json"
RUNS_INDEX_FORMAT: Final = "attested-replay.runs-index/v1"
#: 64 hex digits per block and run: a million blocks in all (256 million case results over
#: all runs) fit; a larger corpus is sharded without an index.
MAX_RUNS_INDEX_BYTES: Final = 64 << 20


class _IndexedRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    arm_id: str = Field(min_length=1, max_length=20)
    run_index: int = Field(ge=1, le=5)
    #: The run's leaves, in block order, as lowercase hex (32 bytes each).
    leaves: str = Field(pattern=r"^[0-9a-f]*$")


class _IndexDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal["attested-replay.runs-index/v1"]
    block_cases: int
    case_count: int = Field(ge=1)
    runs: Annotated[tuple[_IndexedRun, ...], Field(min_length=1, strict=False)]


def read_runs_index(corpus_dir: Path, evaluation: Evaluation, case_count: int) -> RunsIndex | None:
    """The runs index beside ``runs.jsonl``, checked against the corpus (its case count and
    the plan's runs), or None when there is none.

    Raises:
        CorpusError: the file cannot be read, or is not an index of this corpus's runs.
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
    try:
        document = _IndexDocument.model_validate(parse_small_json(data, RUNS_INDEX_FILE))
    except ValidationError as exc:
        raise CorpusError(RUNS_INDEX_FILE, describe_validation_error(exc)) from None
    if document.block_cases != EVALUATION_BLOCK_CASES:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"field 'block_cases': {document.block_cases}, this evaluation digest has blocks "
            f"of {EVALUATION_BLOCK_CASES} case results",
        )
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
    return RunsIndex(file=RUNS_INDEX_FILE, leaves=leaves)


@dataclass(frozen=True, slots=True)
class BuiltIndex:
    """A runs index, ready to be written to :data:`RUNS_INDEX_FILE`."""

    data: bytes
    runs: int
    blocks: int
    evaluation_digest: str


def encode_runs_index(case_count: int, runs: Mapping[tuple[str, int], Sequence[bytes]]) -> bytes:
    """The file's bytes (RFC 8785 and a newline) for ``runs``' leaves, in the given order.

    Raises:
        CorpusError: they would exceed :data:`MAX_RUNS_INDEX_BYTES`, which every shard
            refuses (without an index each shard hashes every run record).
    """
    document = {
        "format": RUNS_INDEX_FORMAT,
        "block_cases": EVALUATION_BLOCK_CASES,
        "case_count": case_count,
        "runs": [
            {"arm_id": arm_id, "run_index": run_index, "leaves": b"".join(leaves).hex()}
            for (arm_id, run_index), leaves in runs.items()
        ],
    }
    data = canonicalize(document) + b"\n"
    if len(data) > MAX_RUNS_INDEX_BYTES:
        raise CorpusError(
            RUNS_INDEX_FILE,
            f"the index of {len(runs)} runs of {case_count} cases would be {len(data)} bytes, "
            f"over the {MAX_RUNS_INDEX_BYTES}-byte limit: shard without it",
        )
    return data
