"""Run records read in bounded pieces (runner.corpus.run_records) give what reading each
line whole gives: the same evaluation digest and the same report or shard result, for records
written every way a JSON writer may (member order, spacing, escapes, number spellings), cut
anywhere by the window; valid records never need the exact reader."""

from __future__ import annotations

import hashlib
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attestation.encoding.canonical import canonicalize
from attestation.envelope.model import ShardPosition
from attestation.scoring.metrics import RunTally
from attestation.scoring.models import PassMarks, Plan
from attestation.scoring.partial import RunPartial, shard_range, tail_size
from attestation.scoring.shards import shard_result, whole_report
from runner.corpus import checksum as case_scan
from runner.corpus import run_records, runs_index
from runner.corpus.check import check_corpus
from runner.corpus.checksum import compute_checksum
from runner.corpus.errors import CorpusError, CorpusOrderError
from runner.corpus.evaluation_files import load_evaluation
from runner.corpus.jsonio import parse_json
from runner.corpus.models import RunCase
from runner.corpus.runs_index import RUNS_INDEX_FILE
from runner.pipeline.replay import replay_corpus, write_runs_index

from .test_shards import marks_for, plan_for

LABELS = ["flag", "clear", "maybe"]
# Predictions that trip a naive cutter: braces, brackets, quotes, key names, escapes.
ODD_TEXT = [
    "flag}",
    '{"case_id": "c-000"}',
    "]}, {",
    '"cases": [',
    "tab\there",
    "nl\nhere",
    "\u00fcber \u4ed8\u6b3e \U0001f4e6",
    "\u2028\u007f",
    "\\",
]
NUMBERS = [0, 0.0, -0.0, 3, 3.0, 12.5, 0.1, 1e-7, 2.5e-6, 9.99e-6, 1e16, 1.5e17, 1e21, 4.2e300,
           0.30000000000000004, 9007199254740991, 123456.789]  # fmt: skip


#: The evaluation digest v2 as docs/replay.md defines it, written out here independently.
DIGEST_PREAMBLE = (
    b"attested-replay evaluation digest v2: run cases in blocks of 256, RFC 6962 trees\n"
)
BLOCK = 256


def tree_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1 MTH of leaf hashes (at least one)."""
    if len(leaves) == 1:
        return leaves[0]
    split = 1 << ((len(leaves) - 1).bit_length() - 1)  # the largest power of two below n
    return hashlib.sha256(b"\x01" + tree_root(leaves[:split]) + tree_root(leaves[split:])).digest()


def run_part(record: dict[str, Any]) -> bytes:
    """A run record's part of the evaluation digest: its header, then its cases root."""
    header = {key: value for key, value in record.items() if key != "cases"}
    cases = record["cases"]
    leaves = [
        hashlib.sha256(b"\x00" + rfc8785.dumps(cases[first : first + BLOCK])).digest()
        for first in range(0, len(cases), BLOCK)
    ]
    return rfc8785.dumps(header) + b"\n" + tree_root(leaves).hex().encode() + b"\n"


