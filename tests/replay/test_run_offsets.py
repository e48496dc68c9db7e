"""The runs index's offsets of every run's blocks: ``corpus index`` finds them, a shard seeks
by them past the other shards' entries, and none of them is trusted (runner.corpus.run_records,
runner.corpus.runs_index)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attestation.encoding.canonical import canonicalize
from attestation.envelope.model import ShardPosition
from attestation.scoring.partial import shard_range
from runner.corpus import run_records
from runner.corpus.errors import CorpusError
from runner.corpus.runs_index import RUNS_INDEX_FILE
from runner.pipeline.replay import replay_corpus, write_runs_index

from .test_run_records import (
    assert_replays_as_reference,
    forbid_exact_reader,
    reference_replay,
    runs_of,
    write_corpus,
    write_runs,
)

REBUILD = "rebuild the index with `attested-replay corpus index DIR`"
BLOCK = 256


def entry_offsets(corpus: Path) -> list[dict[str, Any]]:
    """Every run's line start, entry starts and end of ``cases``, found without the reader:
    each line parsed by ``json``'s ``raw_decode`` one value at a time (byte offsets: the
    text may not be ASCII)."""
    data = (corpus / "runs.jsonl").read_bytes()
    decoder = json.JSONDecoder()
    found = []
    line_start = 0
    for raw in data.split(b"\n"):
        if not raw:
            line_start += 1
            continue
        text = raw.decode("utf-8")

        def at(index: int, text: str = text, line_start: int = line_start) -> int:
            return line_start + len(text[:index].encode("utf-8"))

        index = text.index("[", text.index('"cases"')) + 1
        starts = []
        while True:
            while text[index] in " \t\r":
                index += 1
            starts.append(at(index))
            _, index = decoder.raw_decode(text, index)
            while text[index] in " \t\r":
                index += 1
            if text[index] == "]":
                break
            assert text[index] == ","
            index += 1
        found.append({"line": line_start, "entries": starts, "cases_end": at(index)})
        line_start += len(raw) + 1
    return found


def located(corpus: Path) -> list[dict[str, Any]]:
    """Every run's offsets as the index should list them (:func:`entry_offsets`)."""
    return [
        {"line": run["line"], "blocks": run["entries"][::BLOCK], "cases_end": run["cases_end"]}
        for run in entry_offsets(corpus)
    ]


