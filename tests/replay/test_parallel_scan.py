"""The blocks of ``cases.jsonl`` scanned by several processes (``runner.corpus.parallel_scan``)
give exactly what one pass gives: checksum, leaves, labels, and the same first error."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.corpus import parallel_scan
from runner.corpus.checksum import CASES_FILE, Scanner, scan_cases
from runner.corpus.errors import CorpusError
from runner.corpus.jsonio import open_corpus_file
from runner.errors import UsageError
from tests.replay.conftest import EXAMPLE_CORPUS
from tests.replay.golden import EXAMPLE_CHECKSUM
from tests.replay.test_checksum import ANY_TEXT, JSON_VALUES, reference_checksum


@pytest.fixture(autouse=True)
def _as_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan cuts parts only in a process with one thread; a test run may hold idle threads
    other tests left (servers, clients), which would make every comparison here one pass
    against itself. The guard itself is tested with real threads below."""
    monkeypatch.setattr(threading, "active_count", lambda: 1)


def scanned(directory: Path, workers: int) -> Scanner:
    """Every part at least one byte: the example's 3,000 cases in up to ``workers`` parts."""
    path = directory / CASES_FILE
    with open_corpus_file(path) as handle:
        return parallel_scan.scan_in_parts(
            path, handle, collect_labels=True, workers=workers, min_part_bytes=1
        )


def outcome(directory: Path, workers: int) -> tuple[object, ...]:
    """What a scan found (or the error it raised: its class and message)."""
    try:
        scanner = scanned(directory, workers)
    except CorpusError as exc:
        return (type(exc), str(exc))
    return found(scanner)


def found(scanner: Scanner) -> tuple[object, ...]:
    """Everything a finished scan holds: count, ids, leaves, labels."""
    labels = scanner.labels
    assert labels is not None
    return (
        scanner.count,
        scanner.first_id,
        scanner.last_id,
        scanner.blocks.finish(),
        labels.names,
        labels.codes.unpacked(0, len(labels)),
        labels.id_blocks,
    )


def part_lines(directory: Path, parts: int) -> list[tuple[int, int]]:
    path = directory / CASES_FILE
    with open_corpus_file(path) as handle:
        return parallel_scan.part_starts(handle, path.stat().st_size, parts)


@pytest.mark.parametrize("workers", [2, 3, 7])
def test_example_in_parts_is_the_single_pass(workers: int) -> None:
    assert len(part_lines(EXAMPLE_CORPUS, workers)) == workers  # 12 blocks: every part has some
    assert outcome(EXAMPLE_CORPUS, workers) == outcome(EXAMPLE_CORPUS, 1)
    assert scan_cases(EXAMPLE_CORPUS, workers=workers).checksum == EXAMPLE_CHECKSUM


def test_parts_start_at_block_ends() -> None:
    data = (EXAMPLE_CORPUS / CASES_FILE).read_bytes()
    line_starts = [0, *(index + 1 for index, byte in enumerate(data) if byte == ord("\n"))]
    # Part k starts at the first block end at or after k/5 of the bytes.
    expected = [
        next(
            (line_starts[rank], rank)
            for rank in range(0, 3000, 256)
            if line_starts[rank] >= len(data) * part // 5
        )
        for part in range(5)
    ]
    assert part_lines(EXAMPLE_CORPUS, 5) == expected
    assert [line for _, line in expected] == [0, 768, 1280, 2048, 2560]


def test_parts_stop_where_the_file_does(tmp_path: Path) -> None:
    lines = [json.dumps({"case_id": f"c-{n:04d}", "label": "x"}).encode() for n in range(300)]
    (tmp_path / CASES_FILE).write_bytes(b"\n".join(lines))  # no final newline
    # Two blocks: at most two parts, whatever is asked.
    assert [line for _, line in part_lines(tmp_path, 8)] == [0, 256]
    assert outcome(tmp_path, 8) == outcome(tmp_path, 1)
    assert scanned(tmp_path, 8).count == 300
    (tmp_path / CASES_FILE).write_bytes(b"\n".join(lines[:256]) + b"\n")
    assert part_lines(tmp_path, 4) == [(0, 0)]  # one block: one part


