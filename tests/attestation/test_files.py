"""attestation.files: only regular files are opened, and never with a blocking open."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from attestation.files import FileTooLargeError, NotRegularFileError, open_regular, read_regular
from tests.fifo_guard import fifo


def test_a_regular_file_and_a_link_to_one_are_read(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert read_regular(tmp_path / "a", 4) == b"data"
    assert read_regular(tmp_path / "link", 4) == b"data"
    with open_regular(tmp_path / "a") as handle:
        assert handle.read() == b"data"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    with fifo(tmp_path / "fifo") as path:
        (tmp_path / "link").symlink_to(path)
        for target in (path, tmp_path / "link"):
            with pytest.raises(NotRegularFileError, match="is a FIFO, not a regular file"):
                read_regular(target, 100)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: p.symlink_to("/dev/zero"), "a character device"),
        (lambda p: p.mkdir(), "a directory"),
    ],
    ids=["dev-zero", "directory"],
)
def test_other_kinds_are_refused(tmp_path: Path, make: Callable[[Path], object], kind: str) -> None:
    path = tmp_path / "x"
    make(path)
    with pytest.raises(NotRegularFileError, match=f"is {kind}, not a regular file"):
        read_regular(path, 100)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(NotRegularFileError, match="is a socket"):
            read_regular(path, 100)


def test_a_link_is_refused_where_none_may_be(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    with pytest.raises(NotRegularFileError, match="is a symbolic link"):
        read_regular(tmp_path / "link", 100, follow_symlinks=False)
    assert read_regular(tmp_path / "a", 100, follow_symlinks=False) == b"data"


def test_the_limit_reads_one_byte_past_it(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 101)
    assert read_regular(tmp_path / "a", 101) == b"x" * 101
    with pytest.raises(FileTooLargeError, match="is larger than 100 bytes") as caught:
        read_regular(tmp_path / "a", 100)
    assert caught.value.filename == str(tmp_path / "a")


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent", 100)
