"""Replay a corpus: validate, checksum, score. The API ``attested-replay run`` calls.

A replay folds every run into an exact partial (``attestation.scoring.partial``) and
builds the report from those partials. Shard ``I`` of ``N`` scores only the cases of rank
``shard_range(I, N, C)`` (whole blocks) in every run, and its result is its partials
(``attestation.scoring.shards``): merged, they give the unsharded report. It checks every
run's header and entry count; with a runs index beside the corpus
(``runner.corpus.runs_index``) it reads, checks and hashes only its own blocks of
``cases.jsonl`` (``runner.corpus.case_blocks``) and of each run, and takes the other leaves of
the corpus checksum and of the evaluation digest from the index; without one (or when told
not to use it: a tenant's reproduction) it does all of that for every case and entry.
``corpus_digests`` is what a tenant pins: the checksum and the evaluation digest, every leaf
hashed.

Memory grows with the corpus only by what the case pass keeps: a bit or a few per case (its
label's code, ``runner.corpus.case_labels``) and 32 bytes per block of ids. Run records are
read in bounded pieces (``runner.corpus.run_records``) and each run's entries are scored by
rank as they stream past (a run lists the corpus cases in ``cases.jsonl`` order); per-run
results are a few counters and the p95 tail (5% of the cases), dropped before the next run is
read; while the run records stream, megabyte buffers are unmapped when freed
(``runner.heap``). ``compute_checksum`` alone keeps nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, JsonValue

from attestation.contracts import MAX_SHARDED_CASES, evaluation_block_count
from attestation.envelope.binding import result_digest as digest_of_result
from attestation.envelope.model import ShardPosition
from attestation.scoring.metrics import RunTally
from attestation.scoring.models import Plan
from attestation.scoring.partial import (
    PartialError,
    RunPartial,
    shard_range,
    tail_size,
)
from attestation.scoring.shards import shard_result, whole_report
from attestation.tenant.fsutil import atomic_write
from runner.corpus.case_blocks import CasesPart, block_offsets, blocks_of, verify_shard_blocks
from runner.corpus.case_labels import CaseLabels
from runner.corpus.checksum import (
    CASES_FILE,
    Progress,
    compute_checksum,
    read_case_ids,
    scan_cases,
)
from runner.corpus.errors import CorpusError
from runner.corpus.evaluation_files import (
    PLAN_FILE,
    RUNS_FILE,
    Evaluation,
    load_evaluation,
)
from runner.corpus.run_records import CaseColumns, CorpusCases, IgnoreCases, RunRead, RunReader
from runner.corpus.runs_index import (
    RUNS_INDEX_FILE,
    BuiltIndex,
    CaseBlocksIndex,
    IndexDocument,
    encode_runs_index,
    read_index_document,
    runs_of,
)
from runner.errors import ChecksumMismatchError
from runner.heap import large_buffers_unmapped
from runner.scoring.checks import check_evaluation
from runner.shard_tails import tails_document

__all__ = [
    "Progress",
    "ReplayOutcome",
    "compute_checksum",
    "corpus_digests",
    "index_corpus",
    "replay_corpus",
    "write_runs_index",
]


class ReplayOutcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    corpus_checksum: str
    evaluation_digest: str
    case_count: int
    #: The evaluation report, or for a shard its shard result (partials).
    result: dict[str, JsonValue]
    result_digest: str
    shard: ShardPosition | None = None
    #: A shard that hashed only its own blocks, the others' leaves from ``runs.index.json``.
    used_runs_index: bool = False
    #: A shard's tails file (``runner.shard_tails``): its runs' latency tails, which
    #: its result attests by their Merkle roots.
    tails: bytes | None = None


def replay_corpus(
    corpus_dir: Path,
    *,
    progress: Progress | None = None,
    shard: ShardPosition | None = None,
    use_runs_index: bool = True,
    expect_checksum: str | None = None,
) -> ReplayOutcome:
    """Validate the corpus in ``corpus_dir``, checksum it and score every run (or, for
    ``shard``, that shard's cases of every run).

    A shard reads the other shards' leaves from ``runs.index.json`` when there is one, unless
    ``use_runs_index`` is false (a tenant's reproduction: it hashes every leaf itself and never
    reads an index from the operator's directory).

    ``progress(done, total)`` counts the cases read from cases.jsonl (total None, not known
    yet), then the case results scored, counted on from there (total = cases * (1 + runs)).

    ``expect_checksum`` is refused (``ChecksumMismatchError``) as soon as the cases are
    checked, before any run record is read: a shard with the index learns the checksum from
    its own blocks and the index, so its caller cannot check it in a pass of its own without
    hashing every block.

    Raises ``runner.corpus.CorpusError`` (an ``InputError``) naming file, line and field.
    """
    document = read_index_document(corpus_dir) if shard is not None and use_runs_index else None
    if document is None:
        evaluation, cases = _checked_cases(corpus_dir, progress, expect_checksum, keep_leaves=False)
        index = None
    else:
        # A shard with the index hashes its own blocks of the cases and of every run only.
        assert shard is not None
        evaluation, cases = _checked_shard_cases(corpus_dir, document, shard, expect_checksum)
        index = runs_of(document, evaluation, cases.case_count)
    plan = evaluation.plan
    case_count = cases.case_count
    labels = cases.labels
    if shard is not None and case_count > MAX_SHARDED_CASES:
        raise CorpusError(
            CASES_FILE,
            f"{case_count} cases, more than the {MAX_SHARDED_CASES} a sharded replay may have "
            "(it bounds the proofs a merge carries)",
        )
    owned = (
        range(case_count)
        if shard is None
        else range(*shard_range(shard.index, shard.count, case_count))
    )
    reader = RunReader(
        corpus_dir,
        evaluation,
        checksum=cases.checksum,
        cases=CorpusCases(
            count=case_count,
            id_blocks=cases.id_blocks,
            read_ids=lambda: read_case_ids(corpus_dir),
        ),
        count_first=shard is not None,
        hashed=owned if index is not None else None,
        index=index,
    )
    counter = _ProgressCounter(progress, case_count, case_count * (1 + evaluation.run_count))
    partials: dict[tuple[str, int], RunPartial] = {}
    # The run records stream megabyte buffers (the window, each batch, a run's tail): with
    # glibc's threshold pinned meanwhile they are unmapped when freed, instead of leaving
    # resident holes in its heap (runner.heap).
    with large_buffers_unmapped():
        for run in reader.runs(
            lambda: _RunScorer(plan, labels, owned, tail_size(case_count), counter)
        ):
            record = run.header
            try:
                # A whole run's report reads only the p95 of the tail (finish_run).
                partials[(record.arm_id, record.run_index)] = run.sink.tally.partial(
                    record.arm_id, record.run_index, last_only=shard is None
                )
            except PartialError as exc:
                raise CorpusError(
                    RUNS_FILE, f"run {record.arm_id}/{record.run_index}: {exc}", line=run.line
                ) from None
            counter.run_done()
            # The run's tally (its latency tail: megabytes at millions of cases) and leaves are
            # not kept while the next run is read.
            del run
    _check_complete(partials, evaluation)
    evaluation_digest = reader.evaluation_digest
    ordered = [
        partials[(arm.arm_id, index)]
        for arm in plan.arms
        for index in range(1, plan.runs_per_arm + 1)
    ]
    tails: bytes | None = None
    if shard is None:
        result = whole_report(
            plan=plan,
            marks=evaluation.marks,
            partials=ordered,
            corpus_checksum=cases.checksum,
            evaluation_digest=evaluation_digest,
            case_count=case_count,
        )
    else:
        result = shard_result(
            shard_index=shard.index,
            shard_count=shard.count,
            case_count=case_count,
            set_checksum=cases.checksum,
            evaluation_digest=evaluation_digest,
            # The JSON values the evaluation digest hashed (and scoring read): the verifier
            # rebuilds the report from exactly these.
            plan=json.loads(evaluation.plan_canonical),
            marks=json.loads(evaluation.marks_canonical),
            partials=ordered,
        )
        tails = tails_document(shard.index, shard.count, ordered)
    return ReplayOutcome(
        corpus_checksum=cases.checksum,
        evaluation_digest=evaluation_digest,
        case_count=case_count,
        result=result,
        result_digest=digest_of_result(result),
        shard=shard,
        used_runs_index=index is not None,
        tails=tails,
    )


def _checked_cases(
    corpus_dir: Path,
    progress: Progress | None,
    expect_checksum: str | None = None,
    *,
    keep_leaves: bool = True,
) -> tuple[Evaluation, CasesPart]:
    """A replay's checks before the run records: plan and marks (each, and whether they can
    be scored), every case (the checksum pass, which keeps the labels), the plan's set_ref and
    abstain label against the cases. ``keep_leaves``: the cases' block leaves are kept (an
    index needs them; a replay does not, and at 4M cases they are a megabyte of objects)."""
    evaluation = load_evaluation(corpus_dir)
    check_evaluation(evaluation)
    scan = scan_cases(corpus_dir, collect_labels=True, progress=progress)
    labels = scan.labels
    assert labels is not None
    cases = CasesPart(
        checksum=scan.checksum,
        case_count=scan.case_count,
        labels=labels,
        id_blocks=labels.id_blocks,
        leaves=scan.leaves if keep_leaves else (),
    )
    _check_expected_checksum(cases.checksum, expect_checksum)
    _check_cases_against_plan(corpus_dir, evaluation, cases)
    return evaluation, cases


def _checked_shard_cases(
    corpus_dir: Path, document: IndexDocument, shard: ShardPosition, expect_checksum: str | None
) -> tuple[Evaluation, CasesPart]:
    """:func:`_checked_cases` for a shard with the index: only its own blocks of the cases
    are read, checked and hashed (``runner.corpus.case_blocks``)."""
    evaluation = load_evaluation(corpus_dir)
    check_evaluation(evaluation)
    case_count = document.cases.case_count
    first, end = shard_range(shard.index, shard.count, case_count)
    cases = verify_shard_blocks(corpus_dir, document.cases, blocks_of(first, end))
    _check_expected_checksum(cases.checksum, expect_checksum)
    _check_cases_against_plan(corpus_dir, evaluation, cases)
    return evaluation, cases


def _check_expected_checksum(actual: str, expected: str | None) -> None:
    if expected is not None and actual != expected:
        raise ChecksumMismatchError(
            f"corpus checksum is {actual}, expected {expected}; refusing to replay"
        )


def _check_cases_against_plan(corpus_dir: Path, evaluation: Evaluation, cases: CasesPart) -> None:
    plan = evaluation.plan
    if plan.set_ref and plan.set_ref != cases.checksum:
        raise CorpusError(
            PLAN_FILE,
            f"field 'set_ref': {plan.set_ref} is not the corpus checksum {cases.checksum}",
        )
    if plan.abstain_label is not None:
        _check_no_abstain_label(corpus_dir, cases.labels, plan.abstain_label)


@dataclass(frozen=True, slots=True)
class CorpusDigests:
    """What a replay of a corpus binds about its inputs: the cases' checksum and the digest of
    the evaluation (plan, marks and every leaf of the run records)."""

    corpus_checksum: str
    evaluation_digest: str


def corpus_digests(corpus_dir: Path) -> CorpusDigests:
    """The corpus checksum and evaluation digest a replay of ``corpus_dir`` binds (what a
    tenant pins), after every check of a replay but the scoring.

    Raises:
        CorpusError: the corpus is invalid.
    """
    cases, evaluation_digest, _ = _every_leaf(corpus_dir, locate=False)
    return CorpusDigests(cases.checksum, evaluation_digest)


def _every_leaf(
    corpus_dir: Path, *, locate: bool
) -> tuple[CasesPart, str, dict[tuple[str, int], RunRead[IgnoreCases]]]:
    """A replay's checks but the scoring, each run's leaves hashed from runs.jsonl (and,
    if ``locate``, its blocks located): the cases, the evaluation digest and each run read,
    by (arm, run index)."""
    evaluation, cases = _checked_cases(corpus_dir, None)
    reader = RunReader(
        corpus_dir,
        evaluation,
        checksum=cases.checksum,
        cases=CorpusCases(
            count=cases.case_count,
            id_blocks=cases.id_blocks,
            read_ids=lambda: read_case_ids(corpus_dir),
        ),
        locate=locate,
    )
    runs = {(read.header.arm_id, read.header.run_index): read for read in reader.runs(IgnoreCases)}
    _check_complete(runs, evaluation)
    return cases, reader.evaluation_digest, runs


def index_corpus(corpus_dir: Path) -> BuiltIndex:
    """The runs index of a corpus (``runner.corpus.runs_index``: the leaves and offsets of
    the blocks of ``cases.jsonl`` and of every run), after every check of a replay but
    the scoring: a corpus a replay refuses gets no index.

    Raises:
        CorpusError: the corpus is invalid, or its index would exceed the index's size cap.
    """
    cases, evaluation_digest, runs = _every_leaf(corpus_dir, locate=True)
    blocks = CaseBlocksIndex(
        case_count=cases.case_count,
        leaves=cases.leaves,
        offsets=block_offsets(corpus_dir, cases.case_count),
    )
    located = {key: read.offsets for key, read in runs.items() if read.offsets is not None}
    return BuiltIndex(
        data=encode_runs_index(blocks, {key: read.leaves for key, read in runs.items()}, located),
        runs=len(runs),
        blocks=evaluation_block_count(cases.case_count),
        evaluation_digest=evaluation_digest,
        unlocated=len(runs) - len(located),
    )


def write_runs_index(corpus_dir: Path) -> BuiltIndex:
    """:func:`index_corpus`, written beside the corpus files (atomically).

    Raises:
        CorpusError: the corpus is invalid (nothing is written).
        OSError: the index cannot be written.
    """
    built = index_corpus(corpus_dir)
    atomic_write(corpus_dir / RUNS_INDEX_FILE, built.data)
    return built


class _ProgressCounter:
    """Counts cases read, then entries scored; never reports going back (a run record the
    exact reader restarts is counted again from its start)."""

    def __init__(self, progress: Progress | None, done: int, total: int) -> None:
        self.progress = progress
        self.base = done
        self.total = total
        self.shown = done

    def entries(self, count: int) -> None:
        if self.progress is not None and self.base + count > self.shown:
            self.shown = self.base + count
            self.progress(self.shown, self.total)

    def run_done(self) -> None:
        self.base = self.shown


class _RunScorer:
    """A run's entries folded into a tally by rank: the entry of rank k is the corpus case
    of rank k (``RunReader`` checks that), scored against the k-th label. Only the ranks in
    ``ranks`` (a shard's range; every rank for a whole run) are read and scored."""

    def __init__(
        self,
        plan: Plan,
        labels: CaseLabels,
        owned: range,
        tail: int,
        counter: _ProgressCounter,
    ) -> None:
        self.tally = RunTally(plan.positive_label, plan.abstain_label, tail=tail)
        self.labels = labels
        self.ranks = owned
        self.counter = counter

    def add(self, rank: int, columns: CaseColumns) -> None:
        if not (self.ranks.start <= rank and rank + len(columns) <= self.ranks.stop):
            raise ValueError(f"entries of ranks {rank}..{rank + len(columns) - 1} not scored here")
        predictions, errors = columns.predictions, columns.errors
        answers = (
            predictions
            if errors.count(None) == len(errors)
            # An error makes the case an error whatever the prediction says.
            else [
                None if error is not None else p
                for p, error in zip(predictions, errors, strict=True)
            ]
        )
        self.tally.add_batch(
            self.labels.labels(rank, rank + len(columns)),
            answers,
            columns.costs,
            columns.latencies,
        )

    def read(self, entries: int) -> None:
        self.counter.entries(entries)


def _check_no_abstain_label(corpus_dir: Path, labels: CaseLabels, abstain_label: str) -> None:
    # An answer equal to its label is right, and an abstention never is: a case labelled
    # with the abstain label would make both true at once.
    if abstain_label not in labels.names:
        return
    rank = labels.first_rank + labels.codes.index(labels.names.index(abstain_label))
    case_id = read_case_ids(corpus_dir)[rank]
    raise CorpusError(
        CASES_FILE,
        f"field 'label': case {case_id!r} is labelled with the plan's abstain_label "
        f"{abstain_label!r}; a label must be an answer, not an abstention",
        line=rank + 1,
    )


def _check_complete(partials: Mapping[tuple[str, int], object], evaluation: Evaluation) -> None:
    runs_per_arm = evaluation.plan.runs_per_arm
    for arm in evaluation.plan.arms:
        absent = [i for i in range(1, runs_per_arm + 1) if (arm.arm_id, i) not in partials]
        if absent:
            raise CorpusError(
                RUNS_FILE,
                f"arm {arm.arm_id!r} has no run record for run_index {absent[0]} "
                f"(the plan asks for {runs_per_arm} runs per arm)",
            )
