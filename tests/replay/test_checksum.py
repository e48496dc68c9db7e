"""Corpus checksum: golden value, independence from formatting and chunking, sensitivity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.corpus import checksum as checksum_module
from runner.corpus.checksum import compute_checksum, scan_cases
from tests.replay.conftest import EXAMPLE_CORPUS
from tests.replay.golden import EXAMPLE_CHECKSUM

#: The corpus checksum v2 as docs/replay.md defines it, written out here independently.
CHECKSUM_PREAMBLE = b"attested-replay corpus checksum v2: cases in blocks of 256, RFC 6962 tree\n"
BLOCK = 256


def tree_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1 MTH of leaf hashes (at least one)."""
    if len(leaves) == 1:
        return leaves[0]
    split = 1 << ((len(leaves) - 1).bit_length() - 1)  # the largest power of two below n
    return hashlib.sha256(b"\x01" + tree_root(leaves[:split]) + tree_root(leaves[split:])).digest()


def reference_leaves(cases: list[dict[str, Any]]) -> list[bytes]:
    """Each block's leaf, computed with the independent ``rfc8785`` package."""
    ordered = sorted(cases, key=lambda case: str(case["case_id"]))
    return [
        hashlib.sha256(
            b"\x00" + b"".join(rfc8785.dumps(case) + b"\n" for case in ordered[i : i + BLOCK])
        ).digest()
        for i in range(0, len(ordered), BLOCK)
    ]


def reference_checksum(cases: list[dict[str, Any]]) -> str:
    """The definition: the head over the case count and the root of the blocks' tree."""
    root = tree_root(reference_leaves(cases))
    head = CHECKSUM_PREAMBLE + str(len(cases)).encode() + b"\n" + root.hex().encode() + b"\n"
    return "sha256:" + hashlib.sha256(head).hexdigest()


def write_cases(directory: Path, cases: list[dict[str, Any]], *, canonical: bool) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    ordered = sorted(cases, key=lambda case: str(case["case_id"]))
    if canonical:
        text = b"".join(rfc8785.dumps(case) + b"\n" for case in ordered)
    else:  # valid but not canonical: spaces, reversed key order, \u escapes
        text = b"".join(
            json.dumps(dict(reversed(list(case.items())))).encode() + b"\n" for case in ordered
        )
    (directory / "cases.jsonl").write_bytes(text)
    return directory


def test_golden_checksum_of_bundled_example() -> None:
    assert compute_checksum(EXAMPLE_CORPUS) == EXAMPLE_CHECKSUM
    cases = [json.loads(line) for line in (EXAMPLE_CORPUS / "cases.jsonl").read_text().splitlines()]
    assert len(cases) == 3000
    assert reference_checksum(cases) == EXAMPLE_CHECKSUM


@pytest.mark.parametrize("chunk", [1, 97, 4096])
def test_chunking_does_not_change_the_checksum(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(checksum_module, "CHUNK_BYTES", chunk)
    assert compute_checksum(EXAMPLE_CORPUS) == EXAMPLE_CHECKSUM


def test_missing_final_newline_is_the_same_corpus(tmp_path: Path) -> None:
    data = (EXAMPLE_CORPUS / "cases.jsonl").read_bytes()
    (tmp_path / "cases.jsonl").write_bytes(data.rstrip(b"\n"))
    assert compute_checksum(tmp_path) == EXAMPLE_CHECKSUM


def test_progress_reports_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checksum_module, "CHUNK_BYTES", 50_000)
    seen: list[tuple[int, int | None]] = []
    scan = scan_cases(EXAMPLE_CORPUS, progress=lambda done, total: seen.append((done, total)))
    assert scan.case_count == 3000
    # One report per 50,000-byte chunk (cases completed so far), then the final count.
    assert seen == [
        *((done, None) for done in (348, 697, 1046, 1394, 1743, 2091, 2440, 2788, 3000)),
        (3000, None),
    ]


