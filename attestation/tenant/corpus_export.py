"""Corpus export: one deterministic ``.tar.gz`` holding a corpus and its manifest.

Format, version 1 (docs/reproduce.md):

* gzip without a file name, with modification time 0 and compression level 9 (header
  ``1f8b 0800 00000000 02ff``);
* inside, a USTAR tar of exactly five regular files, in this order and nothing else (no
  directories, links or extended headers): ``corpus-export.json`` (the manifest), then
  ``cases.jsonl``, ``marks.json``, ``plan.json`` and ``runs.jsonl`` holding the exact bytes of
  the corpus files. Every member has mode 0644, uid and gid 0, empty owner names and mtime 0;
* the manifest is the RFC 8785 JSON of :class:`ExportManifest`: format version, the corpus
  checksum, the case count and each file's name, size and SHA-256.

The same corpus files always give the same tar bytes; the gzip bytes also depend on the
deflate implementation (zlib), so the manifest, not the archive's digest, identifies a corpus.

The reader trusts nothing in an archive: it reads the members as one stream through the
run-side reader (:mod:`attestation.tenant.archive`: the same header, total and compression-ratio
bounds), requires the layout above and plain regular members only (no sparse file, link, device or
extension header, refused from its header before a byte is written), never decompresses more
than the manifest declares (plus tar headers), and checks every file's size and SHA-256 and
the manifest's case count (the lines of ``cases.jsonl``) before it reports success. Bytes
past the tar's end are ignored (the archive's own digest covers them).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path
from typing import IO, Annotated, Final, Literal

from pydantic import Field, StringConstraints

from attestation.contracts import (
    CORPUS_RATIO_FLOOR,
    MAX_CORPUS_ARCHIVE_RATIO,
    MAX_EXPORT_FILES_BYTES,
    MAX_EXPORT_MANIFEST_BYTES,
    Sha256Digest,
    WireModel,
)
from attestation.encoding.json_document import load_json_document
from attestation.errors import MalformedError
from attestation.files import open_regular
from attestation.tenant.archive import ArchiveBounds, EntryReader, iter_entries
from attestation.tenant.errors import ArchiveError

MANIFEST_NAME: Final = "corpus-export.json"
#: The corpus files, in archive order.
CORPUS_FILE_NAMES: Final = ("cases.jsonl", "marks.json", "plan.json", "runs.jsonl")
MEDIA_TYPE: Final = "application/vnd.attested-replay.corpus-export.v1.tar+gzip"
_CHUNK: Final = 1024 * 1024
#: Tar bytes around one member (its header block and the padding of its data), and after the
#: last one (two zero blocks and the padding of the final record).
_MEMBER_OVERHEAD: Final = 2 * tarfile.BLOCKSIZE
_END_OVERHEAD: Final = tarfile.RECORDSIZE
#: The tar types of a plain regular file (ustar ``0`` and its pre-POSIX ``NUL``).
_PLAIN_TYPES: Final = (tarfile.REGTYPE, tarfile.AREGTYPE)

CorpusFileName = Literal["cases.jsonl", "marks.json", "plan.json", "runs.jsonl"]


class ExportError(ValueError):
    """An archive that is not a valid corpus export, or a corpus that changed while exported.
    The message names the member and what is wrong with it."""


class ExportedFile(WireModel):
    name: CorpusFileName
    size: Annotated[int, Field(ge=0, le=MAX_EXPORT_FILES_BYTES)]
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class ExportManifest(WireModel):
    """``corpus-export.json``."""

    v: Literal["1"] = "1"
    kind: Literal["CorpusExport"] = "CorpusExport"
    corpus_checksum: Sha256Digest
    case_count: Annotated[int, Field(ge=1)]
    files: Annotated[tuple[ExportedFile, ...], Field(min_length=4, max_length=4)]

    @property
    def files_bytes(self) -> int:
        return sum(entry.size for entry in self.files)


def _check_order(manifest: ExportManifest) -> None:
    names = tuple(entry.name for entry in manifest.files)
    if names != CORPUS_FILE_NAMES:
        raise ExportError(
            f"{MANIFEST_NAME} lists {', '.join(names)}; an export holds "
            f"{', '.join(CORPUS_FILE_NAMES)} in that order"
        )


def parse_manifest(data: bytes) -> ExportManifest:
    """The manifest from its bytes: strict JSON, the schema, RFC 8785 form, the file order."""
    try:
        manifest = load_json_document(
            data, ExportManifest, what=MANIFEST_NAME, limit=MAX_EXPORT_MANIFEST_BYTES
        )
    except MalformedError as exc:
        raise ExportError(str(exc)) from exc
    _check_order(manifest)
    if manifest.canonical_bytes() != data:
        raise ExportError(f"{MANIFEST_NAME} is not in RFC 8785 canonical form")
    return manifest


def describe_files(corpus_dir: Path) -> tuple[ExportedFile, ...]:
    """Name, size and SHA-256 of each corpus file, read as a stream; each path is checked
    to be a regular file before it is opened (a FIFO or ``/dev/zero`` raises
    :class:`OSError`, never blocks or runs forever)."""
    described = []
    for name in CORPUS_FILE_NAMES:
        digest = hashlib.sha256()
        size = 0
        with open_regular(corpus_dir / name) as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        described.append(ExportedFile(name=name, size=size, sha256=digest.hexdigest()))
    return tuple(described)


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


class _CheckedCopy(io.RawIOBase):
    """Exactly ``entry.size`` bytes of a corpus file, hashed as tarfile reads them."""

    def __init__(self, source: IO[bytes], entry: ExportedFile) -> None:
        self._source = source
        self._entry = entry
        self._left = entry.size
        self._digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # typeshed: Buffer
        data = self._source.read(min(len(buffer), self._left))
        buffer[: len(data)] = data
        self._digest.update(data)
        self._left -= len(data)
        shorter = not data and self._left > 0
        if shorter or (
            self._left == 0
            and (self._source.read(1) or self._digest.hexdigest() != self._entry.sha256)
        ):
            raise ExportError(f"{self._entry.name} changed while it was being exported")
        return len(data)


def write_export(corpus_dir: Path, manifest: ExportManifest, out: IO[bytes]) -> None:
    """Write the export of ``corpus_dir`` described by ``manifest`` (from
    :func:`describe_files` and the corpus checksum) to ``out``.

    Every file is hashed again while it is copied: one that changed since the manifest was
    made raises :class:`ExportError`, and the caller discards the partial output.
    """
    _check_order(manifest)
    manifest_bytes = manifest.canonical_bytes()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as packed,
        tarfile.open(fileobj=packed, mode="w|", format=tarfile.USTAR_FORMAT) as tar,
    ):
        tar.addfile(_member(MANIFEST_NAME, len(manifest_bytes)), io.BytesIO(manifest_bytes))
        for entry in manifest.files:
            with open_regular(corpus_dir / entry.name) as source:
                copy = io.BufferedReader(_CheckedCopy(source, entry), _CHUNK)
                tar.addfile(_member(entry.name, entry.size), copy)


def _archive_size(archive: IO[bytes]) -> int | None:
    """The compressed bytes left in ``archive`` when it can tell (a file, a buffer): lets
    the shared reader refuse a member larger than the ratio bound allows before reading it."""
    try:
        if not archive.seekable():
            return None
        start = archive.tell()
        end = archive.seek(0, io.SEEK_END)
        archive.seek(start)
    except (OSError, ValueError):
        return None
    return end - start


def _bounds(archive: IO[bytes], max_bytes: int) -> ArchiveBounds:
    """The run-side reader's bounds (:mod:`attestation.tenant.archive`), sized for an export: five
    members (a sixth header is read only to refuse it), the manifest and ``max_bytes`` of
    corpus files unpacked, and the corpus archives' compression ratio."""
    return ArchiveBounds(
        max_entries=len(CORPUS_FILE_NAMES) + 2,
        max_unpacked=MAX_EXPORT_MANIFEST_BYTES
        + min(max_bytes, MAX_EXPORT_FILES_BYTES)
        + (len(CORPUS_FILE_NAMES) + 1) * _MEMBER_OVERHEAD
        + _END_OVERHEAD,
        max_ratio=MAX_CORPUS_ARCHIVE_RATIO,
        ratio_floor=CORPUS_RATIO_FLOOR,
        archive_size=_archive_size(archive),
    )


