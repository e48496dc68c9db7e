"""Latency tails by commitment: a shard binds its tail's Merkle root, a merge opens it at p95.

A run's p95 is the k-th largest of its latencies (k = ``tail_size`` of its cases), and the
k-th largest of a union is among every part's k largest (its *tail*). A tail is up to 5% of a
shard's cases, so a shard does not attest it by value: its attested shard result carries the
tail's **root**, an RFC 6962 Merkle tree hash (``attestation.transparency.merkle``) over the
tail in *blocks* of :data:`~attestation.contracts.TAIL_BLOCK_VALUES` values (the leaf of a
block is its values as big-endian IEEE 754 binary64, descending), and hands the tail itself
to the merge beside its envelope (the tails file, ``runner.shard_tails``).

The merge finds each run's p95 ``v`` from the tails and, per shard, *opens* the tail at ``v``
(:class:`TailOpening`): ``above``, the number of the shard's tail values greater than ``v``,
``at_least``, the number of those ``>= v``, and the blocks holding the values at positions
``above - 1``, ``above``, ``at_least - 1`` and ``at_least`` (those within the tail: one to
four blocks), each with its inclusion proof under the shard's root. A verifier checks,
without any tail:

* each opened block is the block of its position under the shard's attested root;
* the value at ``above - 1`` is ``> v`` and the one at ``above`` is ``<= v``, so exactly
  ``above`` values are ``> v`` (the tail is descending: the shard sorted it before hashing);
  the value at ``at_least - 1`` is ``>= v`` and the one at ``at_least`` is ``< v``, so
  exactly ``at_least`` are ``>= v``;
* summed over the shards, ``above < k <= at_least``.

Then fewer than k values of the union are greater than ``v`` and at least k are at least
``v``: ``v`` is the k-th largest, exactly the p95 the unsharded run reports. The counts are
exact, so a set of tails has exactly one opening at ``v`` (a merged envelope has one form).
An opening is bounded by four blocks and their paths of at most
:data:`~attestation.contracts.MAX_TAIL_PATH` hashes, whatever the number of cases.
"""

from __future__ import annotations

import array
import base64
import binascii
import math
import operator
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from attestation.contracts import TAIL_BLOCK_VALUES, format_sha256
from attestation.transparency.merkle import HASH_SIZE, CompactRange, leaf_hash, verify_inclusion

BLOCK_BYTES: Final = 8 * TAIL_BLOCK_VALUES
_DOUBLE: Final = struct.Struct(">d")


class TailError(ValueError):
    """A p95 or a tail proof that is not well-formed on the wire."""


def tail_bytes(tail: Sequence[float]) -> bytes:
    """A tail on the wire: big-endian IEEE 754 binary64, in its order."""
    packed = array.array("d", tail)
    if sys.byteorder == "little":
        packed.byteswap()
    return packed.tobytes()


def tail_from_bytes(data: bytes) -> list[float]:
    packed = array.array("d")
    packed.frombytes(data)
    if sys.byteorder == "little":
        packed.byteswap()
    return packed.tolist()