def reference_replay(corpus: Path, shard: ShardPosition | None) -> tuple[str, bytes]:
    """What the replay computes, without streaming: each line parsed whole, every entry
    validated by the pydantic model, scored one at a time against a label mapping, the
    digest over ``rfc8785`` of each file's values (run cases in blocks, as trees)."""
    cases = [json.loads(line) for line in (corpus / "cases.jsonl").read_text().splitlines()]
    labels = {case["case_id"]: case["label"] for case in cases}
    ranks = {case["case_id"]: rank for rank, case in enumerate(cases)}
    plan_data: Any = parse_json((corpus / "plan.json").read_bytes())
    marks_data: Any = parse_json((corpus / "marks.json").read_bytes())
    plan = Plan.model_validate(plan_data)
    digest = hashlib.sha256(
        DIGEST_PREAMBLE + rfc8785.dumps(plan_data) + b"\n" + rfc8785.dumps(marks_data) + b"\n"
    )
    owned = (
        range(len(cases))
        if shard is None
        else range(*shard_range(shard.index, shard.count, len(cases)))
    )
    partials: list[RunPartial] = []
    for line in (corpus / "runs.jsonl").read_bytes().strip(b"\n").split(b"\n"):
        record: Any = parse_json(line)
        assert isinstance(record, dict)
        digest.update(run_part(record))
        tally = RunTally(plan.positive_label, plan.abstain_label, tail=tail_size(len(cases)))
        for entry in record["cases"]:
            case = RunCase.model_validate(entry)
            if ranks[case.case_id] in owned:
                tally.add(
                    labels[case.case_id],
                    case.prediction,
                    has_error=case.error is not None,
                    cost_usd=case.cost_usd,
                    latency_ms=case.latency_ms,
                )
        partials.append(tally.partial(record["arm_id"], record["run_index"]))
    evaluation_digest = "sha256:" + digest.hexdigest()
    checksum = compute_checksum(corpus)
    if shard is None:
        result = whole_report(
            plan=plan,
            marks=PassMarks.model_validate(marks_data),
            partials=partials,
            corpus_checksum=checksum,
            evaluation_digest=evaluation_digest,
            case_count=len(cases),
        )
    else:
        result = shard_result(
            shard_index=shard.index,
            shard_count=shard.count,
            case_count=len(cases),
            set_checksum=checksum,
            evaluation_digest=evaluation_digest,
            plan=json.loads(rfc8785.dumps(plan_data)),
            marks=json.loads(rfc8785.dumps(marks_data)),
            partials=partials,
        )
    return evaluation_digest, canonicalize(result)


