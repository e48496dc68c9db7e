"""C2SP tlog-tiles paths: the examples of the specification, round trips, refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attestation.transparency.tiles import (
    TileAddress,
    TilePathError,
    encode_bundle,
    index_path,
    parse_tile_path,
    tile_path,
)


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
