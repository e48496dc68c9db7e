"""``plan.json``, ``marks.json`` and ``runs.jsonl``: loading, cross-checks and the
evaluation digest.

evaluationDigest (v2) = ``sha256:`` + SHA-256 over :data:`DIGEST_PREAMBLE`,
``JCS(plan) \\n JCS(marks) \\n`` and, for every run record in ``runs.jsonl`` (ascending
``(arm_id, run_index)``), ``JCS(record without cases) \\n hex(cases root) \\n``. A run's
cases root is the RFC 6962 Merkle tree hash of its case results in blocks of
:data:`~attestation.contracts.EVALUATION_BLOCK_CASES` (block ``i``: ranks ``256 i`` to
``256 i + 255``), each block's leaf the SHA-256 of ``0x00`` and the RFC 8785 form of the
block as a JSON array. JCS is RFC 8785 over the files' JSON values as written (numbers as
IEEE doubles). The tree lets a shard hash only its own blocks (``runner.corpus.runs_index``);
run records are read, and their leaves computed, by ``runner.corpus.run_records``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from attestation.contracts import EVALUATION_BLOCK_CASES, format_sha256, sha256_digest
from attestation.encoding.canonical import CanonicalizationError, canonicalize
from attestation.scoring.models import PassMarks, Plan
from attestation.transparency.merkle import CompactRange, leaf_hash
from runner.corpus.errors import CorpusError
from runner.corpus.jsonio import read_small_json, require_corpus_dir
from runner.corpus.models import validate_record

PLAN_FILE: Final = "plan.json"
MARKS_FILE: Final = "marks.json"
RUNS_FILE: Final = "runs.jsonl"
#: What the evaluation digest hashes first: its version and the size of a run's blocks.
DIGEST_PREAMBLE: Final = (
    f"attested-replay evaluation digest v2: run cases in blocks of {EVALUATION_BLOCK_CASES}, "
    "RFC 6962 trees\n"
).encode("ascii")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The committed plan and marks, validated against each other."""

    plan: Plan
    marks: PassMarks
    plan_canonical: bytes
    marks_canonical: bytes

    @property
    def marks_ref(self) -> str:
        """What every run record's ``marks_ref`` must be: the digest of the committed marks."""
        return sha256_digest(self.marks_canonical)

    @property
    def run_count(self) -> int:
        return len(self.plan.arms) * self.plan.runs_per_arm


def _canonical(value: object, file: str, line: int | None = None) -> bytes:
    try:
        return canonicalize(value)
    except CanonicalizationError as exc:
        raise CorpusError(file, str(exc), line=line) from exc


def load_evaluation(corpus_dir: Path) -> Evaluation:
    """Read and validate plan and marks (each on its own; whether the plan's metrics and the
    marks can be scored is the scoring rules' question: ``runner.scoring.checks.check_evaluation``).
    """
    require_corpus_dir(corpus_dir)
    # One parse per file: the values validated and scored are the ones hashed
    # (runner.corpus.numbers).
    plan_data = read_small_json(corpus_dir / PLAN_FILE)
    plan = validate_record(Plan, plan_data, PLAN_FILE)
    marks_data = read_small_json(corpus_dir / MARKS_FILE)
    marks = validate_record(PassMarks, marks_data, MARKS_FILE)
    seen: set[str] = set()
    for index, mark in enumerate(marks.marks):
        if mark.id in seen:
            raise CorpusError(MARKS_FILE, f"field 'marks.{index}.id': duplicate mark {mark.id!r}")
        seen.add(mark.id)
    return Evaluation(
        plan=plan,
        marks=marks,
        plan_canonical=_canonical(plan_data, PLAN_FILE),
        marks_canonical=_canonical(marks_data, MARKS_FILE),
    )


@dataclass(frozen=True, slots=True)
class RunOffsets:
    """Where one run record's blocks of case results lie in ``runs.jsonl``, as a runs index
    lists them: not trusted (a reader that seeks to them checks what it finds there)."""

    arm_id: str
    run_index: int
    #: The byte offset where the run's line starts.
    line: int
    #: The byte offset of each block's first entry (its ``{``), in block order.
    blocks: tuple[int, ...]
    #: The byte offset of the ``]`` that closes the run's ``cases``.
    cases_end: int


@dataclass(frozen=True, slots=True)
class RunsIndex:
    """Every run's block leaves as a runs index file lists them: not trusted (a reader
    compares the leaves of the blocks it hashes with them; ``runner.corpus.runs_index``)."""

    #: The file, for messages.
    file: str
    #: ``(arm_id, run_index)`` -> its leaves, one per block.
    leaves: Mapping[tuple[str, int], tuple[bytes, ...]]
    #: The runs whose blocks' offsets the index lists, by the offset where their line starts.
    offsets: Mapping[int, RunOffsets] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunDigest:
    """One run record's part of the evaluation digest."""

    #: RFC 8785 form of the record without ``cases``.
    header: bytes
    #: RFC 6962 root of the leaves of its blocks of case results.
    cases_root: bytes


def evaluation_digest(evaluation: Evaluation, runs: Sequence[RunDigest]) -> str:
    """``sha256:`` + the evaluation digest of plan, marks and ``runs`` (in file order)."""
    digest = hashlib.sha256(
        DIGEST_PREAMBLE + evaluation.plan_canonical + b"\n" + evaluation.marks_canonical + b"\n"
    )
    for run in runs:
        digest.update(run.header + b"\n" + run.cases_root.hex().encode("ascii") + b"\n")
    return format_sha256(digest.digest())


def cases_root(leaves: Iterable[bytes]) -> bytes:
    """The RFC 6962 root of a run's block leaves, in order."""
    tree = CompactRange()
    for leaf in leaves:
        tree.append(leaf)
    return tree.root()


def exact_run_parts(
    data: Mapping[str, Any], cases: Sequence[Any], blocks: range, number: int
) -> tuple[bytes, list[bytes]]:
    """A run record's header bytes and the leaves of ``blocks``, canonicalized in Python
    (the exact reader's, for a line the streaming reader declines)."""
    header = _canonical(dict(data), RUNS_FILE, number)
    leaves = []
    for block in blocks:
        first = block * EVALUATION_BLOCK_CASES
        part = cases[first : first + EVALUATION_BLOCK_CASES]
        leaves.append(leaf_hash(_canonical(list(part), RUNS_FILE, number)))
    return header, leaves
