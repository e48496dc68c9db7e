"""A tenant's log read as C2SP tlog-tiles: the entries from entry bundles and the kept tree's
right edge from hash tiles, so the service computes nothing per request (every tile is a
slice of its tree; full tiles never change and may be cached on the way).

Every tile is read at the width the tree of the checkpoint being verified holds
(``tile/<L>/<N>.p/<W>`` for a partial one); a partial tile the service does not serve is
asked for in full, as tlog-tiles clients do once the log grew past it, and only its first
``W`` hashes or entries are used. Nothing read here is trusted: the caller extends the right
edge with the entries and compares the roots with the signed checkpoints; a tile whose size
is not its width's, and a tile the signed tree holds but the service does not serve, are
tampering here already.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from attestation.tenant.errors import TamperingError
from attestation.tenant.http import Limits
from attestation.transparency.entries import MAX_ENTRY_BYTES
from attestation.transparency.merkle import HASH_SIZE, CompactRange, edge_subtrees, perfect_root
from attestation.transparency.tiles import (
    TILE_WIDTH,
    BundleError,
    TileAddress,
    decode_bundle,
    subtree_in_tile,
    tile_path,
    tile_width,
)

#: A hash tile: at most 256 hashes. An entry bundle: at most 256 of the longest entries.
HASH_TILE_ANSWER: Final = Limits(max_bytes=TILE_WIDTH * HASH_SIZE, deadline=60.0)
BUNDLE_ANSWER: Final = Limits(max_bytes=TILE_WIDTH * (2 + MAX_ENTRY_BYTES), deadline=60.0)

#: GET a path under the log's tlog-tiles prefix: the body, or None for a 404.
TileGet = Callable[[str, Limits], bytes | None]


class LogTiles:
    """The tiles of the tree of ``size`` leaves that a signed checkpoint commits to."""

    def __init__(self, get: TileGet, size: int) -> None:
        self._get = get
        self._size = size
        self._hash_tiles: dict[tuple[int, int], tuple[str, list[bytes]]] = {}

    def kept_edge(self, kept_size: int) -> tuple[CompactRange, list[str]]:
        """The right edge of the tree of the first ``kept_size`` leaves, from hash tiles, and
        the paths of the tiles read; the caller compares its root with the kept checkpoint's."""
        hashes = []
        paths: list[str] = []
        for height, index in edge_subtrees(kept_size):
            level, tile, first, count = subtree_in_tile(height, index)
            path, tile_hashes = self._hash_tile(level, tile)
            if path not in paths:
                paths.append(path)
            hashes.append(perfect_root(tile_hashes[first : first + count]))
        return CompactRange.from_subtrees(kept_size, hashes), paths

    def entries(self, start: int) -> Iterator[tuple[int, bytes]]:
        """The entries ``start`` to ``size - 1`` with their positions, a bundle at a time."""
        for bundle in range(start // TILE_WIDTH, -(-self._size // TILE_WIDTH)):
            entries = self._bundle(bundle)
            first = bundle * TILE_WIDTH
            for offset in range(max(start - first, 0), len(entries)):
                yield first + offset, entries[offset]

    def _hash_tile(self, level: int, index: int) -> tuple[str, list[bytes]]:
        cached = self._hash_tiles.get((level, index))
        if cached is None:
            width = tile_width(level, index, self._size)
            path, data, served = self._read(TileAddress(level, index, width), HASH_TILE_ANSWER)
            if len(data) != served * HASH_SIZE:
                raise TamperingError(
                    f"hash tile {path} has {len(data)} bytes, not the {served * HASH_SIZE} of "
                    f"{served} hashes"
                )
            hashes = [data[i : i + HASH_SIZE] for i in range(0, width * HASH_SIZE, HASH_SIZE)]
            cached = self._hash_tiles[(level, index)] = (path, hashes)
        return cached

    def _bundle(self, index: int) -> list[bytes]:
        width = tile_width(0, index, self._size)
        path, data, served = self._read(TileAddress(None, index, width), BUNDLE_ANSWER)
        try:
            entries = decode_bundle(data, max_entry=MAX_ENTRY_BYTES)
        except BundleError as exc:
            raise TamperingError(f"entry bundle {path} is malformed: {exc}") from exc
        if len(entries) != served:
            raise TamperingError(f"entry bundle {path} holds {len(entries)} entries, not {served}")
        return entries[:width]

    def _read(self, address: TileAddress, limit: Limits) -> tuple[str, bytes, int]:
        """The tile at ``address`` (or, when that partial tile is not served, the full one):
        its path, bytes and width as served."""
        path = tile_path(address)
        data = self._get(path, limit)
        if data is not None:
            return path, data, address.width
        if address.width < TILE_WIDTH:
            full = tile_path(TileAddress(address.level, address.index))
            data = self._get(full, limit)
            if data is not None:
                return full, data, TILE_WIDTH
        raise TamperingError(
            f"{path} is not served: the tree of the signed checkpoint of size {self._size} "
            "holds it, so the service withholds part of the log it signed"
        )
