"""Latency tails by Merkle root: openings prove exactly the k-th largest, and nothing else."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attestation.contracts import (
    MAX_ENVELOPE_BYTES,
    MAX_ENVELOPE_JSON_ITEMS,
    MAX_MERGEABLE_SHARD_COUNT,
    MAX_PLAN_RUNS,
    MAX_SHARDED_CASES,
    MAX_TAIL_OPENING_BYTES,
    MAX_TAIL_PATH,
    TAIL_BLOCK_VALUES,
    TAIL_OPENING_JSON_BYTES,
    mergeable_shard_count_problem,
    merged_envelope_bound,
)
from attestation.scoring.partial import largest_of_union
from attestation.scoring.tails import (
    TailError,
    TailOpening,
    check_opening,
    check_order_statistic,
    decode_value,
    encode_value,
    opening_bytes,
    path_length,
    tail_bytes,
    tail_root,
)
from runner.shard_tails import open_tail, proof_for

latency = st.one_of(
    st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1.0, 2.5, 100.0]),  # ties, within a shard and across shards
).map(lambda value: value + 0.0)
tails = st.lists(
    st.lists(latency, max_size=3 * TAIL_BLOCK_VALUES).map(lambda t: sorted(t, reverse=True)),
    min_size=1,
    max_size=5,
).filter(lambda shards: sum(map(len, shards)) > 0)


def opened(tail: list[float], value: float) -> TailOpening:
    wire = open_tail(tail, value)
    return TailOpening(wire.above, wire.at_least, base64.b64decode(wire.proof))


def proves(shards: list[list[float]], value: float, rank: int) -> bool:
    """Whether the honest openings of ``shards`` at ``value`` prove it the rank-th largest."""
    openings = [opened(tail, value) for tail in shards]
    for opening, tail in zip(openings, shards, strict=True):
        root = tail_root(tail_bytes(tail))
        assert check_opening(opening, value=value, length=len(tail), root=root) is None
    return check_order_statistic(openings, value=value, rank=rank) is None


@settings(max_examples=150, deadline=None)
@given(shards=tails, data=st.data())
def test_the_openings_prove_the_kth_largest_and_no_other_value(
    shards: list[list[float]], data: st.DataObject
) -> None:
    union = sorted((v for tail in shards for v in tail), reverse=True)
    rank = data.draw(st.integers(min_value=1, max_value=len(union)))
    value = largest_of_union(shards, rank).last()
    assert value == union[rank - 1]
    assert proves(shards, value, rank)
    # any other value: the exact counts at it hold, the order statistic does not
    others = {*union, 0.0, union[0] * 2 + 1, union[rank - 1] + 1e-9} - {value}
    for other in others:
        assert not proves(shards, other, rank), other


@settings(max_examples=60, deadline=None)
@given(shards=tails, data=st.data())
def test_any_changed_byte_or_count_of_an_opening_fails(
    shards: list[list[float]], data: st.DataObject
) -> None:
    union = sorted((v for tail in shards for v in tail), reverse=True)
    rank = data.draw(st.integers(min_value=1, max_value=len(union)))
    value = union[rank - 1]
    which = data.draw(st.sampled_from([i for i, tail in enumerate(shards) if tail]))
    tail = shards[which]
    root = tail_root(tail_bytes(tail))
    honest = opened(tail, value)
    position = data.draw(st.integers(min_value=0, max_value=len(honest.proof) - 1))
    flipped = bytearray(honest.proof)
    flipped[position] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
    changed = TailOpening(honest.above, honest.at_least, bytes(flipped))
    assert check_opening(changed, value=value, length=len(tail), root=root) is not None
    for above, at_least in [
        (honest.above + 1, honest.at_least),
        (honest.above - 1, honest.at_least),
        (honest.above, honest.at_least + 1),
        (honest.above, honest.at_least - 1),
    ]:
        if not 0 <= above <= at_least <= len(tail):
            continue
        # the blocks the other counts name, taken honestly from the tail: still refused
        other = opened_at_counts(tail, above, at_least)
        assert check_opening(other, value=value, length=len(tail), root=root) is not None


def opened_at_counts(tail: list[float], above: int, at_least: int) -> TailOpening:
    """An opening with the given counts whose blocks and proofs are the tail's own."""
    return TailOpening(above, at_least, proof_for(tail, above, at_least))


