"""Read a ``.tar.gz`` as a stream, every bound checked while reading, never after listing.

``tarfile`` on its own reads a pax or GNU long-name header's payload in one ``read`` of the
size the header declares (a 1 GiB "file name" becomes a 1 GiB string) and follows chained
extended headers by recursion; it lists every member before ``getmembers`` returns; and it
will happily write a sparse member's declared size. Here the decompressed stream passes
through :class:`_BoundedStream`, which counts every byte tarfile reads: while a header is
being read (``tarfile.open`` reads the first one, ``next`` the others) at most
``header_budget`` bytes, in total at most ``max_unpacked``, and never more than
``max_ratio`` times the compressed bytes consumed once past ``ratio_floor``. Entries are
counted as their headers arrive, so an archive of 400,000 entries is refused at the first
one over ``max_entries``.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, BinaryIO, Final

from attestation.contracts import MAX_ARCHIVE_HEADER_BYTES
from attestation.tenant.errors import ArchiveError

_CHUNK: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ArchiveBounds:
    max_entries: int
    max_unpacked: int
    max_ratio: int
    ratio_floor: int
    header_budget: int = MAX_ARCHIVE_HEADER_BYTES
    archive_size: int | None = None  # compressed size, when known: refuses a bomb up front


class _CountingReader(io.RawIOBase):
    """The compressed side: how many bytes the decompressor has consumed."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


class _BoundedStream:
    """The decompressed side, as tarfile reads it."""

    def __init__(self, raw: BinaryIO, bounds: ArchiveBounds) -> None:
        self._compressed = _CountingReader(raw)
        self._gzip = gzip.GzipFile(fileobj=self._compressed, mode="rb")
        self._bounds = bounds
        self.unpacked = 0
        self._header_bytes: int | None = None

    @contextmanager
    def header(self) -> Iterator[None]:
        self._header_bytes = 0
        try:
            yield
        finally:
            self._header_bytes = None

    def read(self, size: int = -1, /) -> bytes:
        data = self._gzip.read(_CHUNK if size < 0 else min(size, _CHUNK))
        self._account(len(data))
        return data

    # The rest of the file protocol tarfile expects; stream mode reads forward only.
    def write(self, _data: bytes, /) -> int:
        raise io.UnsupportedOperation("read-only stream")

    def tell(self) -> int:
        return self.unpacked

    def seek(self, _position: int, /) -> int:
        raise io.UnsupportedOperation("forward-only stream")

    def close(self) -> None:
        self._gzip.close()

    def _account(self, produced: int) -> None:
        bounds = self._bounds
        self.unpacked += produced
        if self._header_bytes is not None:
            self._header_bytes += produced
            if self._header_bytes > bounds.header_budget:
                raise ArchiveError(
                    f"an entry's header (with its pax or long-name extensions) is over "
                    f"{bounds.header_budget} bytes"
                )
        if self.unpacked > bounds.max_unpacked:
            raise ArchiveError(f"the archive unpacks to more than {bounds.max_unpacked} bytes")
        compressed = self._compressed.count
        if self.unpacked > bounds.ratio_floor and self.unpacked > bounds.max_ratio * compressed:
            raise ArchiveError(
                f"the archive unpacks to more than {bounds.max_ratio} times its compressed "
                f"size ({self.unpacked} bytes from {compressed})"
            )


_FORMAT_ERRORS: Final = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError)


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.isdir():
        return "a directory"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return f"of type {member.type!r}"


def iter_entries(
    raw: BinaryIO, bounds: ArchiveBounds
) -> Iterator[tuple[tarfile.TarInfo, EntryReader | None]]:
    """Yield ``(member, reader)``: ``reader`` for regular files, None for directories; every
    other kind of entry is refused. Read each reader to its end before taking the next."""
    stream = _BoundedStream(raw, bounds)
    try:
        with stream.header():
            tar = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 - closed below
    except RecursionError:
        raise ArchiveError("the archive chains too many extended headers") from None
    except _FORMAT_ERRORS as exc:
        raise ArchiveError(f"not a valid .tar.gz: {exc}") from exc
    entries = 0
    with tar:
        while True:
            try:
                with stream.header():
                    member = tar.next()
            except RecursionError:
                raise ArchiveError("the archive chains too many extended headers") from None
            except _FORMAT_ERRORS as exc:
                raise ArchiveError(f"not a valid .tar.gz: {exc}") from exc
            if member is None:
                return
            entries += 1
            if entries > bounds.max_entries:
                raise ArchiveError(f"the archive has more than {bounds.max_entries} entries")
            if member.isdir():
                yield member, None
                continue
            if member.issparse():
                raise ArchiveError(f"entry {member.name!r} is a sparse file")
            if not member.isreg():
                raise ArchiveError(f"entry {member.name!r} is {_kind(member)}, not a regular file")
            left = bounds.max_unpacked - stream.unpacked
            if member.size > left:
                raise ArchiveError(
                    f"entry {member.name!r} declares {member.size} bytes, more than the "
                    f"{bounds.max_unpacked}-byte bound leaves"
                )
            if bounds.archive_size is not None and member.size > max(
                bounds.ratio_floor, bounds.max_ratio * bounds.archive_size
            ):
                raise ArchiveError(
                    f"entry {member.name!r} declares {member.size} bytes, more than "
                    f"{bounds.max_ratio} times the {bounds.archive_size}-byte archive"
                )
            reader = tar.extractfile(member)
            if reader is None:  # pragma: no cover - regular files always have one
                raise ArchiveError(f"entry {member.name!r} cannot be read")
            yield member, EntryReader(reader, member.name)


class EntryReader:
    """One regular entry's bytes; format errors become :class:`ArchiveError`."""

    def __init__(self, inner: IO[bytes], name: str) -> None:
        self._inner = inner
        self._name = name

    def read(self, size: int = -1) -> bytes:
        try:
            return self._inner.read(size)
        except RecursionError:
            raise ArchiveError("the archive chains too many extended headers") from None
        except _FORMAT_ERRORS as exc:
            raise ArchiveError(f"entry {self._name!r} cannot be read: {exc}") from exc