def index_document(corpus: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((corpus / RUNS_INDEX_FILE).read_text())
    return document


def write_index(corpus: Path, document: dict[str, Any]) -> None:
    (corpus / RUNS_INDEX_FILE).write_text(json.dumps(document))


def count_skipped(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The entries the streaming reader decodes only as JSON, to count them."""
    skipped: list[int] = []
    real = run_records._SKIP_CASES

    def spy(data: bytes) -> list[Any]:
        raws = real(data)
        skipped.append(len(raws))
        return raws

    monkeypatch.setattr(run_records, "_SKIP_CASES", spy)
    return skipped


def count_exact(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lines the exact reader reads."""
    lines: list[int] = []
    real = run_records.RunReader._exact_line

    def spy(self: Any, window: Any, start: int, number: int, sink: Any) -> Any:
        lines.append(number)
        return real(self, window, start, number, sink)

    monkeypatch.setattr(run_records.RunReader, "_exact_line", spy)
    return lines


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(min_value=0, max_value=2**32),
    cases=st.integers(min_value=1, max_value=900),
    chunk=st.sampled_from([61, 4096, 1 << 20]),
)
def test_the_index_lists_where_every_block_of_every_run_starts(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    cases: int,
    chunk: int,
) -> None:
    """Any spacing, non-ASCII text, and windows that cut entries anywhere."""
    corpus = write_corpus(tmp_path_factory.mktemp("corpus") / "c", seed, cases=cases)
    with monkeypatch.context() as patch:
        patch.setattr(run_records, "CHUNK_BYTES", chunk)
        forbid_exact_reader(patch)
        write_runs_index(corpus)
    assert [run["offsets"] for run in index_document(corpus)["runs"]] == located(corpus)


@pytest.mark.parametrize("chunk", [97, 4096])
@pytest.mark.parametrize("count", [2, 3, 5])
def test_a_shard_seeks_past_the_other_shards_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, count: int
) -> None:
    """3000 cases are 12 blocks; each shard binds the whole digest and its own result, and
    decodes as JSON only the other shards' entries its windows hold past its blocks' ends
    (the first window of a line holds at least ``MAX_MEMBER_BYTES``, for the members)."""
    corpus = write_corpus(tmp_path / "c", 21, cases=3000)
    write_runs_index(corpus)
    entry_bytes = min(
        later - earlier
        for run in entry_offsets(corpus)
        for earlier, later in itertools.pairwise(run["entries"])
    )
    window = max(chunk, run_records.MAX_MEMBER_BYTES) + chunk
    monkeypatch.setattr(run_records, "CHUNK_BYTES", chunk)
    forbid_exact_reader(monkeypatch)
    skipped = count_skipped(monkeypatch)
    for index in range(count):
        position = ShardPosition(index=index, count=count)
        skipped.clear()
        assert_replays_as_reference(corpus, position)
        first, end = shard_range(index, count, 3000)
        others = 3000 - (end - first)
        assert sum(skipped) <= 4 * min(others, window // entry_bytes + 1), (index, skipped)


def test_without_offsets_a_shard_reads_the_run_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run the index lists without offsets (null: ``corpus index`` could not locate its
    blocks) is read whole, the other entries counted."""
    corpus = write_corpus(tmp_path / "c", 22, cases=1100)
    write_runs_index(corpus)
    document = index_document(corpus)
    document["runs"][2]["offsets"] = None
    write_index(corpus, document)
    forbid_exact_reader(monkeypatch)
    skipped = count_skipped(monkeypatch)
    position = ShardPosition(index=1, count=3)
    assert_replays_as_reference(corpus, position)
    first, end = shard_range(1, 3, 1100)
    assert sum(skipped) >= 1100 - (end - first)


Change = Callable[[dict[str, Any], list[dict[str, Any]]], None]


def _set_block(run: int, block: int, value: Callable[[list[dict[str, Any]]], int]) -> Change:
    def change(document: dict[str, Any], honest: list[dict[str, Any]]) -> None:
        document["runs"][run]["offsets"]["blocks"][block] = value(honest)

    return change


def _set_end(run: int, value: Callable[[list[dict[str, Any]]], int]) -> Change:
    def change(document: dict[str, Any], honest: list[dict[str, Any]]) -> None:
        document["runs"][run]["offsets"]["cases_end"] = value(honest)

    return change


# Offsets that lead elsewhere than they should but are not refused when the index is read:
# the shard (1 of 3: block 1 of 3) finds out while reading, and the exact reader, which never
# seeks, reads that run: the same digest and result as from an honest index.
MISLEADING: list[tuple[str, Change]] = [
    ("block inside an entry", _set_block(1, 1, lambda h: h[1]["blocks"][1] + 1)),
    ("block one entry early", lambda d, h: d["runs"][1]["offsets"]["blocks"].__setitem__(1, h[4])),
    ("block between two entries", _set_block(1, 1, lambda h: h[1]["blocks"][2] - 1)),
    ("end inside the entries", _set_end(1, lambda h: h[1]["blocks"][2] + 3)),
    ("end past the file", _set_end(3, lambda h: h[3]["cases_end"] + (1 << 30))),
]


@pytest.mark.parametrize(("change"), [m[1] for m in MISLEADING], ids=[m[0] for m in MISLEADING])
def test_offsets_that_mislead_send_the_run_to_the_exact_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Change
) -> None:
    corpus = write_corpus(tmp_path / "c", 23, cases=600)
    write_runs_index(corpus)
    document = index_document(corpus)
    honest = json.loads(json.dumps([run["offsets"] for run in document["runs"]]))
    # The honest offsets, and then where entry 255 of run A0/2 starts.
    change(document, [*honest, entry_offsets(corpus)[1]["entries"][255]])
    write_index(corpus, document)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 4096)  # so that it seeks to the end too
    exact = count_exact(monkeypatch)
    position = ShardPosition(index=1, count=3)
    assert_replays_as_reference(corpus, position)
    assert exact == [2 if document["runs"][1]["offsets"] != honest[1] else 4]


Document = dict[str, Any]


def _offsets(document: Document, run: int) -> dict[str, Any]:
    offsets: dict[str, Any] = document["runs"][run]["offsets"]
    return offsets


# What a shard refuses when it reads the index, before any corpus file: a change to the index,
# and the message (given the changed index).
REFUSED: list[tuple[str, Callable[[Document], None], Callable[[Document], str]]] = [
    (
        "the format before offsets",
        lambda d: d.update(format="attested-replay.runs-index/v2"),
        lambda d: (
            "field 'format': 'attested-replay.runs-index/v2', this replay reads "
            f"'attested-replay.runs-index/v3': {REBUILD}"
        ),
    ),
    (
        "a block's offset missing",
        lambda d: _offsets(d, 1)["blocks"].pop(),
        lambda d: "field 'runs.1.offsets.blocks': 2 offsets, the run has 3 blocks",
    ),
    (
        "blocks out of order",
        lambda d: _offsets(d, 2)["blocks"].reverse(),
        lambda d: (
            f"field 'runs.2.offsets.blocks.1': {_offsets(d, 2)['blocks'][1]} does not "
            f"come after {_offsets(d, 2)['blocks'][0]}"
        ),
    ),
    (
        "a block at its line's start",
        lambda d: _offsets(d, 3).update(line=_offsets(d, 3)["blocks"][0]),
        lambda d: (
            f"field 'runs.3.offsets.blocks.0': {_offsets(d, 3)['line']} does not come "
            f"after {_offsets(d, 3)['line']}"
        ),
    ),
    (
        "the end at the last block",
        lambda d: _offsets(d, 0).update(cases_end=_offsets(d, 0)["blocks"][2]),
        lambda d: (
            f"field 'runs.0.offsets.cases_end': {_offsets(d, 0)['cases_end']} does not "
            f"come after {_offsets(d, 0)['cases_end']}"
        ),
    ),
    (
        "a negative offset",
        lambda d: _offsets(d, 0).update(line=-1),
        lambda d: "runs.0.offsets.line: Input should be greater than or equal to 0",
    ),
    (
        "two runs on one line",
        lambda d: _offsets(d, 1).update(line=0),
        lambda d: "field 'runs.1.offsets.line': 0 is where run A0/1 starts",
    ),
    (
        "an end in the next run's line",
        lambda d: _offsets(d, 1).update(cases_end=_offsets(d, 2)["line"] + 5),
        lambda d: (
            f"the offsets of run A0/2 reach byte {_offsets(d, 1)['cases_end']}, past the "
            f"start of run A1/1's line at {_offsets(d, 2)['line']}"
        ),
    ),
]


@pytest.mark.parametrize(
    ("change", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_offsets_that_cannot_be_a_runs_are_refused_before_any_reading(
    tmp_path: Path,
    change: Callable[[Document], None],
    message: Callable[[Document], str],
) -> None:
    corpus = write_corpus(tmp_path / "c", 27, cases=600)
    write_runs_index(corpus)
    document = index_document(corpus)
    change(document)
    write_index(corpus, document)
    (corpus / "runs.jsonl").write_text("never read")
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=1, count=3))
    assert str(caught.value) == f"runs.index.json: {message(document)}"


def test_offsets_that_reach_into_the_next_run_are_refused(tmp_path: Path) -> None:
    """Run A0/2's blocks listed where run A1/1's are: read by them, the shard would take
    A1/1's entries and members for A0/2's."""
    corpus = write_corpus(tmp_path / "c", 24, cases=600)
    write_runs_index(corpus)
    document = index_document(corpus)
    theirs = document["runs"][2]["offsets"]
    document["runs"][1]["offsets"].update(blocks=theirs["blocks"], cases_end=theirs["cases_end"])
    write_index(corpus, document)
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=1, count=3))
    assert str(caught.value) == (
        f"runs.index.json: the offsets of run A0/2 reach byte {theirs['cases_end']}, past the "
        f"start of run A1/1's line at {theirs['line']}"
    )


def test_offsets_filed_under_another_run_send_both_to_the_exact_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs A0/1 and A0/2 swap offsets: at each line the shard finds the other run's, learns
    it from the line's members, and reads the line exactly."""
    corpus = write_corpus(tmp_path / "c", 25, cases=600)
    write_runs_index(corpus)
    document = index_document(corpus)
    runs = document["runs"]
    runs[0]["offsets"], runs[1]["offsets"] = runs[1]["offsets"], runs[0]["offsets"]
    write_index(corpus, document)
    exact = count_exact(monkeypatch)
    position = ShardPosition(index=1, count=3)
    assert_replays_as_reference(corpus, position)
    assert exact == [1, 2]


def _insert_after_block(corpus: Path, run: int, block: int, entry: dict[str, Any]) -> int:
    """Put ``entry`` into run ``run``'s cases after block ``block``; the bytes inserted."""
    data = (corpus / "runs.jsonl").read_bytes()
    at = located(corpus)[run]["blocks"][block + 1]
    inserted = json.dumps(entry).encode() + b", "
    (corpus / "runs.jsonl").write_bytes(data[:at] + inserted + data[at:])
    return len(inserted)


def _shift(document: dict[str, Any], after: int, by: int) -> None:
    """Move every offset of the index past byte ``after`` by ``by`` bytes."""
    for run in document["runs"]:
        offsets = run["offsets"]
        offsets["line"] += by if offsets["line"] > after else 0
        offsets["blocks"] = [o + by if o > after else o for o in offsets["blocks"]]
        offsets["cases_end"] += by if offsets["cases_end"] > after else 0


def test_an_entry_no_shard_reads_changes_nothing_a_shard_binds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An extra entry between two shards' blocks (3000 cases: shard 0 of 3 has blocks 0-3,
    shard 1 from block 4 on), the offsets moved to step over it: every shard binds the
    evaluation digest and result of the corpus without it. What a shard binds is what its
    leaves determine, which is what a tenant pins (docs/scale.md); bytes of the file that
    no shard scores are not part of it. The tenant's own reading of the file (``expected
    --corpus``, a replay without the index) refuses it."""
    corpus = write_corpus(tmp_path / "c", 26, cases=3000)
    write_runs_index(corpus)
    original = {
        index: reference_replay(corpus, ShardPosition(index=index, count=3)) for index in range(3)
    }
    at = located(corpus)[1]["blocks"][4]
    document = index_document(corpus)
    extra = dict(runs_of(corpus)[1]["cases"][5], case_id="c-extra")
    _shift(document, at - 1, _insert_after_block(corpus, 1, 3, extra))
    write_index(corpus, document)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 4096)
    exact = count_exact(monkeypatch)
    for index in range(3):
        part = replay_corpus(corpus, shard=ShardPosition(index=index, count=3))
        assert (part.evaluation_digest, canonicalize(part.result)) == original[index]
    assert exact == []
    with pytest.raises(CorpusError, match=r"^runs\.jsonl:2: field 'cases\.1024\.case_id'"):
        replay_corpus(corpus)


def test_an_entry_added_to_a_run_fails_the_shard_that_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry appended to a run (the file written anew): with the index as built, no
    offset fits and every shard reads the runs whole (the exact reader names the count);
    with the offsets of the new file, only the shard whose blocks end the run reads it, and
    refuses it, so the set of shards never merges."""
    corpus = write_corpus(tmp_path / "c", 6, cases=3000)
    write_runs_index(corpus)
    document = index_document(corpus)
    records = runs_of(corpus)
    records[1]["cases"].append(dict(records[1]["cases"][-1], case_id="c-9999"))
    write_runs(corpus, records)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 4096)
    message = (
        r"^runs\.jsonl:2: field 'cases': run A0/2 has 3001 case results, the corpus has 3000 "
        r"cases$"
    )
    for index in range(3):
        with pytest.raises(CorpusError, match=message):
            replay_corpus(corpus, shard=ShardPosition(index=index, count=3))
    for run, offsets in zip(document["runs"], located(corpus), strict=True):
        run["offsets"] = offsets
    write_index(corpus, document)
    exact = count_exact(monkeypatch)
    for index in range(2):
        replay_corpus(corpus, shard=ShardPosition(index=index, count=3))
    assert exact == []
    with pytest.raises(CorpusError, match=message):
        replay_corpus(corpus, shard=ShardPosition(index=2, count=3))
    assert exact == [2]


