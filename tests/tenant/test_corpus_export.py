"""Corpus export: deterministic bytes, an exact manifest, and a reader that trusts nothing."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import tarfile
import zlib
from importlib import resources
from pathlib import Path

import pytest

from attestation.tenant.corpus_export import (
    CORPUS_FILE_NAMES,
    MANIFEST_NAME,
    ExportError,
    ExportManifest,
    describe_files,
    read_export,
    write_export,
)
from runner.cli import main as runner_main
from runner.corpus.checksum import compute_checksum
from tests.fifo_guard import fifo

EXAMPLE_CORPUS = Path(str(resources.files("runner") / "examples" / "corpus"))
CHECKSUM = "sha256:fc3c6e0b6c2a2b393dd0f8d028b90e336179bcf77983748ecbf1fa2506a53262"


def _export(corpus: Path, out: Path) -> bytes:
    assert runner_main(["corpus", "export", str(corpus), "--out", str(out)]) == 0
    return out.read_bytes()


@pytest.fixture(scope="module")
def example_archive(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return _export(EXAMPLE_CORPUS, tmp_path_factory.mktemp("export") / "corpus.tar.gz")


def _manifest(corpus: Path = EXAMPLE_CORPUS) -> ExportManifest:
    return ExportManifest(
        corpus_checksum=compute_checksum(corpus), case_count=3000, files=describe_files(corpus)
    )


def _archive(members: list[tuple[str, bytes]], *, pax: bool = False) -> bytes:
    """A .tar.gz with these members, for hostile-archive cases."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed,
        tarfile.open(
            fileobj=packed,
            mode="w|",
            format=tarfile.PAX_FORMAT if pax else tarfile.USTAR_FORMAT,
        ) as tar,
    ):
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if pax:
                info.pax_headers = {"comment": "x" * 100}
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _members(archive: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


def test_two_exports_of_one_corpus_are_identical_bytes(
    example_archive: bytes, tmp_path: Path
) -> None:
    assert _export(EXAMPLE_CORPUS, tmp_path / "again.tar.gz") == example_archive

    # A copy with other times, permissions and an extra file exports to the same bytes.
    copy = tmp_path / "copy"
    shutil.copytree(EXAMPLE_CORPUS, copy)
    for name in CORPUS_FILE_NAMES:
        os.utime(copy / name, (1_000_000_000, 1_700_000_000))
        (copy / name).chmod(0o600)
    (copy / "README").write_text("not part of the corpus")
    assert _export(copy, tmp_path / "copy.tar.gz") == example_archive


def test_archive_layout_is_fixed(example_archive: bytes) -> None:
    # gzip: deflate, no flags, mtime 0, maximum compression, OS unknown (RFC 1952 2.3).
    assert example_archive[:10] == bytes.fromhex("1f8b08000000000002ff")
    with tarfile.open(fileobj=io.BytesIO(example_archive), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [MANIFEST_NAME, *CORPUS_FILE_NAMES]
    for member in members:
        assert member.isreg()
        assert (member.mode, member.uid, member.gid, member.mtime) == (0o644, 0, 0, 0)
        assert (member.uname, member.gname, member.pax_headers) == ("", "", {})


def test_manifest_carries_the_checksum_and_every_file_digest(example_archive: bytes) -> None:
    members = dict(_members(example_archive))
    manifest = ExportManifest.model_validate_json(members[MANIFEST_NAME])
    assert manifest.corpus_checksum == CHECKSUM
    assert manifest.case_count == 3000
    for entry in manifest.files:
        data = (EXAMPLE_CORPUS / entry.name).read_bytes()
        assert members[entry.name] == data
        assert (entry.size, entry.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert members[MANIFEST_NAME] == manifest.canonical_bytes()


def test_reading_an_export_restores_the_corpus(example_archive: bytes, tmp_path: Path) -> None:
    manifest = read_export(io.BytesIO(example_archive), tmp_path)
    assert manifest == _manifest()
    for name in CORPUS_FILE_NAMES:
        assert (tmp_path / name).read_bytes() == (EXAMPLE_CORPUS / name).read_bytes()
    assert compute_checksum(tmp_path) == CHECKSUM


def _refused(archive: bytes, match: str, **kwargs: int) -> None:
    with pytest.raises(ExportError, match=match):
        read_export(io.BytesIO(archive), None, **kwargs)


def test_a_changed_file_is_refused_by_its_digest(example_archive: bytes) -> None:
    members = _members(example_archive)
    name, cases = members[1]
    members[1] = (name, cases.replace(b'"label":"flag"', b'"label":"flaq"', 1))
    _refused(_archive(members), r"^cases\.jsonl has SHA-256 [0-9a-f]{64}, the manifest says ")


def test_members_must_be_exactly_the_five_in_order(example_archive: bytes) -> None:
    members = _members(example_archive)
    _refused(_archive(members[:4]), r"^the archive ends before runs\.jsonl$")
    _refused(
        _archive([members[0], members[2], members[1], *members[3:]]),
        "member 'marks.json' where cases.jsonl",
    )
    _refused(_archive([*members, ("extra", b"x")]), r"^member 'extra' follows runs\.jsonl$")
    _refused(_archive(members[1:]), "member 'cases.jsonl' where corpus-export.json")
    _refused(_archive(members, pax=True), "is not a plain regular file")


def test_a_manifest_in_another_form_is_refused(example_archive: bytes) -> None:
    members = _members(example_archive)
    pretty = ExportManifest.model_validate_json(members[0][1]).model_dump_json(indent=1).encode()
    _refused(_archive([(MANIFEST_NAME, pretty), *members[1:]]), "not in RFC 8785 canonical form")
    _refused(_archive([(MANIFEST_NAME, b"{}"), *members[1:]]), "^corpus-export.json is invalid")


class _Unseekable(io.RawIOBase):
    """A stream whose size the reader cannot know (a pipe): only the declared sizes bound it."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        return self._inner.readinto(buffer)


def test_nothing_beyond_the_declared_sizes_is_decompressed(example_archive: bytes) -> None:
    members = _members(example_archive)
    # runs.jsonl grows by 64 MiB of zeros (a 64 KiB gzip stream): refused by the shared
    # reader's compression-ratio bound from the archive's size, and without that size by the
    # member size, before one byte of it is read.
    bomb = _archive([*members[:4], ("runs.jsonl", members[4][1] + bytes(64 << 20))])
    assert len(bomb) < 1 << 20
    _refused(
        bomb,
        rf"^entry 'runs\.jsonl' declares \d+ bytes, more than 200 times "
        rf"the {len(bomb)}-byte archive$",
    )
    with pytest.raises(ExportError, match=r"^member runs\.jsonl has \d+ bytes, more than 1051315$"):
        read_export(io.BufferedReader(_Unseekable(bomb)), None)
    _refused(example_archive, "more than 1000", max_bytes=1000)


def _written(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.iterdir())


def _octal(value: int) -> bytes:
    """A 12-byte tar number field: 11 octal digits and a NUL."""
    return b"%011o\0" % value


def _gnu_sparse_member(name: str, stored: bytes, real_size: int) -> bytes:
    """A GNU sparse header (type ``S``, one extent: ``stored`` at offset 0) claiming
    ``real_size`` bytes, with its data; tarfile cannot write one, so the header is patched."""
    info = tarfile.TarInfo(name)
    info.size = len(stored)
    info.type = tarfile.GNUTYPE_SPARSE
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    header[386:398] = _octal(0)
    header[398:410] = _octal(len(stored))
    header[483:495] = _octal(real_size)
    header[148:156] = b"        "
    header[148:156] = b"%06o\0 " % sum(header[:512])
    padding = -len(stored) % tarfile.BLOCKSIZE
    return bytes(header) + stored + bytes(padding)


def test_a_sparse_member_is_refused_before_a_byte_is_written(
    example_archive: bytes, tmp_path: Path
) -> None:
    # 140 kB declaring a 1 GiB cases.jsonl: the manifest agrees, the member is sparse.
    members = _members(example_archive)
    gib = 1 << 30
    manifest = ExportManifest.model_validate_json(members[0][1])
    declared = [
        entry.model_copy(update={"size": gib}) if entry.name == "cases.jsonl" else entry
        for entry in manifest.files
    ]
    lying = manifest.model_copy(update={"files": tuple(declared)}).canonical_bytes()
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w|", format=tarfile.USTAR_FORMAT) as writer:
        info = tarfile.TarInfo(MANIFEST_NAME)
        info.size = len(lying)
        writer.addfile(info, io.BytesIO(lying))
    body = tar.getvalue()[: -tarfile.RECORDSIZE].rstrip(b"\0")
    body += bytes(-len(body) % tarfile.BLOCKSIZE)
    body += _gnu_sparse_member("cases.jsonl", members[1][1][:4096], gib)
    archive = tmp_path / "sparse.tar.gz"
    archive.write_bytes(gzip.compress(body + bytes(tarfile.RECORDSIZE)))
    assert archive.stat().st_size < 150_000
    out = tmp_path / "out"
    out.mkdir()
    with (
        archive.open("rb") as handle,
        pytest.raises(ExportError, match=r"^entry 'cases\.jsonl' is a sparse file$"),
    ):
        read_export(handle, out)
    assert _written(out) == 0


def _zeros_gzip(tar_prefix: bytes, zeros: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(tar_prefix)]
    block = bytes(1 << 20)
    parts.extend(packer.compress(block) for _ in range(zeros >> 20))
    parts.append(packer.compress(bytes(tarfile.RECORDSIZE)))
    parts.append(packer.flush())
    return b"".join(parts)


def test_a_gzip_bomb_is_refused_having_written_less_than_a_mebibyte(
    example_archive: bytes, tmp_path: Path
) -> None:
    # 256 MiB of zeros as cases.jsonl (about 1000:1), the manifest and the tar header agreeing.
    members = _members(example_archive)
    size = 256 << 20
    manifest = ExportManifest.model_validate_json(members[0][1])
    declared = [
        entry.model_copy(update={"size": size}) if entry.name == "cases.jsonl" else entry
        for entry in manifest.files
    ]
    lying = manifest.model_copy(update={"files": tuple(declared)}).canonical_bytes()
    head = io.BytesIO()
    for name, data in ((MANIFEST_NAME, lying), ("cases.jsonl", b"")):
        info = tarfile.TarInfo(name)
        info.size = len(data) if data else size
        head.write(info.tobuf(tarfile.USTAR_FORMAT))
        head.write(data + bytes(-len(data) % tarfile.BLOCKSIZE))
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(_zeros_gzip(head.getvalue(), size))
    assert size > 500 * archive.stat().st_size
    out = tmp_path / "out"
    out.mkdir()
    with (
        archive.open("rb") as handle,
        pytest.raises(ExportError, match=r"more than 200 times the \d+-byte archive$"),
    ):
        read_export(handle, out)
    assert _written(out) < 1 << 20


def test_the_manifest_case_count_is_checked(example_archive: bytes) -> None:
    members = _members(example_archive)
    manifest = ExportManifest.model_validate_json(members[0][1])
    one = manifest.model_copy(update={"case_count": 1}).canonical_bytes()
    _refused(
        _archive([(MANIFEST_NAME, one), *members[1:]]),
        r"^corpus-export\.json says 1 cases, cases\.jsonl holds 3000 lines$",
    )


def test_garbage_is_not_an_export() -> None:
    _refused(b"not gzip at all", "^not a valid .tar.gz")
    _refused(gzip.compress(b"\0" * 10), "^not a valid .tar.gz: truncated header$")
    _refused(
        gzip.compress(bytes(tarfile.RECORDSIZE)), "^the archive ends before corpus-export.json$"
    )


def test_a_file_changing_during_the_export_fails_it(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    manifest = _manifest(corpus)
    with (corpus / "marks.json").open("ab") as handle:
        handle.write(b"\n")
    with pytest.raises(ExportError, match=r"^marks\.json changed while it was being exported$"):
        write_export(corpus, manifest, io.BytesIO())
    (corpus / "plan.json").write_bytes((EXAMPLE_CORPUS / "plan.json").read_bytes()[:-1])
    (corpus / "marks.json").write_bytes((EXAMPLE_CORPUS / "marks.json").read_bytes())
    with pytest.raises(ExportError, match=r"^plan\.json changed while it was being exported$"):
        write_export(corpus, manifest, io.BytesIO())


def test_cli_errors_leave_nothing_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.tar.gz"
    assert runner_main(["corpus", "export", str(EXAMPLE_CORPUS), "--out", str(tmp_path)]) == 9
    assert "is a directory" in capsys.readouterr().err
    broken = tmp_path / "broken"
    shutil.copytree(EXAMPLE_CORPUS, broken)
    (broken / "cases.jsonl").write_text('{"case_id": "A", "label": "x"}\n')
    assert runner_main(["corpus", "export", str(broken), "--out", str(out)]) == 1
    assert "cases.jsonl:1: field 'case_id'" in capsys.readouterr().err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [broken]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_export_checks_each_file_by_kind_before_opening_it(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    marks = corpus / "marks.json"
    marks.unlink()
    out = tmp_path / "out.tar.gz"
    if kind == "device":
        marks.symlink_to("/dev/zero")
        code = runner_main(["corpus", "export", str(corpus), "--out", str(out)])
        expected = "is a character device, not a regular file"
    else:
        with fifo(marks):
            code = runner_main(["corpus", "export", str(corpus), "--out", str(out)])
        expected = "is a FIFO, not a regular file"
    assert code == 1
    assert capsys.readouterr().err.strip().endswith(f"marks.json: cannot read: {expected}")
    assert not out.exists()


def test_every_corpus_file_is_validated_before_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    (corpus / "plan.json").write_bytes(b"{not json")
    out = tmp_path / "out.tar.gz"
    assert runner_main(["corpus", "export", str(corpus), "--out", str(out)]) == 1
    assert "plan.json: " in capsys.readouterr().err
    assert not out.exists()


def test_checksum_checks_the_whole_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    assert runner_main(["corpus", "checksum", str(corpus)]) == 0
    assert capsys.readouterr().out == CHECKSUM + "\n"
    (corpus / "plan.json").unlink()
    assert runner_main(["corpus", "checksum", str(corpus)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "plan.json: file is missing" in captured.err
