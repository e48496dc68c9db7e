"""The bounded streaming .tar.gz reader: every bound is met while reading, before listing."""

from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc

import pytest

from attestation.tenant import archive as bt
from attestation.tenant.errors import ArchiveError

BOUNDS = bt.ArchiveBounds(max_entries=8, max_unpacked=16 << 30, max_ratio=200, ratio_floor=64 << 20)


def _drain(data: bytes, bounds: bt.ArchiveBounds = BOUNDS) -> dict[str, int]:
    sizes = {}
    for member, reader in bt.iter_entries(io.BytesIO(data), bounds):
        if reader is None:
            continue
        total = 0
        while chunk := reader.read(1 << 20):
            total += len(chunk)
        sizes[member.name] = total
    return sizes


def _tar(
    members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.PAX_FORMAT
) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(raw.getvalue())


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


class _Repeat(io.RawIOBase):
    def __init__(self, size: int, byte: bytes = b"\n") -> None:
        self.left = size
        self.byte = byte

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = self.byte * n
        self.left -= n
        return n


def _bomb(size: int) -> bytes:
    out = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w|") as tar,
    ):
        info = tarfile.TarInfo("cases.jsonl")
        info.size = size
        tar.addfile(info, io.BufferedReader(_Repeat(size)))
    return out.getvalue()


def test_plain_archive() -> None:
    assert _drain(_tar([_file("a", b"x" * 10), _file("b", b"")])) == {"a": 10, "b": 0}


def test_gzip_bomb_stops_at_the_ratio() -> None:
    bomb = _bomb(64 << 20)
    tracemalloc.start()
    with pytest.raises(ArchiveError, match="more than 200 times"):
        _drain(bomb, bt.ArchiveBounds(8, 16 << 30, 200, 4 << 20))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20


def test_gzip_bomb_refused_up_front_when_the_archive_size_is_known() -> None:
    info = tarfile.TarInfo("cases.jsonl")
    info.size = 1 << 30
    bomb = gzip.compress(info.tobuf() + b"\n" * 4096)  # the rest never needs to exist
    bounds = bt.ArchiveBounds(8, 16 << 30, 200, 64 << 20, archive_size=1 << 20)
    with pytest.raises(ArchiveError, match="declares 1073741824 bytes, more than 200 times"):
        _drain(bomb, bounds)


def test_total_bound() -> None:
    bounds = bt.ArchiveBounds(8, 1 << 20, 10**6, 0)
    with pytest.raises(ArchiveError, match="declares 2097152 bytes"):
        _drain(_tar([_file("a", b"x" * (2 << 20))]), bounds)


def test_many_entries_refused_at_the_first_over() -> None:
    info = tarfile.TarInfo("d")
    info.type = tarfile.DIRTYPE
    archive = gzip.compress(info.tobuf() * 400_000 + b"\0" * 1024, compresslevel=1)
    with pytest.raises(ArchiveError, match="more than 8 entries"):
        _drain(archive)


def test_pax_header_chain() -> None:
    info = tarfile.TarInfo("g")
    info.type = tarfile.XGLTYPE
    info.pax_headers = {"comment": "a"}
    header = info.tobuf(format=tarfile.PAX_FORMAT)
    with pytest.raises(ArchiveError, match="header"):
        _drain(gzip.compress(header * 20_000 + b"\0" * 1024, compresslevel=1))


def test_huge_long_name() -> None:
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = 1 << 30
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        gz.write(header.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(64):
            gz.write(b"a" * (1 << 20))
    tracemalloc.start()
    with pytest.raises(ArchiveError, match="header"):
        _drain(out.getvalue())
    assert tracemalloc.get_traced_memory()[1] < 8 << 20
    tracemalloc.stop()


def _old_gnu_sparse(name: str, realsize: int) -> bytes:
    """One GNU 'S' (old sparse) entry with one 0-byte data region at ``realsize``."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = 0
    block = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    # struct sparse at 386: 4 x (offset[12], numbytes[12]); isextended at 482; realsize at 483.
    block[386:398] = f"{realsize:011o}\0".encode()
    block[398:410] = b"00000000000\0"
    block[483:495] = f"{realsize:011o}\0".encode()
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block) + b"\0" * 1024


def test_sparse_member() -> None:
    archive = gzip.compress(_old_gnu_sparse("cases.jsonl", 64 << 30))
    assert len(archive) < 200
    with pytest.raises(ArchiveError, match="sparse"):
        _drain(archive)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (tarfile.SYMTYPE, "symbolic link"),
        (tarfile.LNKTYPE, "hard link"),
        (tarfile.FIFOTYPE, "FIFO"),
        (tarfile.CHRTYPE, "device"),
    ],
)
def test_special_entries(kind: bytes, message: str) -> None:
    info = tarfile.TarInfo("cases.jsonl")
    info.type = kind
    info.linkname = "/etc/passwd"
    with pytest.raises(ArchiveError, match=message):
        _drain(_tar([(info, None)]))


def test_truncated_and_garbage() -> None:
    good = _tar([_file("a", b"x" * 100_000)])
    with pytest.raises(ArchiveError):
        _drain(good[: len(good) // 2])
    with pytest.raises(ArchiveError):
        _drain(b"not gzip at all")
