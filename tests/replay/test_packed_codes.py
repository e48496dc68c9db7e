"""runner.corpus.packed_codes: codes packed in 1, 2, 4 or 8 bits (or 4 bytes past 256
distinct ones) read back exactly as appended, and renumbered exactly by ``extend_from``; and
runner.corpus.case_labels' block digests held in one byte string, read as the list."""

from __future__ import annotations

import hashlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.contracts import EVALUATION_BLOCK_CASES
from runner.corpus.case_labels import BlockDigests, CaseLabels, IdBlocks, ids_digest
from runner.corpus.packed_codes import PackedCodes, pack, unpack, width_for


def test_pack_puts_the_first_code_in_the_most_significant_bits() -> None:
    assert pack(bytes([1, 0, 1, 1, 0, 0, 0, 1]), 1) == b"\xb1"
    assert pack(bytes([3, 0, 1, 2]), 2) == b"\xc6"
    assert pack(bytes([0xA, 0x5]), 4) == b"\xa5"
    assert pack(bytes([7, 200]), 8) == bytes([7, 200])
    assert unpack(b"\xc6", 2) == bytes([3, 0, 1, 2])


def test_pack_refuses_a_part_of_a_byte_and_a_code_too_wide() -> None:
    with pytest.raises(ValueError, match="3 codes do not fill whole bytes of 4"):
        pack(bytes([1, 2, 3]), 2)
    with pytest.raises(ValueError, match="invalid literal"):
        pack(bytes([4, 0, 0, 0]), 2)


@pytest.mark.parametrize(
    ("distinct", "width"), [(1, 1), (2, 1), (3, 2), (4, 2), (5, 4), (16, 4), (17, 8), (256, 8)]
)
def test_width_for_is_the_fewest_bits(distinct: int, width: int) -> None:
    assert width_for(distinct) == width


def test_width_for_past_256_is_four_bytes() -> None:
    assert width_for(257) == 32


def test_two_labels_take_a_bit_a_case() -> None:
    codes = PackedCodes()
    codes.extend([0, 1] * 500_000, 2)
    assert (len(codes), codes.width, codes.size_bytes) == (1_000_000, 1, 125_000)


@st.composite
def batches(draw: st.DrawFn, most: int = 300) -> list[tuple[list[int], int]]:
    """Batches of codes, each with the number of distinct codes so far (never shrinking)."""
    distinct = 1
    out = []
    for _ in range(draw(st.integers(1, 6))):
        distinct = draw(st.integers(distinct, min(most, distinct * 20)))
        codes = draw(st.lists(st.integers(0, distinct - 1), max_size=70))
        out.append((codes, distinct))
    return out


def _filled(parts: list[tuple[list[int], int]]) -> tuple[PackedCodes, list[int]]:
    packed = PackedCodes()
    plain: list[int] = []
    for codes, distinct in parts:
        packed.extend(codes, distinct)
        plain += codes
    return packed, plain


@given(batches(), st.integers(-3, 400), st.integers(-3, 400))
def test_codes_read_back_as_appended(
    parts: list[tuple[list[int], int]], first: int, end: int
) -> None:
    packed, plain = _filled(parts)
    assert len(packed) == len(plain)
    assert packed.width == width_for(parts[-1][1])
    assert list(packed.unpacked(0, len(plain))) == plain
    assert list(packed.unpacked(first, end)) == plain[max(first, 0) : max(end, 0)]
    for code in set(plain):
        assert packed.index(code) == plain.index(code)
    restored = pickle.loads(pickle.dumps(packed))
    assert list(restored.unpacked(0, len(plain))) == plain


@given(batches(most=40), batches(most=40), st.data())
def test_extend_from_renumbers_exactly(
    head: list[tuple[list[int], int]], tail: list[tuple[list[int], int]], data: st.DataObject
) -> None:
    target, expected = _filled(head)
    source, codes = _filled(tail)
    distinct = max(head[-1][1], data.draw(st.integers(1, 300)))
    table = data.draw(
        st.lists(st.integers(0, distinct - 1), min_size=tail[-1][1], max_size=tail[-1][1])
    )
    target.extend_from(source, table, distinct)
    expected += [table[code] for code in codes]
    assert list(target.unpacked(0, len(expected))) == expected
    assert target.width == width_for(distinct)


def test_extend_from_whole_bytes_renumbers_by_translation() -> None:
    target, source = PackedCodes(), PackedCodes()
    target.extend([0, 1] * 8, 2)
    source.extend([1, 1, 0, 1, 0, 0, 0, 1, 1], 2)
    target.extend_from(source, [1, 0], 2)
    assert bytes(target.unpacked(0, 25)) == bytes([0, 1] * 8 + [0, 0, 1, 0, 1, 1, 1, 0, 0])


def test_index_of_an_absent_code_is_an_error() -> None:
    codes = PackedCodes()
    codes.extend([0, 0, 2], 3)
    with pytest.raises(ValueError, match="no code 1"):
        codes.index(1)


def test_case_labels_keep_the_257th_label() -> None:
    labels = CaseLabels()
    names = [f"label-{number}" for number in range(300)]
    labels.add([f"c-{number:03d}" for number in range(300)], names)
    assert labels.codes.width == 32
    assert labels.labels(0, 300) == names
    assert labels.label(299) == "label-299"
    with pytest.raises(IndexError, match="no label of rank 300"):
        labels.label(300)


@given(
    st.lists(st.binary(min_size=32, max_size=32), max_size=20),
    st.integers(-25, 25),
    st.integers(-25, 25),
    st.sampled_from([None, 1, 2, -1]),
)
def test_block_digests_are_the_list_of_digests(
    digests: list[bytes], start: int, stop: int, step: int | None
) -> None:
    held = BlockDigests.of(digests)
    assert len(held) == len(digests)
    assert held == digests
    assert list(held) == digests
    assert list(held[start:stop:step]) == digests[start:stop:step]
    assert ids_digest(held) == hashlib.sha256(b"".join(digests)).digest()
    for index in range(-len(digests), len(digests)):
        assert held[index] == digests[index]
    with pytest.raises(IndexError):
        held[len(digests)]


def test_block_digests_refuse_a_digest_of_another_size() -> None:
    with pytest.raises(ValueError, match="a block digest is not 32 bytes"):
        BlockDigests.of([b"\x00" * 31])
    with pytest.raises(ValueError, match="33 bytes are not whole 32-byte digests"):
        BlockDigests(b"\x00" * 33)


def test_id_blocks_hold_a_digest_per_block() -> None:
    blocks = IdBlocks()
    ids = [f"c-{number:04d}" for number in range(EVALUATION_BLOCK_CASES + 1)]
    blocks.add(ids[:10])
    blocks.add_ascii([case_id.encode("ascii") for case_id in ids[10:]])
    expected = [
        hashlib.sha256("".join(f"{case_id}\n" for case_id in part).encode("ascii")).digest()
        for part in (ids[:EVALUATION_BLOCK_CASES], ids[EVALUATION_BLOCK_CASES:])
    ]
    assert blocks.finish() == expected
    later = IdBlocks()
    later.extend(BlockDigests.of(expected[:1]))
    later.extend(expected[1:])
    assert later.finish().joined() == b"".join(expected)