class _Members:
    """The export's members in order, through the shared bounded reader; its errors become
    :class:`ExportError`. Only plain regular members pass: no directory, link, device, FIFO,
    sparse file, pax or GNU extension, checked from the header before a byte is read."""

    def __init__(self, archive: IO[bytes], max_bytes: int) -> None:
        self._entries = iter_entries(archive, _bounds(archive, max_bytes))  # type: ignore[arg-type]

    def next(self) -> tuple[tarfile.TarInfo, EntryReader] | None:
        try:
            member, reader = next(self._entries)
        except StopIteration:
            return None
        except ArchiveError as exc:
            raise ExportError(str(exc)) from exc
        if reader is None or member.type not in _PLAIN_TYPES or member.pax_headers:
            raise ExportError(f"member {member.name!r} is not a plain regular file")
        return member, reader

    def take(self, expected: str, size_limit: int) -> tuple[tarfile.TarInfo, EntryReader]:
        taken = self.next()
        if taken is None:
            raise ExportError(f"the archive ends before {expected}")
        member, reader = taken
        if member.name != expected:
            raise ExportError(f"member {member.name!r} where {expected} was expected")
        if member.size > size_limit:
            raise ExportError(f"member {expected} has {member.size} bytes, more than {size_limit}")
        return member, reader

    def read_manifest(self) -> ExportManifest:
        _member, reader = self.take(MANIFEST_NAME, MAX_EXPORT_MANIFEST_BYTES)
        return parse_manifest(_read(reader, -1))


