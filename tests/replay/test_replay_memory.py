"""What a replay holds per case and per run: labels packed in as few bits as their number
needs, and no finished run (its tally, its leaves) kept while the next one is read."""

from __future__ import annotations

import weakref
from pathlib import Path

from runner.corpus import checksum as case_scan
from runner.corpus import run_records

from .test_run_records import LABELS, reader_of, write_corpus


class _Sink:
    """A sink that can be watched by a weak reference."""

    ranks = range(0)

    def add(self, rank: int, columns: run_records.CaseColumns) -> None:
        pass

    def read(self, entries: int) -> None:
        pass


def test_a_finished_run_is_not_held_while_the_next_is_read(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c", 5, cases=300)
    reader = reader_of(corpus)
    made: list[weakref.ref[_Sink]] = []
    alive_when_made: list[list[bool]] = []

    def new_sink() -> _Sink:
        # Called as each run record starts to be read: which earlier sinks are alive then?
        alive_when_made.append([ref() is not None for ref in made])
        sink = _Sink()
        made.append(weakref.ref(sink))
        return sink

    for run in reader.runs(new_sink):
        assert run.sink is made[-1]()
        del run  # what replay_corpus does once it has the run's partial
    assert alive_when_made == [[], [False], [False, False], [False, False, False]]


def test_three_labels_take_two_bits_a_case(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c", 7, cases=1000)
    scan = case_scan.scan_cases(corpus, collect_labels=True, workers=1)
    labels = scan.labels
    assert labels is not None
    assert sorted(labels.names) == sorted(LABELS)
    assert len(LABELS) == 3
    assert (labels.codes.width, labels.codes.size_bytes) == (2, 250)
    assert len(labels.id_blocks.joined()) == 32 * 4  # 1000 cases: 4 blocks of up to 256
