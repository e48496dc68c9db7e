"""Review of the runs index's offsets (runs index v3) as the hostile operator: offsets and
files a shard must survive with a CorpusError or the honest result, never another error, and
errors that name the line that is wrong (runner.corpus.run_records, runner.corpus.runs_index)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attestation.envelope.model import ShardPosition
from runner.corpus import run_records
from runner.corpus.errors import CorpusError
from runner.pipeline.replay import replay_corpus, write_runs_index

from .test_run_offsets import count_exact, index_document, located, write_index
from .test_run_records import assert_replays_as_reference, write_corpus


@pytest.mark.parametrize("offset", [2**45, 2**53 - 10])
def test_an_offset_past_what_the_file_system_can_seek_to_goes_to_the_exact_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offset: int
) -> None:
    """The last run's blocks listed at offsets the index accepts (I-JSON integers) but past
    the largest file the file system holds: seeking there raised OSError (EINVAL), a crash
    instead of the run read whole."""
    corpus = write_corpus(tmp_path / "c", 23, cases=600)
    write_runs_index(corpus)
    document = index_document(corpus)
    document["runs"][3]["offsets"].update(
        blocks=[located(corpus)[3]["blocks"][0], offset, offset + 1], cases_end=offset + 2
    )
    write_index(corpus, document)
    exact = count_exact(monkeypatch)
    position = ShardPosition(index=1, count=3)
    assert_replays_as_reference(corpus, position)
    assert exact == [4]


def test_a_line_a_seek_steps_over_does_not_shift_the_next_lines_numbers(tmp_path: Path) -> None:
    """A copy of run A0/2's line inserted after it, A0/2's offsets from block 1 on moved into
    the copy: shard 1 of 3 reads A0/2's members, then the copy's blocks and end, so the
    copy's line is read as part of A0/2's and never counted as a line: a wrong entry in the
    last line (5: A1/2) was named as line 4's, a line that is fine. The shard must name the
    first wrong line as a replay without the index does: the copy, line 3."""
    corpus = write_corpus(tmp_path / "c", 23, cases=600)
    write_runs_index(corpus)
    document = index_document(corpus)
    honest = located(corpus)
    data = (corpus / "runs.jsonl").read_bytes()
    lines = data.split(b"\n")
    record = json.loads(lines[3])
    record["cases"][300]["prediction"] = 5
    lines[3] = json.dumps(record).encode()
    copy = lines[1] + b"\n"
    at = honest[2]["line"]
    shifted = b"\n".join(lines)
    (corpus / "runs.jsonl").write_bytes(shifted[:at] + copy + shifted[at:])
    runs = document["runs"]
    moved = at - honest[1]["line"]
    runs[1]["offsets"]["blocks"][1:] = [offset + moved for offset in honest[1]["blocks"][1:]]
    runs[1]["offsets"]["cases_end"] = honest[1]["cases_end"] + moved
    runs[2]["offsets"] = {
        "line": honest[2]["line"] + len(copy),
        "blocks": [offset + len(copy) for offset in honest[2]["blocks"]],
        "cases_end": honest[2]["cases_end"] + len(copy),
    }
    runs[3]["offsets"] = None  # its line's length changed: read whole
    write_index(corpus, document)
    with pytest.raises(CorpusError) as whole:
        replay_corpus(corpus)
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=1, count=3))
    assert str(whole.value) == "runs.jsonl:3: field 'run_index': duplicate run A0/2"
    assert str(caught.value) == str(whole.value)


def test_offsets_into_a_run_listed_without_offsets_do_not_hide_that_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run A0/2's offsets from block 1 on moved into the next line, run A1/1's, which the
    index lists without offsets (so no check of the index sees them reach into it), and
    A0/2's leaf of block 1 forged to be A1/1's; every member comes before ``cases``. Shard 1
    of 3 took A1/1's entries and end for A0/2's (docs/replay.md 5.1 says another run's line
    found after a seek sends the line to the exact reader), stepped over A1/1's line, and
    then said the plan's run A1/1 had no record, naming runs.jsonl for a run its line 3
    holds. Read exactly, line 2 is A0/2's and the index's leaf for its block 1 is wrong."""
    corpus = write_corpus(tmp_path / "c", 23, cases=600)
    data = (corpus / "runs.jsonl").read_bytes()
    lines = []
    for run in located(corpus):
        members = json.loads(data[run["line"] : data.index(b"\n", run["line"])])
        del members["cases"]
        cases = data[run["blocks"][0] : run["cases_end"] + 1]
        lines.append(json.dumps(members).encode()[:-1] + b', "cases": [' + cases + b"}\n")
    (corpus / "runs.jsonl").write_bytes(b"".join(lines))
    write_runs_index(corpus)
    document = index_document(corpus)
    honest = located(corpus)
    runs = document["runs"]
    runs[2]["offsets"] = None
    runs[1]["offsets"]["blocks"][1:] = honest[2]["blocks"][1:]
    runs[1]["offsets"]["cases_end"] = honest[2]["cases_end"]
    leaf = slice(64, 128)  # block 1's, in hex
    runs[1]["leaves"] = runs[1]["leaves"][:64] + runs[2]["leaves"][leaf] + runs[1]["leaves"][128:]
    write_index(corpus, document)
    monkeypatch.setattr(run_records, "CHUNK_BYTES", 4096)  # so that shard 1 seeks to the end
    with pytest.raises(CorpusError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=1, count=3))
    assert str(caught.value) == (
        "runs.index.json: run A0/2 (runs.jsonl line 2): block 1 (case results 256..511) "
        "differs from runs.jsonl: rebuild the index with `attested-replay corpus index DIR`"
    )
