"""C2SP tlog-tiles: the paths and encodings of a log read as static tiles.

A hash tile at level L holds the hashes of up to 256 consecutive complete subtrees of
``2**(8L)`` leaves; tile N of level L starts with subtree 256N. An entry bundle N holds the
entries 256N.. (each as a big-endian u16 length and the entry's bytes). A tile that is not
full is served as a partial tile of width W (``.p/W``). Tile indexes are written as groups of
three digits, every group but the last prefixed with ``x`` (1234067 -> ``x001/x234/067``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: Levels are 8 tree levels apart (tlog-tiles' fixed height), tiles 256 hashes wide.
TILE_HEIGHT: Final = 8
TILE_WIDTH: Final = 1 << TILE_HEIGHT
#: tlog-tiles: an entry is at most 64 KiB - 1 (its length is a u16).
MAX_BUNDLED_ENTRY: Final = 0xFFFF
MAX_LEVEL: Final = 63
_GROUP: Final = re.compile(r"x[0-9]{3}")
_LAST: Final = re.compile(r"[0-9]{3}")
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,2}")


class TilePathError(ValueError):
    """A tile path that is not in tlog-tiles' form."""


class BundleError(ValueError):
    """Entry bundle bytes that are not a sequence of length-prefixed entries."""


@dataclass(frozen=True, slots=True)
class TileAddress:
    """A hash tile (``level`` >= 0) or an entry bundle (``level`` None), and its width."""

    level: int | None
    index: int
    width: int = TILE_WIDTH


def index_path(index: int) -> str:
    """``index`` in tlog-tiles' groups of three digits (1234067 -> ``x001/x234/067``)."""
    digits = f"{index:d}"
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*(f"x{group}" for group in groups[:-1]), groups[-1]])


def tile_path(address: TileAddress) -> str:
    """The path of ``address`` under a log's prefix, e.g. ``tile/0/x001/234.p/7``."""
    level = "entries" if address.level is None else str(address.level)
    partial = "" if address.width == TILE_WIDTH else f".p/{address.width}"
    return f"tile/{level}/{index_path(address.index)}{partial}"


def parse_tile_path(path: str) -> TileAddress:
    """The address of a path after ``tile/``: ``<L|entries>/<N>[.p/<W>]``."""
    parts = path.split("/")
    if len(parts) < 2:
        raise TilePathError(f"tile path {path!r} has no index")
    level_text, *index_parts = parts
    width = TILE_WIDTH
    if len(index_parts) >= 2 and index_parts[-2].endswith(".p"):
        width_text = index_parts.pop()
        if not _DECIMAL.fullmatch(width_text) or not 1 <= int(width_text) < TILE_WIDTH:
            raise TilePathError(f"partial tile width {width_text!r} is not 1..255")
        width = int(width_text)
        index_parts[-1] = index_parts[-1].removesuffix(".p")
    if level_text == "entries":
        level: int | None = None
    elif _DECIMAL.fullmatch(level_text) and int(level_text) <= MAX_LEVEL:
        level = int(level_text)
    else:
        raise TilePathError(f"tile level {level_text!r} is neither 0..63 nor 'entries'")
    *groups, last = index_parts
    if not _LAST.fullmatch(last) or not all(_GROUP.fullmatch(group) for group in groups):
        raise TilePathError(f"tile index {'/'.join(index_parts)!r} is not in x000/000 form")
    digits = "".join(group[1:] for group in groups) + last
    if groups and digits.startswith("000"):
        raise TilePathError(f"tile index {'/'.join(index_parts)!r} has a leading zero group")
    return TileAddress(level, int(digits), width)


def tile_width(level: int, index: int, size: int) -> int:
    """How many hashes tile ``index`` of ``level`` holds in the tree of ``size`` leaves (an
    entry bundle: ``level`` 0); 0 or less when it holds none."""
    return min(TILE_WIDTH, (size >> (TILE_HEIGHT * level)) - TILE_WIDTH * index)


def subtree_in_tile(height: int, index: int) -> tuple[int, int, int, int]:
    """Where the hash of perfect subtree ``index`` of ``2**height`` leaves is read: (tile
    level, tile index, its first hash in that tile, how many), the hashes to combine pairwise
    ``height % 8`` times (a tile holds only every eighth level of the tree)."""
    level, below = divmod(height, TILE_HEIGHT)
    first = index << below
    return level, first // TILE_WIDTH, first % TILE_WIDTH, 1 << below


def encode_bundle(entries: Sequence[bytes]) -> bytes:
    """An entry bundle: each entry as a big-endian u16 length and its bytes."""
    out = bytearray()
    for entry in entries:
        if len(entry) > MAX_BUNDLED_ENTRY:
            raise ValueError(f"an entry of {len(entry)} bytes does not fit a tlog-tiles bundle")
        out += struct.pack(">H", len(entry)) + entry
    return bytes(out)


def decode_bundle(data: bytes, *, max_entry: int) -> list[bytes]:
    """The entries of an entry bundle, each at most ``max_entry`` bytes, with nothing after
    the last one (:func:`encode_bundle`'s inverse)."""
    entries: list[bytes] = []
    offset = 0
    while offset < len(data):
        if len(entries) == TILE_WIDTH:
            raise BundleError(f"entry bundle holds more than {TILE_WIDTH} entries")
        if offset + 2 > len(data):
            raise BundleError(f"entry bundle ends inside the length of entry {len(entries)}")
        (length,) = struct.unpack_from(">H", data, offset)
        if length > max_entry:
            raise BundleError(
                f"entry {len(entries)} of the bundle has {length} bytes, more than a log "
                f"entry ever has ({max_entry})"
            )
        offset += 2
        if offset + length > len(data):
            raise BundleError(f"entry bundle ends inside entry {len(entries)}")
        entries.append(data[offset : offset + length])
        offset += length
    return entries