def spelled(value: Any, rng: random.Random, *, ascii_only: bool) -> str:
    """``value`` as JSON text the way some writer may spell it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        choice = rng.randrange(4)
        if choice == 1:
            return f"{value:.16e}"  # 17 significant digits: the same double
        if choice == 2 and "e" not in text and "inf" not in text:
            return text + "00"
        if choice == 3:
            return text.upper()
        return text
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=ascii_only)
    space = rng.choice(["", " ", "  ", "\t"])
    if isinstance(value, list):
        return (
            "["
            + ("," + space).join(spelled(item, rng, ascii_only=ascii_only) for item in value)
            + "]"
        )
    items = list(value.items())
    rng.shuffle(items)
    return (
        "{"
        + ("," + space).join(
            json.dumps(key) + ":" + space + spelled(item, rng, ascii_only=ascii_only)
            for key, item in items
        )
        + "}"
    )


def write_corpus(directory: Path, seed: int, *, cases: int, runs_per_arm: int = 2) -> Path:
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    corpus_cases = [
        {"case_id": f"c-{number:04d}", "label": rng.choice(LABELS)} for number in range(cases)
    ]
    (directory / "cases.jsonl").write_bytes(b"".join(canonicalize(c) + b"\n" for c in corpus_cases))
    plan = plan_for(["A0", "A1"], abstain_label="review")
    plan["runs_per_arm"] = runs_per_arm
    marks = marks_for(
        [{"id": "M1", "metric": "recall_at_least", "arm": "A1", "threshold": 10, "rule": "r"}]
    )
    (directory / "plan.json").write_text(json.dumps(plan, indent=2))
    (directory / "marks.json").write_text(json.dumps(marks))
    checksum = compute_checksum(directory)
    marks_ref = "sha256:" + hashlib.sha256(canonicalize(marks)).hexdigest()
    lines = []
    for arm in ("A0", "A1"):
        for index in range(1, runs_per_arm + 1):
            entries = []
            for case in corpus_cases:
                entry: dict[str, Any] = {
                    "case_id": case["case_id"],
                    "prediction": rng.choice([*LABELS, "review", None, *ODD_TEXT]),
                    "cost_usd": rng.choice([*NUMBERS, None, rng.random() / 100]),
                    "latency_ms": rng.choice([*NUMBERS, None, rng.uniform(1, 5000)]),
                }
                if rng.random() < 0.15:
                    entry["error"] = rng.choice(["timeout", "bad } answer", "\u00fcberlastet"])
                entries.append(entry)
            record = {
                "arm_id": arm,
                "run_index": index,
                "set_ref": checksum,
                "marks_ref": marks_ref,
                "usage": {"source": "test {writer}", "input_tokens": rng.randint(0, 99)},
                "cases": entries,
            }
            lines.append(spelled(record, rng, ascii_only=rng.random() < 0.5))
    (directory / "runs.jsonl").write_text("\n".join(lines) + "\n" * rng.randrange(2))
    return directory


def forbid_exact_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a valid run record needed the exact reader")

    monkeypatch.setattr(run_records.RunReader, "_exact_line", refuse)


def assert_replays_as_reference(corpus: Path, shard: ShardPosition | None) -> None:
    """``replay_corpus`` of ``corpus`` (or of its ``shard``) binds the digest and computes the
    result :func:`reference_replay` does."""
    part = replay_corpus(corpus, shard=shard)
    assert (part.evaluation_digest, canonicalize(part.result)) == reference_replay(corpus, shard)


def assert_as_reference(corpus: Path, shards: tuple[int, ...] = (1, 3)) -> None:
    assert_replays_as_reference(corpus, None)
    for count in shards:
        for index in range(count):
            assert_replays_as_reference(corpus, ShardPosition(index=index, count=count))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(min_value=0, max_value=2**32), cases=st.integers(min_value=1, max_value=40))
def test_streamed_records_replay_like_whole_lines(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, seed: int, cases: int
) -> None:
    corpus = write_corpus(tmp_path_factory.mktemp("corpus") / "c", seed, cases=cases)
    with monkeypatch.context() as patch:
        forbid_exact_reader(patch)
        assert_as_reference(corpus)


@pytest.mark.parametrize("chunk", [1, 7, 64, 333])
def test_any_window_size_gives_the_same_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    corpus = write_corpus(tmp_path / "c", 5, cases=60)
    expected = reference_replay(corpus, None)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", chunk)
    forbid_exact_reader(monkeypatch)
    outcome = replay_corpus(corpus)
    assert (outcome.evaluation_digest, canonicalize(outcome.result)) == expected


def test_arm_id_after_the_cases_is_read_like_any_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_corpus(tmp_path / "c", 11, cases=30)
    lines = []
    for line in (corpus / "runs.jsonl").read_text().strip("\n").split("\n"):
        record = json.loads(line)
        arm_id = record.pop("arm_id")
        lines.append(json.dumps({**record, "arm_id": arm_id}))
    (corpus / "runs.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 50)
    forbid_exact_reader(monkeypatch)
    assert_as_reference(corpus, shards=(2,))


def replay_peak(corpus: Path) -> int:
    """The most memory Python held at once while ``corpus`` was replayed (allocations are
    counted, not timed: the same corpus gives the same number on any machine)."""
    tracemalloc.start()
    try:
        replay_corpus(corpus)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_run_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 32 KiB windows instead of 1 MiB, so that runs a few hundred KiB long are many windows.
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 1 << 15)
    monkeypatch.setattr(case_scan, "CHUNK_BYTES", 1 << 15)
    forbid_exact_reader(monkeypatch)
    small = write_corpus(tmp_path / "small", 11, cases=1000)
    large = write_corpus(tmp_path / "large", 11, cases=6000)
    line = max(map(len, (large / "runs.jsonl").read_bytes().split(b"\n")))
    assert line > 600_000
    growth = replay_peak(large) - replay_peak(small)
    # What may grow: a byte per case for its label, the p95 tails (5% of the cases) and
    # rounding; holding one run line whole would add more than the line itself.
    assert growth < 64 << 10


def runs_of(corpus: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (corpus / "runs.jsonl").read_text().strip("\n").split("\n")
    ]


def write_runs(corpus: Path, records: list[dict[str, Any]]) -> None:
    (corpus / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_entries_out_of_case_order_are_refused(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c", 2, cases=6)
    records = runs_of(corpus)
    entries = records[2]["cases"]
    entries[3], entries[4] = entries[4], entries[3]
    write_runs(corpus, records)
    with pytest.raises(CorpusOrderError) as caught:
        replay_corpus(corpus)
    assert str(caught.value) == (
        "runs.jsonl:3: field 'cases.3.case_id': case 'c-0004' comes before 'c-0003'; a run's "
        "cases must be in ascending case_id order, as in cases.jsonl: run `attested-replay "
        "corpus normalize DIR --out DIR2`"
    )
    for index in (0, 1):
        with pytest.raises(CorpusOrderError):
            replay_corpus(corpus, shard=ShardPosition(index=index, count=2))
    # corpus check applies the same rule
    assert [problem.text() for problem in check_corpus(corpus).problems] == [str(caught.value)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda entries: entries.append(dict(entries[-1])),
            "runs.jsonl:2: field 'cases.6.case_id': duplicate case 'c-0005' in this run",
        ),
        (
            lambda entries: entries.pop(0),
            "runs.jsonl:2: field 'cases': run A0/2 is missing 1 case(s), first 'c-0000'",
        ),
        (
            lambda entries: entries[2].update(case_id="c-9999"),
            "runs.jsonl:2: field 'cases.2.case_id': case 'c-9999' is not in cases.jsonl",
        ),
        (
            lambda entries: entries[4].update(cost_usd=-1),
            "runs.jsonl:2: field 'cases.4.cost_usd': Input should be greater than or equal to 0 (found -1)",
        ),
        (
            lambda entries: entries[1].update(latency_ms=True),
            "runs.jsonl:2: field 'cases.1.latency_ms': Input should be a number (found True)",
        ),
        (
            lambda entries: entries[5].update(error=None),
            "runs.jsonl:2: field 'cases.5.error': error may be omitted but not null (found None)",
        ),
        (
            lambda entries: entries[0].update(extra=1),
            (
                "runs.jsonl:2: field 'cases.0.extra': unknown key (allowed: case_id, prediction, "
                "error, cost_usd, latency_ms)"
            ),
        ),
        (
            lambda entries: entries.__setitem__(3, [entries[3]]),
            ("runs.jsonl:2: field 'cases.3': Input should be a valid dictionary"),
        ),
        (
            lambda entries: entries[2].update(cost_usd=2**53),
            (
                "runs.jsonl:2: integer 9007199254740992 is outside the I-JSON range "
                "+-(2**53-1) that a double holds exactly"
            ),
        ),
        (
            # an unknown case before an invalid entry is named first, as when read whole
            lambda entries: (entries[1].update(case_id="zzz"), entries[3].update(cost_usd="x")),
            "runs.jsonl:2: field 'cases.1.case_id': case 'zzz' is not in cases.jsonl",
        ),
    ],
)
def test_a_wrong_entry_is_named_by_file_line_and_field(
    tmp_path: Path, change: Any, message: str
) -> None:
    corpus = write_corpus(tmp_path / "c", 3, cases=6)
    records = runs_of(corpus)
    change(records[1]["cases"])
    write_runs(corpus, records)
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"arm_id": "A0", "cases": [], ',
            (
                "runs.jsonl:1: invalid JSON: Expecting property name enclosed in double quotes: "
                "line 1 column 31 (char 30)"
            ),
        ),
        ('{"arm_id": "A0", "arm_id": "A0"}', "runs.jsonl:1: invalid JSON: duplicate key 'arm_id'"),
        ("   ", "runs.jsonl:1: empty line"),
        ('["not", "an object"]', "runs.jsonl:1: a line must be a JSON object"),
    ],
)
def test_a_malformed_line_gets_the_exact_readers_message(
    tmp_path: Path, text: str, message: str
) -> None:
    corpus = write_corpus(tmp_path / "c", 3, cases=4)
    (corpus / "runs.jsonl").write_text(text + "\n")
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus)
    assert str(caught.value) == message


def test_a_duplicate_key_inside_an_entry_is_refused(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c", 3, cases=4)
    write_runs(corpus, runs_of(corpus))
    text = (corpus / "runs.jsonl").read_text()
    # msgspec would keep the last of two equal keys: the colon count catches it
    assert '"case_id": "c-0002"' in text
    text = text.replace('"case_id": "c-0002"', '"case_id": "c-0003", "case_id": "c-0002"', 1)
    (corpus / "runs.jsonl").write_text(text)
    with pytest.raises(
        CorpusError, match=r"^runs\.jsonl:1: invalid JSON: duplicate key 'case_id'$"
    ):
        replay_corpus(corpus)


def test_a_line_longer_than_the_cap_is_refused_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_corpus(tmp_path / "c", 3, cases=50)
    monkeypatch.setattr(run_records, "MAX_RUN_LINE_BYTES", 2000)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 100)
    forbid_exact_reader(monkeypatch)
    with pytest.raises(CorpusError, match=r"^runs\.jsonl:1: line longer than 2000 bytes$"):
        replay_corpus(corpus)


class _RecordingSink:
    """Keeps what the reader hands over for the ranks it asks for."""

    def __init__(self, ranks: range) -> None:
        self.ranks = ranks
        self.added: list[tuple[int, run_records.CaseColumns]] = []
        self.progress: list[int] = []

    def add(self, rank: int, columns: run_records.CaseColumns) -> None:
        self.added.append((rank, columns))

    def read(self, entries: int) -> None:
        self.progress.append(entries)


def reader_of(corpus: Path) -> run_records.RunReader:
    """A reader of every run record of ``corpus``, after its checksum pass."""
    scan = case_scan.scan_cases(corpus, collect_labels=True)
    assert scan.labels is not None
    return run_records.RunReader(
        corpus,
        load_evaluation(corpus),
        checksum=scan.checksum,
        cases=run_records.CorpusCases(
            count=scan.case_count, id_blocks=scan.labels.id_blocks, read_ids=list
        ),
    )


@pytest.mark.parametrize("exact", [False, True])
def test_a_sink_gets_the_entries_of_its_ranks_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact: bool
) -> None:
    """Columns are built for the sink's ranks alone (a shard's share), whichever reader
    takes the line, and every entry still counts as read."""
    corpus = write_corpus(tmp_path / "c", 3, cases=800)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 4096)  # many batches per run
    monkeypatch.setattr(run_records, "_EXACT_BATCH", 100)
    if exact:

        def fall_back(self: object) -> None:
            raise run_records._FallbackError

        monkeypatch.setattr(run_records._FastLine, "read", fall_back)
    else:
        forbid_exact_reader(monkeypatch)
    reader = reader_of(corpus)
    runs = list(reader.runs(lambda: _RecordingSink(range(350, 700))))
    assert len(runs) == 4
    for run, record in zip(runs, runs_of(corpus), strict=True):
        sink = run.sink
        assert len(sink.added) > 1
        ranks = [rank + k for rank, columns in sink.added for k in range(len(columns))]
        assert ranks == list(range(350, 700))
        entries = record["cases"][350:700]
        assert [i for _, c in sink.added for i in c.case_ids] == [e["case_id"] for e in entries]
        assert [p for _, c in sink.added for p in c.predictions] == [
            e["prediction"] for e in entries
        ]
        assert [x for _, c in sink.added for x in c.errors] == [e.get("error") for e in entries]
        assert [repr(x) for _, c in sink.added for x in c.latencies] == [
            repr(e["latency_ms"]) for e in entries
        ]
        assert sink.progress == sorted(sink.progress)
        assert sink.progress[-1] == 800


# -- the runs index: a shard hashes only its own blocks ------------------------------------------


def count_hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of entries the streaming reader decodes in full and hashes, per call."""
    hashed: list[int] = []
    real = run_records._FastLine._hash

    def spy(self: Any, piece: bytes, records: list[Any]) -> None:
        hashed.append(len(records))
        real(self, piece, records)

    monkeypatch.setattr(run_records._FastLine, "_hash", spy)
    return hashed


