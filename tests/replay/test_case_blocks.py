"""The corpus checksum's tree: known values, and a shard that checks only its own blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attestation.envelope.model import ShardPosition
from runner.corpus.case_blocks import block_offsets, blocks_of, verify_shard_blocks
from runner.corpus.checksum import compute_checksum, scan_cases
from runner.corpus.errors import CorpusError
from runner.corpus.runs_index import CaseBlocksIndex
from runner.errors import ChecksumMismatchError
from runner.pipeline.replay import replay_corpus, write_runs_index
from tests.replay.test_checksum import reference_checksum
from tests.replay.test_run_records import write_corpus

#: A fixed corpus of 600 cases (3 blocks: 256, 256, 88), written below.
FIXED_CASES = [
    {"case_id": f"c-{number:04d}", "label": "flag" if number % 3 == 0 else "clear"}
    for number in range(600)
]
#: Its checksum, from the independent reference of test_checksum (rfc8785 and a recursive
#: RFC 6962 tree), which this test also recomputes; a change to the definition changes it.
FIXED_CHECKSUM = "sha256:9228249d283d4d714c2f409242f97f0996b7bdc413c215d3b8965734ed215727"
#: The same for its first case alone (one block, one leaf: the root is the leaf).
ONE_CASE_CHECKSUM = "sha256:a930eb78e584062a5a631003c0bac671c54ccd9b22291bad671a960faa9a6690"


def _write_cases(directory: Path, cases: list[dict[str, str]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cases.jsonl").write_text(
        "".join(json.dumps(case, separators=(",", ":")) + "\n" for case in cases)
    )
    return directory


def _index(directory: Path) -> CaseBlocksIndex:
    scan = scan_cases(directory)
    return CaseBlocksIndex(
        case_count=scan.case_count,
        leaves=scan.leaves,
        offsets=block_offsets(directory, scan.case_count),
    )


def test_known_checksums_of_a_fixed_corpus(tmp_path: Path) -> None:
    assert reference_checksum(FIXED_CASES) == FIXED_CHECKSUM
    assert compute_checksum(_write_cases(tmp_path / "all", FIXED_CASES)) == FIXED_CHECKSUM
    assert reference_checksum(FIXED_CASES[:1]) == ONE_CASE_CHECKSUM
    assert compute_checksum(_write_cases(tmp_path / "one", FIXED_CASES[:1])) == ONE_CASE_CHECKSUM


def test_the_offsets_of_a_file_without_its_last_newline(tmp_path: Path) -> None:
    directory = _write_cases(tmp_path / "c", FIXED_CASES[:512])
    text = (directory / "cases.jsonl").read_bytes()
    (directory / "cases.jsonl").write_bytes(text[:-1])
    second = sum(map(len, text.splitlines(keepends=True)[:256]))
    assert block_offsets(directory, 512) == (0, second, len(text) - 1)
    index = _index(directory)
    assert verify_shard_blocks(directory, index, range(1, 2)).checksum == compute_checksum(
        directory
    )


def test_every_part_gives_the_whole_checksum(tmp_path: Path) -> None:
    directory = _write_cases(tmp_path / "c", FIXED_CASES)
    index = _index(directory)
    for first in range(4):
        for end in range(first, 4):
            part = verify_shard_blocks(directory, index, range(first, end))
            assert (part.checksum, part.case_count) == (FIXED_CHECKSUM, 600)
            first_rank = first * 256
            end_rank = min(end * 256, 600)
            assert part.labels.labels(first_rank, end_rank) == [
                case["label"] for case in FIXED_CASES[first_rank:end_rank]
            ]
    assert blocks_of(512, 600) == range(2, 3)
    assert blocks_of(600, 600) == range(2, 2)


_SWAP = {"flag": "fine", "fine": "flag"}  # same length: tampering keeps every offset


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    count=st.integers(min_value=1, max_value=900),
    tampered=st.sets(st.integers(min_value=0, max_value=3)),
    where=st.integers(min_value=0, max_value=255),
)
def test_a_part_is_accepted_exactly_when_its_blocks_are_honest(
    tmp_path_factory: pytest.TempPathFactory, count: int, tampered: set[int], where: int
) -> None:
    """An index of the honest file; some blocks' cases then changed (one label each, same
    length): verifying blocks [a, b) succeeds, with the honest checksum, exactly when none of
    them was changed, and names the first changed block otherwise."""
    cases = [
        {"case_id": f"c-{number:05d}", "label": "flag" if number % 2 else "fine"}
        for number in range(count)
    ]
    directory = _write_cases(tmp_path_factory.mktemp("c"), cases)
    honest = compute_checksum(directory)
    index = _index(directory)
    blocks = len(index.leaves)
    changed = {block for block in tampered if block < blocks}
    for block in changed:
        rank = min(block * 256 + where, count - 1)
        cases[rank] = {**cases[rank], "label": _SWAP[cases[rank]["label"]]}
    _write_cases(directory, cases)
    for first in range(blocks + 1):
        for end in range(first, blocks + 1):
            bad = sorted(changed & set(range(first, end)))
            if not bad:
                assert verify_shard_blocks(directory, index, range(first, end)).checksum == honest
                continue
            with pytest.raises(
                CorpusError,
                match=rf"^runs\.index\.json: field 'cases\.leaves': "
                rf"block {bad[0]} ",
            ):
                verify_shard_blocks(directory, index, range(first, end))


def test_a_shard_reads_only_its_own_blocks_of_the_cases(tmp_path: Path) -> None:
    """Block 0 of cases.jsonl broken after indexing (same length, not JSON): shard 1 of 3
    never reads it and binds the checksum of the index's leaves (the honest one); shard 0
    and an unsharded replay refuse the corpus."""
    corpus = write_corpus(tmp_path / "c", 11, cases=600)
    honest = compute_checksum(corpus)
    write_runs_index(corpus)
    text = (corpus / "cases.jsonl").read_bytes()
    (corpus / "cases.jsonl").write_bytes(b"#" + text[1:])
    outcome = replay_corpus(corpus, shard=ShardPosition(index=1, count=3), expect_checksum=honest)
    assert (outcome.corpus_checksum, outcome.used_runs_index) == (honest, True)
    # The tenant's value is checked once the shard's own blocks are hashed, before any run.
    (corpus / "runs.jsonl").write_text("not JSON\n")
    other = "sha256:" + "0" * 64
    with pytest.raises(ChecksumMismatchError) as caught:
        replay_corpus(corpus, shard=ShardPosition(index=1, count=3), expect_checksum=other)
    assert str(caught.value) == (
        f"corpus checksum is {honest}, expected {other}; refusing to replay"
    )
    with pytest.raises(CorpusError, match=r"^cases\.jsonl:1: "):
        replay_corpus(corpus, shard=ShardPosition(index=0, count=3))
    with pytest.raises(CorpusError, match=r"^cases\.jsonl:1: "):
        replay_corpus(corpus)
