"""The Merkle tree against RFC 6962 test vectors and the independent pymerkle implementation."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st
from pymerkle import InmemoryTree

from attestation.transparency.merkle import (
    EMPTY_ROOT,
    CompactRange,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from runner.service.log.merkle import MerkleTree

# The eight leaves of the certificate-transparency reference test data (merkle_tree_test.cc),
# with the published roots of sizes 1-8 and its consistency proofs 1 -> 8, 6 -> 8 and 2 -> 5.
CT_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
CT_ROOTS = {
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}
CT_CONSISTENCY = {
    (1, 8): [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    (6, 8): [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ],
    (2, 5): [
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ],
}


def _tree(entries: list[bytes]) -> MerkleTree:
    tree = MerkleTree()
    for entry in entries:
        tree.append_entry(entry)
    return tree


def test_rfc6962_vectors() -> None:
    tree = _tree(CT_LEAVES)
    assert tree.root(0) == EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert {size: tree.root(size).hex() for size in CT_ROOTS} == CT_ROOTS
    for (old, new), expected in CT_CONSISTENCY.items():
        proof = tree.consistency_proof(old, new)
        assert [h.hex() for h in proof] == expected
        assert verify_consistency(old, new, proof, tree.root(old), tree.root(new))


def test_leaf_and_node_prefixes() -> None:
    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    tree = _tree([b"a", b"b"])
    assert tree.root() == hashlib.sha256(b"\x01" + leaf_hash(b"a") + leaf_hash(b"b")).digest()


@given(st.lists(st.binary(max_size=16), min_size=1, max_size=70))
def test_roots_and_inclusion_paths_equal_pymerkle(entries: list[bytes]) -> None:
    tree = _tree(entries)
    reference = InmemoryTree(algorithm="sha256")
    for entry in entries:
        reference.append_entry(entry)
    for size in range(1, len(entries) + 1):
        assert tree.root(size) == reference.get_root(size)
    size = len(entries)
    for index in range(size):
        path = reference.prove_inclusion(index + 1, size).serialize()["path"]
        # pymerkle's path starts with the leaf itself; the rest is the RFC 6962 audit path.
        assert tree.inclusion_proof(index, size) == [bytes.fromhex(h) for h in path[1:]]


@given(st.integers(min_value=1, max_value=300), st.data())
def test_proofs_verify_and_reject_tampering(size: int, data: st.DataObject) -> None:
    tree = _tree([i.to_bytes(4, "big") for i in range(size)])
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    old = data.draw(st.integers(min_value=0, max_value=size))
    root = tree.root()
    proof = tree.inclusion_proof(index, size)
    assert verify_inclusion(tree.leaf_hash_at(index), index, size, proof, root)
    assert not verify_inclusion(leaf_hash(b"other"), index, size, proof, root)
    if size > 1:
        assert not verify_inclusion(tree.leaf_hash_at(index), (index + 1) % size, size, proof, root)
    consistency = tree.consistency_proof(old, size)
    assert verify_consistency(old, size, consistency, tree.root(old), root)
    if 0 < old < size:
        forged = [bytes([consistency[0][0] ^ 1]) + consistency[0][1:], *consistency[1:]]
        assert not verify_consistency(old, size, forged, tree.root(old), root)
        assert not verify_consistency(old, size, consistency, leaf_hash(b"fork"), root)
        assert not verify_consistency(old, size, consistency[:-1], tree.root(old), root)


def test_reordered_log_is_not_consistent() -> None:
    entries = [bytes([i]) for i in range(10)]
    original = _tree(entries)
    swapped = _tree([entries[1], entries[0], *entries[2:], b"new"])
    proof = swapped.consistency_proof(10, 11)
    assert not verify_consistency(10, 11, proof, original.root(10), swapped.root(11))


def test_compact_range_gives_the_reference_roots() -> None:
    edge = CompactRange()
    assert edge.root() == EMPTY_ROOT
    for size, entry in enumerate(CT_LEAVES, start=1):
        edge.append(leaf_hash(entry))
        assert edge.root().hex() == CT_ROOTS[size]


@given(st.integers(min_value=1, max_value=150), st.integers(min_value=0, max_value=150))
def test_the_right_edge_from_the_last_leafs_path_extends_to_every_later_root(
    old_size: int, added: int
) -> None:
    leaves = [leaf_hash(n.to_bytes(2, "big")) for n in range(old_size + added)]
    tree = MerkleTree(leaves)
    proof = tree.inclusion_proof(old_size - 1, old_size)
    edge = CompactRange.from_last_leaf(leaves[old_size - 1], old_size, proof, tree.root(old_size))
    assert edge is not None
    assert (edge.size, edge.root()) == (old_size, tree.root(old_size))
    for size, leaf in enumerate(leaves[old_size:], start=old_size + 1):
        edge.append(leaf)
        assert (edge.size, edge.root()) == (size, tree.root(size))
    # another last leaf, a changed or shortened path, or another root gives no edge
    other = leaf_hash(b"other")
    assert CompactRange.from_last_leaf(other, old_size, proof, tree.root(old_size)) is None
    assert CompactRange.from_last_leaf(leaves[old_size - 1], old_size, proof, other) is None
    if proof:
        changed = [other, *proof[1:]]
        root = tree.root(old_size)
        assert CompactRange.from_last_leaf(leaves[old_size - 1], old_size, changed, root) is None
        assert CompactRange.from_last_leaf(leaves[old_size - 1], old_size, proof[:-1], root) is None


@given(
    st.integers(min_value=2, max_value=80),
    st.integers(min_value=1, max_value=80),
    st.integers(min_value=0, max_value=80),
)
def test_a_tree_cut_back_and_regrown_proves_what_a_fresh_tree_of_its_leaves_proves(
    size: int, cut: int, regrown: int
) -> None:
    """After a rolled-back batch (truncate) and other appends, every root and proof is a
    fresh tree's: nothing computed before the cut outlives the leaves it covered."""
    first = [leaf_hash(b"a%d" % n) for n in range(size)]
    tree = MerkleTree(first)
    for index in range(size):
        tree.inclusion_proof(index, size)
    kept = max(size - cut, 0)
    tree.truncate(kept)
    leaves = first[:kept] + [leaf_hash(b"b%d" % n) for n in range(size - kept + regrown)]
    for leaf in leaves[kept:]:
        tree.append_leaf_hash(leaf)
    fresh = MerkleTree(leaves)
    for end in {size, len(leaves)}:
        assert tree.root(end) == fresh.root(end)
        assert [tree.inclusion_proof(i, end) for i in range(end)] == [
            fresh.inclusion_proof(i, end) for i in range(end)
        ]
        assert tree.consistency_proof(1, end) == fresh.consistency_proof(1, end)