@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
@pytest.mark.parametrize("count", [2, 3, 5])
def test_shards_with_the_runs_index_hash_their_blocks_and_bind_the_whole_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, count: int
) -> None:
    """1100 cases are 5 blocks; small windows put block and shard edges inside batches."""
    corpus = write_corpus(tmp_path / "c", 21, cases=1100)
    written = write_runs_index(corpus)
    assert (written.runs, written.blocks) == (4, 5)
    assert written.evaluation_digest == reference_replay(corpus, None)[0]
    monkeypatch.setattr(run_records, "CHUNK_BYTES", chunk)
    forbid_exact_reader(monkeypatch)
    hashed = count_hashed(monkeypatch)
    for index in range(count):
        position = ShardPosition(index=index, count=count)
        hashed.clear()
        assert_replays_as_reference(corpus, position)
        first, end = shard_range(index, count, 1100)
        assert sum(hashed) == 4 * (end - first)  # its own entries of each of the 4 runs


def test_an_unsharded_replay_ignores_the_runs_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_corpus(tmp_path / "c", 3, cases=600)
    write_runs_index(corpus)
    (corpus / RUNS_INDEX_FILE).write_text("not an index")
    hashed = count_hashed(monkeypatch)
    assert replay_corpus(corpus).evaluation_digest == reference_replay(corpus, None)[0]
    assert sum(hashed) == 4 * 600


