"""The vTPM quote of Azure confidential VMs: TPMS_ATTEST (a TPM2_Quote) and its TPMT_SIGNATURE.

Layout: TCG TPM 2.0 Library, Part 2 (Structures): TPMS_ATTEST (10.12.12), TPMS_CLOCK_INFO
(10.11.1), TPMS_QUOTE_INFO (10.12.4), TPML_PCR_SELECTION (10.9.7), TPMT_SIGNATURE (11.3.4).
All integers are big-endian; TPM2B fields are a u16 size and that many bytes, so offsets after
the first TPM2B depend on its size. :func:`quote_layout` names the byte range of every field of
one quote, and every error names the field and its offset.

Only what Azure's vTPM produces and the verifier can judge is accepted (fail closed): a quote
(``TPM_ST_ATTEST_QUOTE``) over exactly one PCR bank, SHA-256, whose digest is 32 bytes; an
RSASSA-PKCS1-v1_5 signature with SHA-256 by a 2048-bit key.

Parsing::

    quote = parse_quote(message)          # raises MalformedError naming field, offset, bytes
    assert serialize_quote(quote) == message
    quote.extra_data                      # the nonce the quote was asked for
    quote.selected_pcrs                   # (0, 1, ..., 23)
    pcr_digest_of(pcr_values) == quote.pcr_digest
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from attestation.errors import MalformedError

#: TPM_GENERATED_VALUE: every TPMS_ATTEST the TPM itself produced starts with it.
TPM_GENERATED_VALUE: Final = 0xFF544347
#: TPM_ST_ATTEST_QUOTE: the structure a TPM2_Quote signs.
TPM_ST_ATTEST_QUOTE: Final = 0x8018
TPM_ALG_SHA256: Final = 0x000B
TPM_ALG_RSASSA: Final = 0x0014
SHA256_SIZE: Final = 32
#: The PCRs of one bank: PCR_SELECT_MIN is 3 bytes (24 PCRs) on every PC-client TPM.
PCR_SELECT_SIZE: Final = 3
PCR_COUNT: Final = 8 * PCR_SELECT_SIZE
#: TPM2B_NAME holds a TPMU_NAME: a TPMT_HA (2 + 64) at most.
MAX_NAME_SIZE: Final = 66
#: TPM2B_DATA holds a TPMT_HA at most (2 + 64); the nonce of a quote is this field.
MAX_EXTRA_DATA_SIZE: Final = 66
#: The attestation key Azure's paravisor creates is RSA-2048: 256-byte signatures.
RSA_SIGNATURE_SIZE: Final = 256
#: The largest quote accepted: every field at its bound.
MAX_QUOTE_SIZE: Final = 4 + 2 + 2 + MAX_NAME_SIZE + 2 + MAX_EXTRA_DATA_SIZE + 17 + 8 + 10 + 34


@dataclass(frozen=True, slots=True)
class ClockInfo:
    """TPMS_CLOCK_INFO: the TPM's clock (ms), reset and restart counts, and ``safe``."""

    clock: int
    reset_count: int
    restart_count: int
    safe: bool


@dataclass(frozen=True, slots=True)
class Quote:
    """One TPMS_ATTEST of type quote, every field named (see :func:`quote_layout`)."""

    qualified_signer: bytes
    extra_data: bytes
    clock_info: ClockInfo
    firmware_version: int
    selected_pcrs: tuple[int, ...]
    pcr_digest: bytes

    def __post_init__(self) -> None:
        if len(self.qualified_signer) > MAX_NAME_SIZE:
            raise MalformedError(f"qualifiedSigner is over {MAX_NAME_SIZE} bytes")
        if len(self.extra_data) > MAX_EXTRA_DATA_SIZE:
            raise MalformedError(f"extraData is over {MAX_EXTRA_DATA_SIZE} bytes")
        if len(self.pcr_digest) != SHA256_SIZE:
            raise MalformedError(f"pcrDigest must be {SHA256_SIZE} bytes (SHA-256)")
        if list(self.selected_pcrs) != sorted(set(self.selected_pcrs)) or any(
            not 0 <= pcr < PCR_COUNT for pcr in self.selected_pcrs
        ):
            raise MalformedError(f"PCR selection must be increasing PCR numbers below {PCR_COUNT}")
        clock = self.clock_info
        if not (
            0 <= clock.clock < 1 << 64
            and 0 <= clock.reset_count < 1 << 32
            and 0 <= clock.restart_count < 1 << 32
            and 0 <= self.firmware_version < 1 << 64
        ):
            raise MalformedError("clockInfo or firmwareVersion out of range")