def test_labels_collected_on_both_paths(tmp_path: Path) -> None:
    cases: list[dict[str, Any]] = [
        {"case_id": "a-1", "label": "flag"},
        {"case_id": "a-2", "label": 'cl\u00e9ar "q"'},  # not ASCII-safe: slow path
        {"case_id": "a-3", "label": "clear", "input": {"k": [1, 2.5]}},
    ]
    scan = scan_cases(write_cases(tmp_path, cases, canonical=True), collect_labels=True)
    assert scan.labels is not None
    assert [scan.labels.label(rank) for rank in range(3)] == ["flag", 'cl\u00e9ar "q"', "clear"]
    assert scan.labels.names == ["flag", 'cl\u00e9ar "q"', "clear"]
    assert scan.labels.id_blocks == [hashlib.sha256(b"a-1\na-2\na-3\n").digest()]
    assert scan.checksum == reference_checksum(cases)


SAFE_TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
ANY_TEXT = st.text(max_size=12)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    # A double in [2**53, 1e21) serializes as an integer that the corpus refuses (I-JSON).
    | st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda x: abs(x) < 2**53 or abs(x) >= 1e21
    )
    | ANY_TEXT,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(ANY_TEXT, children, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def corpora(draw: st.DrawFn, text: st.SearchStrategy[str] = ANY_TEXT) -> list[dict[str, Any]]:
    ids = draw(
        st.lists(
            st.from_regex(r"[a-z0-9-]{1,10}", fullmatch=True), min_size=1, max_size=8, unique=True
        )
    )
    cases: list[dict[str, Any]] = []
    for case_id in ids:
        case: dict[str, Any] = {"case_id": case_id, "label": draw(text.filter(bool))}
        if draw(st.booleans()):
            case["input"] = draw(JSON_VALUES)
        if draw(st.booleans()):
            case["split"] = draw(st.sampled_from(["dev", "holdout", "adversarial"]))
        if draw(st.booleans()):
            case["group"] = draw(text.filter(bool))
        cases.append(case)
    return cases


@settings(max_examples=60)
@given(cases=corpora(), canonical=st.booleans())
def test_checksum_matches_definition(
    tmp_path_factory: pytest.TempPathFactory, cases: list[dict[str, Any]], canonical: bool
) -> None:
    directory = write_cases(tmp_path_factory.mktemp("c"), cases, canonical=canonical)
    assert compute_checksum(directory) == reference_checksum(cases)


@settings(max_examples=40)
@given(cases=corpora(SAFE_TEXT))
def test_fast_and_slow_paths_agree(
    tmp_path_factory: pytest.TempPathFactory, cases: list[dict[str, Any]]
) -> None:
    fast = compute_checksum(write_cases(tmp_path_factory.mktemp("f"), cases, canonical=True))
    slow = compute_checksum(write_cases(tmp_path_factory.mktemp("s"), cases, canonical=False))
    assert fast == slow == reference_checksum(cases)


@settings(max_examples=60)
@given(cases=corpora(), data=st.data())
def test_any_change_of_meaning_changes_the_checksum(
    tmp_path_factory: pytest.TempPathFactory, cases: list[dict[str, Any]], data: st.DataObject
) -> None:
    original = compute_checksum(write_cases(tmp_path_factory.mktemp("o"), cases, canonical=True))
    changed = [dict(case) for case in cases]
    victim = changed[data.draw(st.integers(0, len(changed) - 1))]
    field = data.draw(st.sampled_from(["label", "input", "split", "group", "drop"]))
    if field == "drop":
        if len(changed) == 1:
            return
        changed.remove(victim)
    elif field == "split":
        victim["split"] = data.draw(
            st.sampled_from(["dev", "holdout", "adversarial"]).filter(
                lambda s: s != victim.get("split")
            )
        )
    elif field == "input":
        victim["input"] = data.draw(
            JSON_VALUES.filter(
                lambda v: (
                    rfc8785.dumps(v) != rfc8785.dumps(victim.get("input", ...))
                    if "input" in victim
                    else True
                )
            )
        )
    else:
        victim[field] = data.draw(ANY_TEXT.filter(lambda s: bool(s) and s != victim.get(field)))
    after = compute_checksum(write_cases(tmp_path_factory.mktemp("n"), changed, canonical=True))
    assert after != original


def test_single_byte_of_label_changes_checksum(tmp_path: Path) -> None:
    text = (EXAMPLE_CORPUS / "cases.jsonl").read_text()
    altered = text.replace('"label":"flag"', '"label":"flaG"', 1)
    assert altered != text
    (tmp_path / "cases.jsonl").write_text(altered)
    assert compute_checksum(tmp_path) != EXAMPLE_CHECKSUM
