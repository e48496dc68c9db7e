"""Review of the runs index's offsets (runs index v3) as the hostile operator: offsets and
files a shard must survive with a CorpusError or the honest result, never another error, and
errors that name the line that is wrong (runner.corpus.run_records, runner.corpus.runs_index)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attestation.encoding.canonical import canonicalize
from attestation.envelope.model import ShardPosition
from runner.pipeline.replay import replay_corpus, write_runs_index

from .test_run_offsets import count_exact, index_document, located, write_index
from .test_run_records import reference_replay, write_corpus


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
    part = replay_corpus(corpus, shard=position)
    assert (part.evaluation_digest, canonicalize(part.result)) == reference_replay(corpus, position)
    assert exact == [4]