def test_a_tail_root_is_rfc6962_over_blocks_of_doubles() -> None:
    tail = [float(v) for v in range(TAIL_BLOCK_VALUES + 1, 0, -1)]  # two blocks: 32 and 1
    data = tail_bytes(tail)
    first = hashlib.sha256(b"\x00" + data[: 8 * TAIL_BLOCK_VALUES]).digest()
    second = hashlib.sha256(b"\x00" + data[8 * TAIL_BLOCK_VALUES :]).digest()
    root = hashlib.sha256(b"\x01" + first + second).hexdigest()
    assert tail_root(data) == f"sha256:{root}"
    assert tail_root(b"") == "sha256:" + hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("text", ["4059", "4059000000000000a", "405900000000000A", "é" * 16])
def test_a_p95_on_the_wire_is_16_lowercase_hex_digits(text: str) -> None:
    with pytest.raises(TailError, match="is not 16 lowercase hex digits"):
        decode_value(text)
    assert decode_value(encode_value(812.37)) == 812.37


def test_an_opening_is_bounded_whatever_the_number_of_cases() -> None:
    length = MAX_SHARDED_CASES
    blocks = -(-length // TAIL_BLOCK_VALUES)
    assert max(path_length(i, blocks) for i in (0, blocks // 3, blocks - 1)) == MAX_TAIL_PATH
    # four distinct blocks: both counts on block boundaries (positions 319 | 320, 31999 | 32000)
    above, at_least = 10 * TAIL_BLOCK_VALUES, 1000 * TAIL_BLOCK_VALUES
    assert opening_bytes(above, at_least, length) <= MAX_TAIL_OPENING_BYTES
    assert opening_bytes(above, at_least, length) == 4 * (8 * TAIL_BLOCK_VALUES + 32 * 35)
    # the JSON of the largest opening, 16-digit counts included
    largest = (
        f'{{"above":{length},"atLeast":{length},"proof":"'
        + base64.b64encode(bytes(MAX_TAIL_OPENING_BYTES)).decode()
        + '"},'
    )
    assert len(largest) <= TAIL_OPENING_JSON_BYTES


def test_the_mergeable_shard_count_is_the_largest_that_fits_any_plan() -> None:
    size, items = merged_envelope_bound(MAX_MERGEABLE_SHARD_COUNT, MAX_PLAN_RUNS)
    assert size <= MAX_ENVELOPE_BYTES
    assert items <= MAX_ENVELOPE_JSON_ITEMS
    size, items = merged_envelope_bound(MAX_MERGEABLE_SHARD_COUNT + 1, MAX_PLAN_RUNS)
    assert size > MAX_ENVELOPE_BYTES or items > MAX_ENVELOPE_JSON_ITEMS
    assert MAX_MERGEABLE_SHARD_COUNT == 37
    # the bound does not depend on the number of cases, and is linear in shards and runs
    # 256 KiB + 32 x (64 KiB + 1) + 4 x (128 + 32 x 7404) bytes; 10,000 + 32 x 1,501 + 4 x (8 + 32 x 4)
    assert merged_envelope_bound(32, 4) == (3_307_552, 58_576)
    assert mergeable_shard_count_problem(32, "--shards") is None
    assert mergeable_shard_count_problem(38, "--shards") == (
        "--shards 38: at most 37 shards can be merged: the merged envelope of 38 shards of a "
        "plan of up to 50 runs may reach 16826550 bytes and 75038 JSON values, over the "
        "envelope limits (16777216 bytes, 100000 values)"
    )
