"""C2SP tlog-tiles: paths (the specification's examples, round trips, refusals), entry
bundles, and where a tenant reads each hash of a kept tree's right edge."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attestation.transparency.merkle import CompactRange, edge_subtrees, perfect_root
from attestation.transparency.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    BundleError,
    TileAddress,
    TilePathError,
    decode_bundle,
    encode_bundle,
    index_path,
    parse_tile_path,
    subtree_in_tile,
    tile_path,
    tile_width,
)
from runner.service.log.merkle import MerkleTree


def test_the_specification_examples() -> None:
    assert index_path(1234067) == "x001/x234/067"
    assert index_path(0) == "000"
    assert tile_path(TileAddress(0, 1234067)) == "tile/0/x001/x234/067"
    assert tile_path(TileAddress(None, 1234067, 7)) == "tile/entries/x001/x234/067.p/7"


@given(
    st.one_of(st.none(), st.integers(0, 63)),
    st.integers(0, 10**15),
    st.integers(1, 256),
)
def test_paths_round_trip(level: int | None, index: int, width: int) -> None:
    address = TileAddress(level, index, width)
    assert parse_tile_path(tile_path(address).removeprefix("tile/")) == address


@pytest.mark.parametrize(
    "path",
    ["0", "64/000", "00/000", "0/1", "0/x000/001", "0/001/002", "0/000.p/0", "0/000.p/256",
     "0/000.p/07", "leaves/000", "0/x1/000"],
)  # fmt: skip
def test_malformed_paths_are_refused(path: str) -> None:
    with pytest.raises(TilePathError):
        parse_tile_path(path)


def test_entry_bundles_are_length_prefixed() -> None:
    assert encode_bundle([b"ab", b""]) == b"\x00\x02ab\x00\x00"
    with pytest.raises(ValueError, match="does not fit"):
        encode_bundle([bytes(0x10000)])


@given(st.lists(st.binary(max_size=308), max_size=256))
def test_bundles_round_trip(entries: list[bytes]) -> None:
    assert decode_bundle(encode_bundle(entries), max_entry=308) == entries


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00", "entry bundle ends inside the length of entry 0"),
        (b"\x00\x02a", "entry bundle ends inside entry 0"),
        (b"\x00\x01a\x01\x35" + bytes(309), "entry 1 of the bundle has 309 bytes"),
        (b"\x00\x00" * 257, "entry bundle holds more than 256 entries"),
    ],
)
def test_malformed_bundles_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        decode_bundle(data, max_entry=308)


def test_where_a_subtree_is_read() -> None:
    assert subtree_in_tile(0, 300) == (0, 1, 44, 1)  # leaf 300: level-0 tile 1, hash 44
    assert subtree_in_tile(5, 8) == (0, 1, 0, 32)  # leaves 256..287: 32 leaf hashes
    assert subtree_in_tile(8, 1) == (1, 0, 1, 1)  # leaves 256..511: one level-1 hash
    assert subtree_in_tile(17, 3) == (2, 0, 6, 2)  # 2**17 leaves: two level-2 hashes
    assert tile_width(0, 1, 300) == 44
    assert tile_width(0, 0, 300) == 256
    assert tile_width(1, 0, 300) == 1
    assert tile_width(1, 1, 300) <= 0


@settings(max_examples=60)
@given(st.integers(1, 1200), st.integers(0, 300))
@example(65536 + 256 + 3, 5)  # a level-2 tile, a level-1 and a level-0 partial one
def test_the_right_edge_read_from_tiles_gives_the_root(kept: int, grown: int) -> None:
    """The hashes a tenant reads from the tiles of a larger tree give the kept tree's root."""
    tree = MerkleTree([hashlib.sha256(n.to_bytes(4, "big")).digest() for n in range(kept + grown)])
    size = tree.size
    hashes = []
    for height, index in edge_subtrees(kept):
        level, tile, first, count = subtree_in_tile(height, index)
        width = tile_width(level, tile, size)
        served = tree.complete_subtrees(TILE_HEIGHT * level, TILE_WIDTH * tile, width, size)
        hashes.append(perfect_root(served[first : first + count]))
    edge = CompactRange.from_subtrees(kept, hashes)
    assert edge.root() == tree.root(kept)
    for leaf in range(kept, size):
        edge.append(tree.leaf_hash_at(leaf))
    assert edge.root() == tree.root(size)