def tail_blocks(length: int) -> int:
    """How many blocks a tail of ``length`` values has (the last may be shorter)."""
    return -(-length // TAIL_BLOCK_VALUES)


def tail_root(data: bytes) -> str:
    """``sha256:`` of the Merkle root over a tail's wire bytes (:func:`tail_bytes`) in blocks
    (the empty tail: the root of the empty tree)."""
    edge = CompactRange()
    for start in range(0, len(data), BLOCK_BYTES):
        edge.append(leaf_hash(data[start : start + BLOCK_BYTES]))
    return format_sha256(edge.root())


def path_length(index: int, size: int) -> int:
    """The length of RFC 6962's PATH(index, D[0:size]) (the proof of leaf ``index``)."""
    length = 0
    while size > 1:
        split = 1 << ((size - 1).bit_length() - 1)
        if index < split:
            size = split
        else:
            index, size = index - split, size - split
        length += 1
    return length


@dataclass(frozen=True, slots=True)
class TailOpening:
    """One shard's tail opened at a run's p95 (see the module docstring)."""

    above: int
    at_least: int
    #: For each opened block, ascending: its values' bytes, then its inclusion proof.
    proof: bytes


def opened_positions(above: int, at_least: int, length: int) -> list[int]:
    """The positions an opening shows: around ``above`` and ``at_least`` (within the tail)."""
    candidates = (above - 1, above, at_least - 1, at_least)
    return sorted({p for p in candidates if 0 <= p < length})


def opened_blocks(above: int, at_least: int, length: int) -> list[int]:
    """The blocks an opening holds (of :func:`opened_positions`), ascending, each once."""
    return sorted({p // TAIL_BLOCK_VALUES for p in opened_positions(above, at_least, length)})


def _block_values(block: int, length: int) -> int:
    return min(TAIL_BLOCK_VALUES, length - block * TAIL_BLOCK_VALUES)


def opening_bytes(above: int, at_least: int, length: int) -> int:
    """The exact length of an opening's ``proof`` for these counts and tail length."""
    blocks = tail_blocks(length)
    return sum(
        8 * _block_values(block, length) + HASH_SIZE * path_length(block, blocks)
        for block in opened_blocks(above, at_least, length)
    )


def check_opening(opening: TailOpening, *, value: float, length: int, root: str) -> str | None:
    """Why ``opening`` does not open the tail of ``length`` values under ``root`` at ``value``
    (exactly ``above`` values ``> value`` and ``at_least`` values ``>= value``), or None."""
    above, at_least = opening.above, opening.at_least
    if not 0 <= above <= at_least <= length:
        return f"counts above={above}, at_least={at_least} are not within 0..{length} in order"
    expected = opening_bytes(above, at_least, length)
    if len(opening.proof) != expected:
        return f"the proof has {len(opening.proof)} bytes, {expected} for these counts"
    blocks = tail_blocks(length)
    raw_root = bytes.fromhex(root.removeprefix("sha256:"))
    values: dict[int, float] = {}
    offset = 0
    for block in opened_blocks(above, at_least, length):
        size = 8 * _block_values(block, length)
        data = opening.proof[offset : offset + size]
        offset += size
        path_end = offset + HASH_SIZE * path_length(block, blocks)
        path = [opening.proof[i : i + HASH_SIZE] for i in range(offset, path_end, HASH_SIZE)]
        offset = path_end
        if not verify_inclusion(leaf_hash(data), block, blocks, path, raw_root):
            return f"block {block} is not under the shard's attested tail root"
        first = block * TAIL_BLOCK_VALUES
        values.update(enumerate(tail_from_bytes(data), start=first))
    bounds = (
        (above - 1, operator.gt, "above"),
        (above, operator.le, "at most"),
        (at_least - 1, operator.ge, "at least"),
        (at_least, operator.lt, "below"),
    )
    for position, holds, relation in bounds:
        if 0 <= position < length and not holds(values[position], value):
            return (
                f"the value at position {position} is {values[position]!r}, not {relation} "
                f"the p95 {value!r} (above={above}, at_least={at_least})"
            )
    return None


def check_order_statistic(
    openings: Sequence[TailOpening], *, value: float, rank: int
) -> str | None:
    """Why the checked ``openings`` do not make ``value`` the ``rank``-th largest of the union
    of the tails, or None."""
    if not (math.isfinite(value) and value >= 0 and math.copysign(1.0, value) > 0):
        return f"the p95 {value!r} is not a finite latency of at least 0"
    above = sum(opening.above for opening in openings)
    at_least = sum(opening.at_least for opening in openings)
    if not above < rank <= at_least:
        return (
            f"the shards' tails hold {above} values above {value!r} and {at_least} at least "
            f"it: it is not the {rank}-th largest"
        )
    return None


# -- on the wire --------------------------------------------------------------------------------


def encode_value(value: float) -> str:
    """A p95 on the wire: the hex of its big-endian binary64 (exact, one spelling)."""
    return _DOUBLE.pack(value).hex()


def decode_value(text: str) -> float:
    """:class:`TailError` unless ``text`` is 16 lowercase hex digits."""
    if len(text) != 16 or text != text.lower() or not text.isascii():
        raise TailError(f"p95 {text[:20]!r} is not 16 lowercase hex digits")
    try:
        value: float = _DOUBLE.unpack(bytes.fromhex(text))[0]
    except ValueError:
        raise TailError(f"p95 {text!r} is not 16 lowercase hex digits") from None
    return value


def encode_proof(proof: bytes) -> str:
    return base64.b64encode(proof).decode("ascii")


def decode_proof(text: str) -> bytes:
    """:class:`TailError` unless ``text`` is base64."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TailError(f"a tail proof is not base64: {exc}") from None