@dataclass(frozen=True, slots=True)
class QuoteField:
    """The byte range one field of one quote occupies."""

    name: str
    offset: int
    size: int

    def describe(self) -> str:
        return f"{self.name} [{self.offset:#x}:{self.offset + self.size:#x}]"


class _Reader:
    """Reads a big-endian TPM structure front to back, recording where each field was."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0
        self.fields: list[QuoteField] = []

    def take(self, name: str, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise MalformedError(
                f"TPMS_ATTEST ends inside {name} at {self.offset:#x}: {size} bytes needed, "
                f"{len(self.data) - self.offset} left"
            )
        value = self.data[self.offset : self.offset + size]
        self.fields.append(QuoteField(name, self.offset, size))
        self.offset += size
        return value

    def uint(self, name: str, size: int) -> int:
        return int.from_bytes(self.take(name, size), "big")

    def sized(self, name: str, limit: int) -> bytes:
        size = self.uint(f"{name}.size", 2)
        if size > limit:
            raise MalformedError(
                f"TPMS_ATTEST {name}.size at {self.offset - 2:#x} is {size}, over {limit}"
            )
        return self.take(name, size)

    def expect(self, name: str, size: int, want: int, meaning: str) -> None:
        value = self.uint(name, size)
        if value != want:
            spec = self.fields[-1]
            raise MalformedError(
                f"TPMS_ATTEST {spec.describe()} is {value:#0{2 * size + 2}x}, not {want:#x} "
                f"({meaning})"
            )


def _read_quote(data: bytes) -> tuple[Quote, list[QuoteField]]:
    if len(data) > MAX_QUOTE_SIZE:
        raise MalformedError(f"TPMS_ATTEST is {len(data)} bytes, over {MAX_QUOTE_SIZE}")
    r = _Reader(data)
    r.expect("magic", 4, TPM_GENERATED_VALUE, "TPM_GENERATED_VALUE: not made by a TPM")
    r.expect("type", 2, TPM_ST_ATTEST_QUOTE, "TPM_ST_ATTEST_QUOTE: not a quote")
    signer = r.sized("qualifiedSigner", MAX_NAME_SIZE)
    extra = r.sized("extraData", MAX_EXTRA_DATA_SIZE)
    clock = r.uint("clockInfo.clock", 8)
    resets = r.uint("clockInfo.resetCount", 4)
    restarts = r.uint("clockInfo.restartCount", 4)
    safe = r.uint("clockInfo.safe", 1)
    if safe > 1:
        raise MalformedError(f"TPMS_ATTEST clockInfo.safe is {safe}, not a TPMI_YES_NO (0 or 1)")
    firmware = r.uint("firmwareVersion", 8)
    r.expect("pcrSelect.count", 4, 1, "exactly one PCR bank")
    r.expect("pcrSelect.hash", 2, TPM_ALG_SHA256, "TPM_ALG_SHA256: the SHA-256 bank")
    r.expect("pcrSelect.sizeofSelect", 1, PCR_SELECT_SIZE, "24 PCRs")
    bitmap = r.take("pcrSelect.pcrSelect", PCR_SELECT_SIZE)
    selected = tuple(pcr for pcr in range(PCR_COUNT) if bitmap[pcr // 8] >> (pcr % 8) & 1)
    digest = r.sized("pcrDigest", SHA256_SIZE)
    if len(digest) != SHA256_SIZE:
        raise MalformedError(f"TPMS_ATTEST pcrDigest is {len(digest)} bytes, not 32 (SHA-256)")
    if r.offset != len(data):
        raise MalformedError(
            f"TPMS_ATTEST has {len(data) - r.offset} bytes after pcrDigest (at {r.offset:#x})"
        )
    quote = Quote(
        qualified_signer=signer,
        extra_data=extra,
        clock_info=ClockInfo(clock, resets, restarts, bool(safe)),
        firmware_version=firmware,
        selected_pcrs=selected,
        pcr_digest=digest,
    )
    return quote, r.fields


def parse_quote(data: bytes) -> Quote:
    """A TPMS_ATTEST quote from its marshalled bytes.

    Raises:
        MalformedError: naming the field and offset that is wrong.
    """
    return _read_quote(data)[0]


def quote_layout(data: bytes) -> tuple[QuoteField, ...]:
    """The byte range of every field of this quote, in order (they cover it exactly)."""
    return tuple(_read_quote(data)[1])


def serialize_quote(quote: Quote) -> bytes:
    """The marshalled TPMS_ATTEST of ``quote`` (the inverse of :func:`parse_quote`)."""
    bitmap = bytearray(PCR_SELECT_SIZE)
    for pcr in quote.selected_pcrs:
        bitmap[pcr // 8] |= 1 << (pcr % 8)
    clock = quote.clock_info
    return b"".join(
        (
            struct.pack(">IH", TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE),
            struct.pack(">H", len(quote.qualified_signer)),
            quote.qualified_signer,
            struct.pack(">H", len(quote.extra_data)),
            quote.extra_data,
            struct.pack(">QIIB", clock.clock, clock.reset_count, clock.restart_count, clock.safe),
            struct.pack(">Q", quote.firmware_version),
            struct.pack(">IHB", 1, TPM_ALG_SHA256, PCR_SELECT_SIZE),
            bytes(bitmap),
            struct.pack(">H", len(quote.pcr_digest)),
            quote.pcr_digest,
        )
    )


def pcr_digest_of(values: Sequence[bytes]) -> bytes:
    """pcrDigest of PCR values (in PCR order): SHA-256 of their concatenation."""
    return hashlib.sha256(b"".join(values)).digest()


def pcr_extend(value: bytes, digest: bytes) -> bytes:
    """One TPM2_PCR_Extend in the SHA-256 bank: SHA-256(value || digest)."""
    return hashlib.sha256(value + digest).digest()


@dataclass(frozen=True, slots=True)
class QuoteSignature:
    """TPMT_SIGNATURE: RSASSA-PKCS1-v1_5 with SHA-256, the only scheme Azure's AK uses."""

    signature: bytes

    def __post_init__(self) -> None:
        if len(self.signature) != RSA_SIGNATURE_SIZE:
            raise MalformedError(
                f"TPMT_SIGNATURE signature is {len(self.signature)} bytes, not "
                f"{RSA_SIGNATURE_SIZE} (RSA-2048)"
            )