def _stale(corpus: Path) -> None:
    records = runs_of(corpus)
    records[3]["cases"][550]["prediction"] = "changed after the index"
    write_runs(corpus, records)


def test_a_stale_index_fails_the_shard_whose_block_changed(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c", 4, cases=600)  # blocks 0, 1, 2 (512..599)
    indexed = write_runs_index(corpus).evaluation_digest
    _stale(corpus)
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=2, count=3))
    assert str(caught.value) == (
        "runs.index.json: run A1/2 (runs.jsonl line 4): block 2 (case results 512..599) "
        "differs from runs.jsonl: rebuild the index with `attested-replay corpus index DIR`"
    )
    # A shard that does not hash that block binds the digest the index gives: not the
    # changed corpus's, so its set with the owner's (which fails) never merges.
    other = replay_corpus(corpus, shard=ShardPosition(index=0, count=3))
    assert other.evaluation_digest == indexed
    assert replay_corpus(corpus).evaluation_digest != indexed


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
@pytest.mark.parametrize("where", [(10, 0, 2), (550, 2, 0)], ids=["before", "after"])
def test_an_invalid_entry_fails_the_shard_that_owns_it_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, where: tuple[int, int, int]
) -> None:
    """An entry before or after a shard's blocks, in the window it reads (1 MiB holds the
    whole line), is the owner's to refuse; the other shard, reading the runs whole (the
    index lists no offsets: tests/replay/test_run_offsets.py has those), counts it and takes
    its block's leaf from the index (``where``: the entry's rank, its owner, another shard)."""
    rank, owner, other = where
    corpus = write_corpus(tmp_path / "c", 5, cases=600)
    write_runs_index(corpus)
    document = _index_of(corpus)
    for run in document["runs"]:
        run["offsets"] = None
    (corpus / RUNS_INDEX_FILE).write_text(json.dumps(document))
    records = runs_of(corpus)
    records[0]["cases"][rank]["latency_ms"] = -5
    write_runs(corpus, records)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", chunk)
    with pytest.raises(CorpusError, match=rf"^runs\.jsonl:1: field 'cases\.{rank}\.latency_ms'"):
        replay_corpus(corpus, shard=ShardPosition(index=owner, count=3))
    forbid_exact_reader(monkeypatch)
    replay_corpus(corpus, shard=ShardPosition(index=other, count=3))


