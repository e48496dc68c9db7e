"""Atomic writes: the target holds the old bytes or the new ones, never part of them, and no
temporary file outlives a failure."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from attestation.tenant import fsutil
from attestation.tenant.fsutil import (
    atomic_output,
    atomic_write,
    atomic_write_all,
    remove_temporaries,
)

Writer = Callable[[Path, bytes], None]


def _with_output(path: Path, data: bytes) -> None:
    with atomic_output(path) as handle:
        handle.write(data)


WRITERS: dict[str, Writer] = {
    "atomic_write": atomic_write,
    "atomic_output": _with_output,
    "atomic_write_all": lambda path, data: atomic_write_all([(path, data)]),
}


def _names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


@pytest.fixture
def strict_umask() -> Iterator[None]:
    previous = os.umask(0o077)
    yield
    os.umask(previous)


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
@pytest.mark.usefixtures("strict_umask")
def test_the_target_gets_the_bytes_and_the_mode_whatever_the_umask(
    writer: Writer, tmp_path: Path
) -> None:
    target = tmp_path / "file.json"
    target.write_bytes(b"old")
    writer(target, b"new bytes")
    assert target.read_bytes() == b"new bytes"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert _names(tmp_path) == ["file.json"]
    atomic_write(target, b"secret", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_short_write_is_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def write_at_most_1000(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data[:1000]))

    monkeypatch.setattr(os, "write", write_at_most_1000)
    data = bytes(range(256)) * 40
    atomic_write(tmp_path / "file", data)
    atomic_write_all([(tmp_path / "other", data)])
    assert (tmp_path / "file").read_bytes() == data
    assert (tmp_path / "other").read_bytes() == data


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_a_failed_write_leaves_the_target_and_no_temporary_file(
    writer: Writer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "file.json"
    target.write_bytes(b"old")

    def failing_fsync(_fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match=r"^\[Errno 5\] Input/output error$"):
        writer(target, b"new bytes")
    assert target.read_bytes() == b"old"
    assert _names(tmp_path) == ["file.json"]


def test_an_interrupted_output_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "file.json"

    def interrupted() -> None:
        with atomic_output(target) as handle:
            handle.write(b"part")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert _names(tmp_path) == []


def test_a_temporary_name_that_exists_is_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file, or a symbolic link to another file, at the first name drawn stays as it was:
    the next name is used."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim")
    (tmp_path / ".a.json.000000000000.tmp").write_bytes(b"someone else's")
    (tmp_path / ".b.json.000000000000.tmp").symlink_to(victim)
    draws = iter([bytes(6), bytes([1] * 6), bytes(6), bytes([2] * 6)])
    monkeypatch.setattr(os, "urandom", lambda _size: next(draws))
    atomic_write(tmp_path / "a.json", b"a")
    atomic_write(tmp_path / "b.json", b"b")
    assert (tmp_path / "a.json").read_bytes() == b"a"
    assert (tmp_path / "b.json").read_bytes() == b"b"
    assert (tmp_path / ".a.json.000000000000.tmp").read_bytes() == b"someone else's"
    assert victim.read_bytes() == b"victim"
    assert _names(tmp_path) == [
        ".a.json.000000000000.tmp",
        ".b.json.000000000000.tmp",
        "a.json",
        "b.json",
        "victim",
    ]


def test_a_missing_directory_is_created_except_by_atomic_write_all(tmp_path: Path) -> None:
    atomic_write(tmp_path / "a" / "b" / "file", b"1")
    _with_output(tmp_path / "c" / "file", b"2")
    assert (tmp_path / "a" / "b" / "file").read_bytes() == b"1"
    assert (tmp_path / "c" / "file").read_bytes() == b"2"
    with pytest.raises(FileNotFoundError):
        atomic_write_all([(tmp_path / "d" / "file", b"3")])
    assert not (tmp_path / "d").exists()


def test_a_file_where_the_directory_should_be_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        atomic_write(tmp_path / "a" / "file", b"1")
    assert _names(tmp_path) == ["a"]


def test_the_temporary_files_of_named_targets_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a killed writer leaves: only the temporary files of the names given go."""
    for name in (
        ".a.json.0123456789ab.tmp",
        ".a.json.ba9876543210.tmp",
        ".b.json.0123456789ab.tmp",
    ):
        (tmp_path / name).write_bytes(b"part")
    (tmp_path / "a.json").write_bytes(b"whole")
    (tmp_path / ".a.json").write_bytes(b"not a temporary file")
    assert remove_temporaries(tmp_path, {"a.json", "c.json"}) == 2
    assert _names(tmp_path) == [".a.json", ".b.json.0123456789ab.tmp", "a.json"]

    # the names matched are the ones a write uses: one that ends before its rename, with no
    # cleanup (as when its process is killed)
    def killed(*_args: object) -> None:
        raise OSError(errno.EINTR, "killed")

    monkeypatch.setattr(os, "replace", killed)
    monkeypatch.setattr(fsutil, "_discard", lambda _temporary: None)
    with pytest.raises(OSError, match="killed"):
        atomic_write(tmp_path / "c.json", b"c")
    assert len(list(tmp_path.glob(".c.json.*.tmp"))) == 1
    monkeypatch.undo()
    assert remove_temporaries(tmp_path, {"c.json"}) == 1
    assert _names(tmp_path) == [".a.json", ".b.json.0123456789ab.tmp", "a.json"]