def test_parts_are_never_empty(tmp_path: Path) -> None:
    # One long first block: the second target falls inside the part the first cut made.
    lines = [b'{"case_id":"c-%04d","label":"x"}\n' % number for number in range(1024)]
    lines[255] = b'{"case_id":"c-0255","label":"' + b"x" * 60_000 + b'"}\n'
    (tmp_path / CASES_FILE).write_bytes(b"".join(lines))
    starts = part_lines(tmp_path, 8)
    assert [line for _, line in starts] == [0, 256, 512, 768]
    assert outcome(tmp_path, 8) == outcome(tmp_path, 1)


def test_a_failed_child_leaves_the_work_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def die(*_args: object, **_kwargs: object) -> None:
        os._exit(3)

    monkeypatch.setattr(parallel_scan, "scan_part", die)  # the forked children inherit it
    assert outcome(EXAMPLE_CORPUS, 3) == outcome(EXAMPLE_CORPUS, 1)


def test_no_fork_beside_other_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real thread count
    # A real second thread: one part, whatever other tests of this process left running.
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert parallel_scan.part_count(100 << 20, 4) == 1
    finally:
        release.set()
        thread.join()
    # The count alone decides (a test run may hold other tests' threads: counted as stated).
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert parallel_scan.part_count(100 << 20, 4) == 1
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert parallel_scan.part_count(100 << 20, 4) == 4


def test_small_files_and_one_worker_make_one_part() -> None:
    assert parallel_scan.part_count(parallel_scan.MIN_PART_BYTES * 2 - 1, 4) == 1
    assert parallel_scan.part_count(parallel_scan.MIN_PART_BYTES * 3, 4) == 3
    assert parallel_scan.part_count(100 << 20, 1) == 1


def test_worker_count_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(parallel_scan.WORKERS_VARIABLE, raising=False)
    assert parallel_scan.worker_count() == min(len(os.sched_getaffinity(0)), 16)
    monkeypatch.setenv(parallel_scan.WORKERS_VARIABLE, "3")
    assert parallel_scan.worker_count() == 3
    for wrong in ("0", "17", "two", "-1", " 2", "\u0663"):
        monkeypatch.setenv(parallel_scan.WORKERS_VARIABLE, wrong)
        with pytest.raises(UsageError) as error:
            parallel_scan.worker_count()
        assert str(error.value) == (
            f"ATTESTED_REPLAY_CHECKSUM_WORKERS={wrong!r}: expected an integer from 1 to 16"
        )


LABELS = st.sampled_from(["flag", "clear", "cl\u00e9ar", 'say "hi"', "\U0001f642"])


@st.composite
def many_cases(draw: st.DrawFn) -> list[bytes]:
    """Up to about 5 blocks of lines, canonical or not, from a few drawn bodies."""
    count = draw(st.integers(1, 1300))
    bodies: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        body: dict[str, Any] = {}
        if draw(st.booleans()):
            body["input"] = draw(JSON_VALUES)
        if draw(st.booleans()):
            body["group"] = draw(ANY_TEXT.filter(bool))
        bodies.append(body)
    labels = draw(st.lists(LABELS, min_size=1, max_size=5))
    lines: list[bytes] = []
    for number in range(count):
        case = {"case_id": f"c-{number:05d}", "label": labels[number % len(labels)]}
        case.update(bodies[number % len(bodies)])
        if number % 3:
            lines.append(rfc8785.dumps(case) + b"\n")
        else:
            lines.append(json.dumps(dict(reversed(list(case.items())))).encode() + b"\n")
    return lines


@settings(max_examples=25, deadline=None)
@given(lines=many_cases(), workers=st.integers(2, 5))
def test_parts_and_single_pass_agree(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], workers: int
) -> None:
    directory = tmp_path_factory.mktemp("p")
    (directory / CASES_FILE).write_bytes(b"".join(lines))
    assert outcome(directory, workers) == outcome(directory, 1)
    cases = [json.loads(line) for line in lines]
    assert scan_cases(directory, workers=workers).checksum == reference_checksum(cases)


BREAKAGES = {
    "not JSON": lambda line: line[:-2] + b"\n",
    "empty": lambda _line: b"\n",
    "label not a string": lambda line: line.replace(b'"label":', b'"label":1,"x":', 1),
    "duplicate id": None,
    "id out of order": None,
    "overlong": lambda _line: b'{"case_id":"' + b"a" * 70_000 + b'"}\n',
}


