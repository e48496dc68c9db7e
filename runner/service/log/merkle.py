"""RFC 6962 Merkle trees for the publication service: append, roots and proofs.

:class:`MerkleTree` keeps every complete, aligned subtree hash, so roots and proofs for any
size up to the current one cost O(log^2 n) hashes, and appends cost O(1) amortised. The hash
functions and the proof *verification* a tenant runs live in :mod:`attestation.transparency.merkle`.
"""

from __future__ import annotations

from collections.abc import Sequence

from attestation.transparency.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    leaf_hash,
    node_hash,
)


def _largest_power_of_two_below(n: int) -> int:
    """The ``k`` of RFC 6962: the largest power of two strictly smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """An append-only RFC 6962 tree over leaf hashes."""

    def __init__(self, leaf_hashes: Sequence[bytes] = ()) -> None:
        # _levels[h][k] is the hash of the complete subtree of 2**h leaves starting at k * 2**h.
        self._levels: list[list[bytes]] = [[]]
        for value in leaf_hashes:
            self.append_leaf_hash(value)

    @property
    def size(self) -> int:
        return len(self._levels[0])

    def append_entry(self, entry: bytes) -> int:
        """Append an entry (hashed as a leaf); return its index."""
        return self.append_leaf_hash(leaf_hash(entry))

    def append_leaf_hash(self, value: bytes) -> int:
        if len(value) != HASH_SIZE:
            raise ValueError(f"a leaf hash has {HASH_SIZE} bytes, got {len(value)}")
        index = self.size
        self._levels[0].append(value)
        height = 0
        while len(self._levels[height]) % 2 == 0:
            level = self._levels[height]
            if height + 1 == len(self._levels):
                self._levels.append([])
            self._levels[height + 1].append(node_hash(level[-2], level[-1]))
            height += 1
        return index

    def truncate(self, size: int) -> None:
        """Forget every leaf from ``size`` on (appends whose transaction did not commit)."""
        self._check_size(size)
        for height, level in enumerate(self._levels):
            del level[size >> height :]
        while len(self._levels) > 1 and not self._levels[-1]:
            self._levels.pop()

    def leaf_hash_at(self, index: int) -> bytes:
        return self._levels[0][index]

    def complete_subtrees(self, height: int, start: int, count: int, size: int) -> list[bytes]:
        """The hashes of the complete subtrees of ``2**height`` leaves number ``start`` to
        ``start + count - 1`` within the first ``size`` leaves (a C2SP tlog-tiles tile), or
        ValueError when the tree of ``size`` has fewer."""
        self._check_size(size)
        if start < 0 or count < 1 or start + count > size >> height:
            raise ValueError(
                f"subtrees {start}..{start + count - 1} of height {height} are not all complete "
                f"in a tree of {size}"
            )
        return self._levels[height][start : start + count]

    def _subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) where ``start`` is aligned as the RFC 6962 recursion guarantees."""
        n = end - start
        if n & (n - 1) == 0:
            height = n.bit_length() - 1
            return self._levels[height][start >> height]
        k = _largest_power_of_two_below(n)
        return node_hash(self._subtree(start, start + k), self._subtree(start + k, end))

    def _check_size(self, size: int) -> None:
        if not 0 <= size <= self.size:
            raise ValueError(f"tree size {size} is outside 0..{self.size}")

    def root(self, size: int | None = None) -> bytes:
        """The root hash of the first ``size`` leaves (default: all)."""
        size = self.size if size is None else size
        self._check_size(size)
        return EMPTY_ROOT if size == 0 else self._subtree(0, size)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """PATH(index, D[0:size]) of RFC 6962 section 2.1.1."""
        self._check_size(size)
        if not 0 <= index < size:
            raise ValueError(f"leaf index {index} is outside 0..{size - 1}")
        return self._path(index, 0, size)

    def _path(self, index: int, start: int, end: int) -> list[bytes]:
        n = end - start
        if n == 1:
            return []
        k = _largest_power_of_two_below(n)
        if index < k:
            return [*self._path(index, start, start + k), self._subtree(start + k, end)]
        return [*self._path(index - k, start + k, end), self._subtree(start, start + k)]

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        """PROOF(old_size, D[0:new_size]) of RFC 6962 section 2.1.2."""
        self._check_size(new_size)
        if not 0 <= old_size <= new_size:
            raise ValueError(f"old size {old_size} is outside 0..{new_size}")
        if old_size in (0, new_size):
            return []
        return self._subproof(old_size, 0, new_size, complete=True)

    def _subproof(self, m: int, start: int, end: int, *, complete: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if complete else [self._subtree(start, end)]
        k = _largest_power_of_two_below(n)
        if m <= k:
            return [
                *self._subproof(m, start, start + k, complete=complete),
                self._subtree(start + k, end),
            ]
        return [
            *self._subproof(m - k, start + k, end, complete=False),
            self._subtree(start, start + k),
        ]
