"""Small codes (one per case) packed into as few bits as their number of distinct values
needs: 1, 2, 4 or 8 bits a code, and 4 bytes a code past 256 distinct values.

A corpus has a handful of labels, so a byte per case (4 MB at 4M cases) is mostly zeros; at
one bit a case (two labels) it is 0.5 MB. Codes are packed and unpacked in C: packing reads
the codes as the digits of one integer in base ``2 ** width`` (``int`` parses a power-of-two
base in linear time, with no digit limit) and writes it big-endian, so the first code of a
byte is its most significant digit; unpacking maps each packed byte to its codes through a
table of 256 byte strings.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Final

#: The packed widths, in bits; past 256 distinct codes they are held as ``array('I')``.
WIDTHS: Final = (1, 2, 4, 8)
#: Code k (below 16) as the ASCII digit ``int`` reads in base 16; any other byte is not a digit.
_DIGITS: Final = b"0123456789abcdef" + b"\xff" * 240
#: Codes unpacked (and renumbered, :meth:`PackedCodes.extend_from`) this many at a time.
_PIECE_CODES: Final = 1 << 16


def _unpack_table(width: int) -> list[bytes]:
    per = 8 // width
    mask = (1 << width) - 1
    return [
        bytes((byte >> (width * (per - 1 - slot))) & mask for slot in range(per))
        for byte in range(256)
    ]


_UNPACK: Final = {width: _unpack_table(width) for width in WIDTHS[:-1]}


def width_for(distinct: int) -> int:
    """The fewest bits of :data:`WIDTHS` that hold ``distinct`` codes (32: none does)."""
    for width in WIDTHS:
        if distinct <= 1 << width:
            return width
    return 32


def pack(codes: bytes, width: int) -> bytes:
    """``codes`` (one byte each, each below ``2 ** width``; a whole number of bytes' worth)
    packed ``width`` bits each."""
    if width == 8 or not codes:
        return bytes(codes)
    per = 8 // width
    if len(codes) % per:
        raise ValueError(f"{len(codes)} codes do not fill whole bytes of {per}")
    return int(codes.translate(_DIGITS), 1 << width).to_bytes(len(codes) // per, "big")


def unpack(packed: bytes | bytearray, width: int) -> bytes:
    """The codes of ``packed`` (``width`` bits each), one byte each."""
    if width == 8:
        return bytes(packed)
    return b"".join(map(_UNPACK[width].__getitem__, packed))


class PackedCodes:
    """A growing sequence of codes, packed (see the module docstring). Picklable: it crosses
    a process boundary (``runner.corpus.parallel_scan``)."""

    def __init__(self) -> None:
        self.width = 1
        #: Whole bytes of packed codes (while ``width`` is at most 8).
        self._packed = bytearray()
        #: The last codes, one byte each, fewer than fill a packed byte.
        self._pending = b""
        #: Every code, past 256 distinct ones (``width`` 32); None until then.
        self._wide: array[int] | None = None
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        """The bytes the codes take (what packing saves is measured by this)."""
        if self._wide is not None:
            return self._wide.itemsize * len(self._wide)
        return len(self._packed) + len(self._pending)

    def extend(self, codes: Sequence[int], distinct: int) -> None:
        """Append ``codes``, each below ``distinct`` (the number of distinct codes so far),
        widening every code first when ``distinct`` needs more bits."""
        needed = width_for(distinct)
        if needed > self.width:
            self._widen(needed)
        if self._wide is not None:
            self._wide.extend(codes)
        else:
            self._append(bytes(codes))
        self._count += len(codes)

    def extend_from(self, other: PackedCodes, table: Sequence[int], distinct: int) -> None:
        """Append the codes of ``other``, code ``c`` as ``table[c]`` (each below
        ``distinct``, the number of distinct codes after them)."""
        needed = width_for(distinct)
        if needed > self.width:
            self._widen(needed)
        width = self.width
        if (
            self._wide is None
            and other._wide is None
            and other.width == width
            and not self._pending
        ):
            # Whole packed bytes on both sides, one width: renumbered a packed byte at a time.
            def renumbered(byte: int) -> int:
                codes = bytes(
                    table[code] if code < len(table) else 0 for code in _codes(byte, width)
                )
                return pack(codes, width)[0]

            self._packed += other._packed.translate(bytes(map(renumbered, range(256))))
            self._count += len(other._packed) * (8 // width)
            self.extend([table[code] for code in other._pending], distinct)
            return
        for start in range(0, len(other), _PIECE_CODES):
            piece = other.unpacked(start, start + _PIECE_CODES)
            self.extend([table[code] for code in piece], distinct)

    def unpacked(self, first: int, end: int) -> Sequence[int]:
        """The codes of positions ``first`` to ``end - 1`` (clipped to the codes there are),
        one byte each (or an ``array('I')`` past 256 distinct codes)."""
        first, end = max(first, 0), min(end, self._count)
        if end <= first:
            return b""
        if self._wide is not None:
            return self._wide[first:end]
        per = 8 // self.width
        low = first // per
        high = min(-(-end // per), len(self._packed))
        codes = unpack(self._packed[low:high], self.width)
        if end > len(self._packed) * per:
            codes += self._pending
        return codes[first - low * per : end - low * per]

    def index(self, code: int) -> int:
        """The position of the first ``code``.

        Raises:
            ValueError: no code is ``code``.
        """
        for start in range(0, self._count, _PIECE_CODES):
            piece = self.unpacked(start, start + _PIECE_CODES)
            if code in piece:
                return start + piece.index(code)
        raise ValueError(f"no code {code}")

    def _append(self, codes: bytes) -> None:
        per = 8 // self.width
        data = self._pending + codes if self._pending else codes
        whole = len(data) - len(data) % per
        self._packed += pack(data[:whole], self.width)
        self._pending = data[whole:]

    def _widen(self, width: int) -> None:
        codes = self.unpacked(0, self._count)
        self._packed = bytearray()
        self._pending = b""
        self.width = width
        if width == 32:
            self._wide = array("I")
            self._wide.extend(codes)  # each byte a code (array("I", codes) reads a buffer)
        else:
            self._append(bytes(codes))


def _codes(byte: int, width: int) -> bytes:
    return _UNPACK[width][byte] if width < 8 else bytes((byte,))