@settings(max_examples=40, deadline=None)
@given(
    lines=many_cases(),
    breakage=st.sampled_from(sorted(BREAKAGES)),
    where=st.floats(0, 1),
    workers=st.integers(2, 4),
)
def test_parts_raise_the_single_pass_error(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    breakage: str,
    where: float,
    workers: int,
) -> None:
    broken = list(lines)
    index = min(int(where * len(broken)), len(broken) - 1)
    if breakage == "duplicate id":
        broken.insert(index, broken[index])
    elif breakage == "id out of order":
        broken.insert(index, rfc8785.dumps({"case_id": "z", "label": "x"}) + b"\n")
    else:
        broken[index] = BREAKAGES[breakage](broken[index])  # type: ignore[misc]
    directory = tmp_path_factory.mktemp("e")
    (directory / CASES_FILE).write_bytes(b"".join(broken))
    single = outcome(directory, 1)
    assert isinstance(single[0], type)
    assert issubclass(single[0], CorpusError)
    assert outcome(directory, workers) == single


@pytest.mark.parametrize(
    ("line_256", "message"),
    [
        (
            b'{"case_id":"c-0255","label":"x"}\n',
            "cases.jsonl:257: field 'case_id': duplicate case id 'c-0255' (also on line 256)",
        ),
        (
            b'{"case_id":"c-0254x","label":"x"}\n',
            (
                "cases.jsonl:257: field 'case_id': 'c-0254x' comes after 'c-0255'; cases must be "
                "in ascending case_id order: run `attested-replay corpus normalize DIR --out DIR2` "
                "to sort the corpus"
            ),
        ),
    ],
)
def test_ids_are_checked_across_the_cut(tmp_path: Path, line_256: bytes, message: str) -> None:
    lines = [b'{"case_id":"c-%04d","label":"x"}\n' % number for number in range(400)]
    lines[256] = line_256
    (tmp_path / CASES_FILE).write_bytes(b"".join(lines))
    assert part_lines(tmp_path, 2) == [(0, 0), (len(b"".join(lines[:256])), 256)]
    with pytest.raises(CorpusError) as error:
        scanned(tmp_path, 2)
    assert str(error.value) == message


def test_a_file_swapped_under_the_path_is_not_mixed_in(tmp_path: Path) -> None:
    """The operator controls the corpus directory: ``cases.jsonl`` replaced (or a symbolic
    link repointed) after this process opened it must not give the children other bytes than
    the file this process reads; the result is the single pass's over the file opened."""
    original = (EXAMPLE_CORPUS / CASES_FILE).read_bytes()
    lines = original.splitlines(keepends=True)
    # The same ids, labels and line lengths in another file: every input changed after the
    # first block, so a part read from it would give other leaves at the same offsets.
    other = b"".join(lines[:256]) + b"".join(
        line.replace(b'"input":"s', b'"input":"S', 1) for line in lines[256:]
    )
    assert len(other) == len(original)
    assert other != original
    path = tmp_path / CASES_FILE
    path.write_bytes(original)
    expected = outcome(tmp_path, 1)
    with open_corpus_file(path) as handle:
        swapped = tmp_path / "swapped.jsonl"
        swapped.write_bytes(other)
        swapped.replace(path)  # the name now points at other bytes; the handle does not
        scanner = parallel_scan.scan_in_parts(
            path, handle, collect_labels=True, workers=3, min_part_bytes=1
        )
    assert found(scanner) == expected


def test_children_stopped_early_leave_no_descriptor_open(tmp_path: Path) -> None:
    """A part of this process that fails stops the children before their results are read:
    their pipes are closed too (a scan per corpus must not leak a descriptor per part)."""
    lines = [b'{"case_id":"c-%04d","label":"x"}\n' % number for number in range(1024)]
    lines[3] = b"not json\n"  # this process's own part fails: the children are not read
    (tmp_path / CASES_FILE).write_bytes(b"".join(lines))
    before = sorted(Path("/proc/self/fd").iterdir())
    with pytest.raises(CorpusError, match=r"^cases\.jsonl:4: "):
        scanned(tmp_path, 4)
    assert sorted(Path("/proc/self/fd").iterdir()) == before
