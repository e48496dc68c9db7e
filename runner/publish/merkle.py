"""RFC 6962 / RFC 9162 section 2.1 Merkle tree hashes, inclusion and consistency proofs.

Leaf hash = SHA-256(0x00 || entry), interior node = SHA-256(0x01 || left || right); a tree of
``n`` leaves splits at the largest power of two smaller than ``n``. :class:`MerkleTree` keeps
every complete, aligned subtree hash, so roots and proofs for any size up to the current one
cost O(log^2 n) hashes, and appends cost O(1) amortised.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


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

    def leaf_hash_at(self, index: int) -> bytes:
        return self._levels[0][index]

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


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 section 2.1.3.2: is ``leaf`` at ``index`` under ``root`` by ``proof``?"""
    if not 0 <= index < size or any(len(h) != HASH_SIZE for h in proof):
        return False
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> bool:
    """RFC 9162 section 2.1.4.2: does (new_size, new_root) extend (old_size, old_root)?"""
    if not 0 <= old_size <= new_size or any(len(h) != HASH_SIZE for h in proof):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof and old_root == EMPTY_ROOT
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the path
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root