_SIGNATURE_HEADER: Final = struct.pack(">HHH", TPM_ALG_RSASSA, TPM_ALG_SHA256, RSA_SIGNATURE_SIZE)
#: sigAlg u16 at 0, hash u16 at 2, sig.size u16 at 4, sig at 6.
SIGNATURE_SIZE: Final = len(_SIGNATURE_HEADER) + RSA_SIGNATURE_SIZE


def parse_signature(data: bytes) -> QuoteSignature:
    """A TPMT_SIGNATURE (RSASSA, SHA-256, 256 bytes) from its marshalled bytes.

    Raises:
        MalformedError: another size, scheme, hash or signature length.
    """
    if len(data) != SIGNATURE_SIZE:
        raise MalformedError(f"TPMT_SIGNATURE is {len(data)} bytes, not {SIGNATURE_SIZE}")
    sig_alg, hash_alg, size = struct.unpack_from(">HHH", data)
    if sig_alg != TPM_ALG_RSASSA:
        raise MalformedError(f"TPMT_SIGNATURE sigAlg [0x0:0x2] is {sig_alg:#06x}, not RSASSA")
    if hash_alg != TPM_ALG_SHA256:
        raise MalformedError(f"TPMT_SIGNATURE hash [0x2:0x4] is {hash_alg:#06x}, not SHA-256")
    if size != RSA_SIGNATURE_SIZE:
        raise MalformedError(f"TPMT_SIGNATURE sig.size [0x4:0x6] is {size}, not 256")
    return QuoteSignature(data[len(_SIGNATURE_HEADER) :])


def serialize_signature(signature: QuoteSignature) -> bytes:
    """The marshalled TPMT_SIGNATURE (the inverse of :func:`parse_signature`)."""
    return _SIGNATURE_HEADER + signature.signature