def _index_of(corpus: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((corpus / RUNS_INDEX_FILE).read_text())
    return document


REBUILD = "rebuild the index with `attested-replay corpus index DIR`"
BAD_INDEXES: list[tuple[str, Any, str]] = [
    (
        "case count",
        lambda d: d.update(case_count=601),
        f"field 'case_count': an index of 601 cases, cases.jsonl has 600: {REBUILD}",
    ),
    (
        "block size",
        lambda d: d.update(block_cases=128),
        "field 'block_cases': 128, this evaluation digest has blocks of 256 case results",
    ),
    (
        "format",
        lambda d: d.update(format="attested-replay.runs-index/v0"),
        (
            "field 'format': 'attested-replay.runs-index/v0', this replay reads "
            f"'attested-replay.runs-index/v3': {REBUILD}"
        ),
    ),
    ("extra key", lambda d: d.update(signed_by="AMD"), "signed_by: Extra inputs are not permitted"),
    (
        "foreign run",
        lambda d: d["runs"][0].update(arm_id="A9"),
        "field 'runs.0': not a run of the plan: run A9/1",
    ),
    (
        "run twice",
        lambda d: d["runs"].append(d["runs"][0]),
        "field 'runs.4': a second entry for run A0/1",
    ),
    (
        "short",
        lambda d: d["runs"][1].update(leaves=d["runs"][1]["leaves"][:128]),
        "field 'runs.1.leaves': 128 hex digits, 600 cases make 3 blocks of 64",
    ),
    (
        "uppercase",
        lambda d: d["runs"][1].update(leaves=d["runs"][1]["leaves"].upper()),
        "runs.1.leaves: String should match pattern '^[0-9a-f]*$'",
    ),
    (
        "cases' leaves short",
        lambda d: d["cases"].update(leaves=d["cases"]["leaves"][:128]),
        "field 'cases.leaves': 128 hex digits, 600 cases make 3 blocks of 64",
    ),
    (
        "an offset missing",
        lambda d: d["cases"]["offsets"].pop(),
        (
            "field 'cases.offsets': 3 offsets, 3 blocks need 4 starting at 0 (each block's start, "
            "then the file's size)"
        ),
    ),
    (
        "no cases",
        lambda d: d.pop("cases"),
        "cases: Field required",
    ),
]


def test_an_index_that_misplaces_or_mislabels_a_block_of_cases_is_refused(
    tmp_path: Path,
) -> None:
    """Shard 1 of 3 (block 1 of 600 cases) checks the offsets and leaves it reads by."""
    corpus = write_corpus(tmp_path / "c", 7, cases=600)
    write_runs_index(corpus)
    honest = _index_of(corpus)
    offsets = honest["cases"]["offsets"]
    size = (corpus / "cases.jsonl").stat().st_size
    leaf = honest["cases"]["leaves"][64:128]
    forged = "0" * 64
    cases: list[tuple[Any, str]] = [
        (
            lambda c: c["offsets"].__setitem__(3, size + 1),
            f"field 'cases.offsets.3': {size + 1} bytes, cases.jsonl has {size}",
        ),
        (
            lambda c: c["offsets"].__setitem__(1, offsets[1] + 1),
            (
                f"field 'cases.offsets.1': offset {offsets[1] + 1} is not the start of a line of "
                "cases.jsonl"
            ),
        ),
        (
            lambda c: c["offsets"].__setitem__(2, offsets[1]),
            f"field 'cases.offsets.2': {offsets[1]} does not come after {offsets[1]}",
        ),
        (
            lambda c: c.update(leaves=c["leaves"][:64] + forged + c["leaves"][128:]),
            (
                f"field 'cases.leaves': block 1 (cases 257 to 512 of cases.jsonl) hashes to {leaf}, "
                f"the index lists {forged}"
            ),
        ),
    ]
    for change, message in cases:
        document = json.loads(json.dumps(honest))
        change(document["cases"])
        (corpus / RUNS_INDEX_FILE).write_text(json.dumps(document))
        with pytest.raises(CorpusError) as caught:
            replay_corpus(corpus, shard=ShardPosition(index=1, count=3))
        assert str(caught.value).removesuffix(f": {REBUILD}") == f"runs.index.json: {message}"


@pytest.mark.parametrize(
    ("change", "message"), [b[1:] for b in BAD_INDEXES], ids=[b[0] for b in BAD_INDEXES]
)
def test_an_index_that_is_not_one_of_this_corpus_is_refused(
    tmp_path: Path, change: Any, message: str
) -> None:
    corpus = write_corpus(tmp_path / "c", 7, cases=600)
    write_runs_index(corpus)
    document = _index_of(corpus)
    change(document)
    (corpus / RUNS_INDEX_FILE).write_text(json.dumps(document))
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=1, count=3))
    assert str(caught.value) == f"runs.index.json: {message}"


