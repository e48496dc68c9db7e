"""TCB_VERSION: the 8-byte security-patch-level vector in an SNP report.

The byte layout depends on the product line (SEV-SNP ABI specification, publication 56860;
Turin's VCEKs carry structVersion 1), so a raw value can only be decoded together with a
:class:`~attestation.abi.product.ProductLine`::

    byte  Milan / Genoa        Turin
    0     BOOT_LOADER (bl)     FMC (fmc)
    1     TEE (tee)            BOOT_LOADER (bl)
    2     reserved (spl4)      TEE (tee)
    3     reserved (spl5)      SNP (snp)
    4     reserved (spl6)      reserved (spl5)
    5     reserved (spl7)      reserved (spl6)
    6     SNP (snp)            reserved (spl7)
    7     MICROCODE (ucode)    MICROCODE (ucode)

A Turin VCEK carries spl_5..spl_7 but no spl_4, so we name Turin's three reserved bytes
spl5..spl7 (our reading: AMD documents them only as reserved). Decoding a Turin value with
the Milan layout silently yields wrong numbers, which is why the product line is never guessed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from attestation.abi.product import ProductLine

TCB_SIZE: Final = 8
_U64_MAX: Final = (1 << 64) - 1

#: Byte index of each component, per layout.
_MILAN_GENOA_LAYOUT: Final[Mapping[str, int]] = {
    "bl": 0,
    "tee": 1,
    "spl4": 2,
    "spl5": 3,
    "spl6": 4,
    "spl7": 5,
    "snp": 6,
    "ucode": 7,
}
_TURIN_LAYOUT: Final[Mapping[str, int]] = {
    "fmc": 0,
    "bl": 1,
    "tee": 2,
    "snp": 3,
    "spl5": 4,
    "spl6": 5,
    "spl7": 6,
    "ucode": 7,
}


def tcb_layout(product: ProductLine) -> Mapping[str, int]:
    """Component name -> byte index for a product line's TCB_VERSION layout."""
    return _TURIN_LAYOUT if product.uses_turin_tcb_layout else _MILAN_GENOA_LAYOUT


def _check_byte(name: str, value: int | None) -> None:
    if value is not None and not 0 <= value <= 0xFF:
        raise ValueError(f"TCB component {name} must be a byte (0..255), got {value}")


@dataclass(frozen=True, slots=True)
class TcbVersion:
    """A decoded TCB_VERSION. ``fmc`` is set only on Turin; ``spl4`` only on Milan/Genoa."""

    product: ProductLine
    bl: int
    tee: int
    snp: int
    ucode: int
    fmc: int | None = None
    spl4: int | None = None
    spl5: int = 0
    spl6: int = 0
    spl7: int = 0

    def __post_init__(self) -> None:
        turin = self.product.uses_turin_tcb_layout
        if turin and (self.fmc is None or self.spl4 is not None):
            raise ValueError("a Turin TCB has fmc and no spl4")
        if not turin and (self.fmc is not None or self.spl4 is None):
            raise ValueError(f"a {self.product} TCB has spl4 and no fmc")
        for name, value in self.components().items():
            _check_byte(name, value)

    @classmethod
    def decode(cls, raw: int, product: ProductLine) -> TcbVersion:
        """Decode a raw little-endian u64 TCB_VERSION with the product line's layout."""
        if cls is TcbVersion and type(raw) is int:
            return _decoded(raw, product)
        return cls._decode(raw, product)

    @classmethod
    def _decode(cls, raw: int, product: ProductLine) -> TcbVersion:
        if not 0 <= raw <= _U64_MAX:
            raise ValueError(f"TCB_VERSION must be a u64, got {raw:#x}")
        data = raw.to_bytes(TCB_SIZE, "little")
        values = {name: data[index] for name, index in tcb_layout(product).items()}
        return cls(product=product, **values)

    def encode(self) -> int:
        """The raw u64 (inverse of :meth:`decode`)."""
        data = bytearray(TCB_SIZE)
        for name, index in tcb_layout(self.product).items():
            value = getattr(self, name)
            assert isinstance(value, int)  # the layout names only the fields present
            data[index] = value
        return int.from_bytes(data, "little")

    def components(self) -> dict[str, int]:
        """Every component present in this layout, by name (the certificate's SPL names)."""
        return {name: getattr(self, name) for name in tcb_layout(self.product)}

    def security_components(self) -> dict[str, int]:
        """The components that carry a security patch level (reserved bytes excluded)."""
        names = ("fmc", "bl", "tee", "snp", "ucode")
        return {k: v for k, v in self.components().items() if k in names}

    def dominates(self, other: TcbVersion) -> bool:
        """Every security component >= the other's (component-wise: a partial order)."""
        if other.product is not self.product:
            raise ValueError("cannot compare TCBs of different product lines")
        mine = self.security_components()
        return all(mine[name] >= value for name, value in other.security_components().items())

    def to_json_dict(self) -> dict[str, int]:
        """Components by name, for ``--json`` output."""
        return self.components()


# A pure function of (u64, product line) returning an immutable value: a verifier decodes the
# same few TCB values (one fleet's firmware levels) over and over. Errors are not cached.
@functools.lru_cache(maxsize=256)
def _decoded(raw: int, product: ProductLine) -> TcbVersion:
    return TcbVersion._decode(raw, product)  # noqa: SLF001 - the cache of this class's decode
