"""RFC 6962 / RFC 9162 section 2.1 Merkle tree hashes and proof verification (the tenant side).

Leaf hash = SHA-256(0x00 || entry), interior node = SHA-256(0x01 || left || right). The
publication service builds its trees with ``runner.service.log.merkle.MerkleTree``; a tenant
checks inclusion and consistency proofs against signed checkpoints with the functions here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

HASH_SIZE: Final = 32
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
#: What a leaf's hash input starts with (a hash fed in pieces starts with it too).
LEAF_PREFIX: Final = b"\x00"


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def perfect_root(hashes: Sequence[bytes]) -> bytes:
    """The root of a perfect subtree from its ``2**k`` hashes one level below ``k`` levels
    down, left to right."""
    level = list(hashes)
    if not level or len(level) & (len(level) - 1):
        raise ValueError(f"{len(level)} hashes are not a perfect subtree's level")
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def edge_subtrees(size: int) -> list[tuple[int, int]]:
    """The perfect subtrees along the right edge of the tree of ``size`` leaves, largest
    first, as (height, index): subtree ``index`` of ``2**height`` leaves."""
    subtrees = []
    start = 0
    for height in reversed(range(size.bit_length())):
        if size >> height & 1:
            subtrees.append((height, start >> height))
            start += 1 << height
    return subtrees


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


class CompactRange:
    """The right edge of an RFC 6962 tree: the roots of its perfect subtrees, largest first
    (one per set bit of the size). Enough to append leaves and compute the root of every
    later size without any other hash of the tree.

    A tenant that knows the right edge of a tree it verified (size ``m``, root ``R_m``) and the
    entries ``m..n-1`` computes the root of size ``n`` itself; equal to a signed root ``R_n``,
    that proves at once that the tree of size ``n`` extends the one of size ``m`` and that it
    holds each of those entries: no consistency proof and no inclusion proof per entry.
    """

    def __init__(self) -> None:
        self.size = 0
        self._edge: list[bytes] = []

    @classmethod
    def from_last_leaf(
        cls, leaf: bytes, size: int, proof: Sequence[bytes], root: bytes
    ) -> CompactRange | None:
        """The right edge of the tree of ``size`` whose last leaf is ``leaf``, from that
        leaf's inclusion proof: None unless the proof verifies against ``root``.

        The path of the last leaf holds only left siblings: first the ones inside the
        smallest perfect subtree (as many as ``size`` has trailing zero bits), whose
        combination with the leaf is that subtree's root, then the roots of the larger
        subtrees of the edge, smallest first."""
        if size < 1 or not verify_inclusion(leaf, size - 1, size, proof, root):
            return None
        inner = (size & -size).bit_length() - 1
        if len(proof) != inner + size.bit_count() - 1:
            return None
        smallest = leaf
        for sibling in proof[:inner]:
            smallest = node_hash(sibling, smallest)
        edge = cls()
        edge.size = size
        edge._edge = [*reversed(proof[inner:]), smallest]
        return edge

    @classmethod
    def from_subtrees(cls, size: int, hashes: Sequence[bytes]) -> CompactRange:
        """The right edge of the tree of ``size`` from the hashes of its
        :func:`edge_subtrees`, in that order (whether they are that tree's is for the
        caller to check: :meth:`root` against a signed root)."""
        if len(hashes) != size.bit_count() or any(len(h) != HASH_SIZE for h in hashes):
            raise ValueError(f"the tree of {size} leaves has {size.bit_count()} edge subtrees")
        edge = cls()
        edge.size = size
        edge._edge = list(hashes)
        return edge

    def append(self, leaf: bytes) -> None:
        """Append a leaf hash: it merges with as many subtrees as ``size`` has trailing ones."""
        merged = leaf
        size = self.size
        while size & 1:
            merged = node_hash(self._edge.pop(), merged)
            size >>= 1
        self._edge.append(merged)
        self.size += 1

    def root(self) -> bytes:
        """MTH of the tree of :attr:`size` leaves (RFC 9162 section 2.1.1)."""
        if not self._edge:
            return EMPTY_ROOT
        root = self._edge[-1]
        for subtree in reversed(self._edge[:-1]):
            root = node_hash(subtree, root)
        return root