def test_runs_the_exact_reader_reads_are_indexed_without_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Callable[..., tuple[int, str, str]]
) -> None:
    """Lines the streaming reader cannot vouch for go to the exact reader, which finds no
    offsets: the index lists those runs with null, says so, and shards read them whole."""
    corpus = write_corpus(tmp_path / "c", 28, cases=600)

    def cannot_vouch(self: Any) -> None:
        raise run_records._FallbackError

    with monkeypatch.context() as patch:
        patch.setattr(run_records._FastLine, "read", cannot_vouch)
        built = write_runs_index(corpus)
        code, out, err = run_cli("corpus", "index", str(corpus))
    assert (built.runs, built.unlocated) == (4, 4)
    assert (code, err) == (0, "")
    assert out.endswith(
        "\nnote: 4 run(s) listed without offsets (read by the exact reader): every shard reads "
        "those whole\n"
    )
    assert [run["offsets"] for run in index_document(corpus)["runs"]] == [None] * 4
    forbid_exact_reader(monkeypatch)
    position = ShardPosition(index=1, count=3)
    assert_replays_as_reference(corpus, position)


@pytest.mark.parametrize(
    ("newline_at", "offset", "within"),
    [
        (60, 50, True),  # after the offset: not sought past
        (50, 50, True),  # at the offset: what is there is checked as an entry
        (49, 50, False),  # the byte before the offset: the offset starts another line
        (20, 50, False),  # in the third piece the search reads
        (None, 99, True),
        (None, 5, True),  # in the window itself
    ],
)
def test_a_seek_reads_the_bytes_it_steps_over_for_a_newline(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    newline_at: int | None,
    offset: int,
    within: bool,
) -> None:
    """``_Window.within_line``, in pieces of ``CHUNK_BYTES`` past the window: True only when
    no newline lies between the window's end and ``offset``; the handle is left where the
    window's reading had it (a seek or the exact reader moves it next)."""
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 7)
    data = bytearray(b"x" * 100)
    if newline_at is not None:
        data[newline_at] = ord("\n")
    path = tmp_path / "runs.jsonl"
    path.write_bytes(bytes(data))
    with path.open("rb") as handle:
        window = run_records._Window(handle)
        assert window.start_line()
        assert window.end == -1  # the first piece holds no newline: the rest is searched
        assert window.within_line(offset) is within
        assert handle.tell() == 7