def _read(reader: EntryReader, size: int) -> bytes:
    try:
        return reader.read(size)
    except ArchiveError as exc:
        raise ExportError(str(exc)) from exc


def peek_manifest(archive: IO[bytes]) -> ExportManifest:
    """The manifest of the export read from ``archive``, without reading its files (the
    publication service indexes exports by it; readers that use the files call
    :func:`read_export`, which checks them)."""
    return _Members(archive, MAX_EXPORT_FILES_BYTES).read_manifest()


def read_export(
    archive: IO[bytes], destination: Path | None = None, *, max_bytes: int = MAX_EXPORT_FILES_BYTES
) -> ExportManifest:
    """Check the export read from ``archive``; with ``destination`` (an existing directory),
    write its four corpus files there.

    ``max_bytes`` caps the corpus files together. Raises :class:`ExportError` naming the first
    problem; files already written to ``destination`` are then incomplete, and the caller
    discards them. A member that is not a plain regular file, or declares another size than
    the manifest, is refused before a byte of it is written.
    """
    members = _Members(archive, max_bytes)
    manifest = members.read_manifest()
    if manifest.files_bytes > max_bytes:
        raise ExportError(
            f"the corpus files total {manifest.files_bytes} bytes, more than {max_bytes}"
        )
    for entry in manifest.files:
        lines = _copy_member(members, entry, destination)
        if entry.name == CORPUS_FILE_NAMES[0] and lines != manifest.case_count:
            raise ExportError(
                f"{MANIFEST_NAME} says {manifest.case_count} cases, "
                f"{entry.name} holds {lines} lines"
            )
    trailing = members.next()
    if trailing is not None:
        raise ExportError(f"member {trailing[0].name!r} follows runs.jsonl")
    return manifest


def _copy_member(members: _Members, entry: ExportedFile, destination: Path | None) -> int:
    """Copy one member, checking its size and SHA-256; return its number of lines (a last
    line without its newline counts)."""
    member, source = members.take(entry.name, entry.size)
    if member.size != entry.size:
        raise ExportError(f"{entry.name} has {member.size} bytes, the manifest says {entry.size}")
    digest = hashlib.sha256()
    lines = 0
    last = b"\n"
    sink = None if destination is None else (destination / entry.name).open("xb")
    try:
        while chunk := _read(source, _CHUNK):
            digest.update(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
            if sink is not None:
                sink.write(chunk)
    finally:
        if sink is not None:
            sink.close()
    if digest.hexdigest() != entry.sha256:
        raise ExportError(
            f"{entry.name} has SHA-256 {digest.hexdigest()}, the manifest says {entry.sha256}"
        )
    return lines + (last != b"\n")