def test_a_run_missing_from_the_index_is_named(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c", 8, cases=600)
    write_runs_index(corpus)
    document = _index_of(corpus)
    del document["runs"][2]
    (corpus / RUNS_INDEX_FILE).write_text(json.dumps(document))
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=1, count=3))
    assert str(caught.value) == (
        "runs.index.json: run A1/1 (runs.jsonl line 3) is not in the index: rebuild the index "
        "with `attested-replay corpus index DIR`"
    )


def test_no_index_for_a_corpus_the_replay_refuses(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c", 9, cases=300)
    write_runs(corpus, [r for r in runs_of(corpus) if r["arm_id"] != "A1"])
    with pytest.raises(CorpusError) as caught:
        write_runs_index(corpus)
    assert str(caught.value) == (
        "runs.jsonl: arm 'A1' has no run record for run_index 1 (the plan asks for 2 runs per arm)"
    )
    assert not (corpus / RUNS_INDEX_FILE).exists()


def test_an_index_over_its_size_cap_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_corpus(tmp_path / "c", 10, cases=300)
    monkeypatch.setattr(runs_index, "MAX_RUNS_INDEX_BYTES", 500)
    with pytest.raises(CorpusError, match=r"over the 500-byte limit: shard without it$"):
        write_runs_index(corpus)
    assert not (corpus / RUNS_INDEX_FILE).exists()
