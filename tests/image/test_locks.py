"""The build's checks of its inputs, without root or network: the Debian lock (parse, compare
with what debootstrap installed, naming the package), and the wheel unpacker's refusals."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from runner.cli import main
from runner.errors import ImageBuildError
from runner.image import debian
from runner.image.build import DEBIAN_LOCK
from runner.image.wheels import unpack_wheels

REPO = Path(__file__).resolve().parents[2]

STATUS = """\
Package: python3
Status: install ok installed
Version: 3.11.2-1+b1
Description: interactive high-level object-oriented language
 a continuation line: Version: 9

Package: removed-one
Status: deinstall ok config-files
Version: 1.0

Package: libc6
Status: install ok installed
Conffiles:
 /etc/ld.so.conf.d/x86_64-linux-gnu.conf 0123
Version: 2.36-9+deb12u14
"""


def _root(tmp_path: Path, debs: dict[str, bytes]) -> Path:
    root = tmp_path / "root"
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(STATUS, encoding="utf-8")
    archives = root / "var/cache/apt/archives"
    archives.mkdir(parents=True)
    for name, data in debs.items():
        (archives / name).write_bytes(data)
    return root


def _lock(**packages: tuple[str, bytes]) -> debian.DebianLock:
    return debian.DebianLock(
        suite="bookworm",
        variant="minbase",
        include=("python3",),
        source_date_epoch=1747699200,
        packages={
            name.replace("_", "-"): debian.LockedPackage(version, hashlib.sha256(data).hexdigest())
            for name, (version, data) in packages.items()
        },
    )


DEBS = {
    "python3_3.11.2-1+b1_amd64.deb": b"python3 deb",
    "libc6_2.36-9+deb12u14_amd64.deb": b"libc6 deb",
}


def test_the_repository_lock_parses_and_renders_back() -> None:
    text = (REPO / DEBIAN_LOCK).read_text(encoding="utf-8")
    lock = debian.parse_lock(text, where=DEBIAN_LOCK)
    assert lock.render() == text
    assert (lock.suite, lock.variant, lock.include) == ("bookworm", "minbase", ("python3",))
    assert lock.packages["python3"].version == "3.11.2-1+b1"
    assert {"dpkg", "libc6", "python3.11-minimal"} <= lock.packages.keys()
    assert not {"gcc", "make", "python3-pip", "python3-venv"} & lock.packages.keys()


def test_a_root_with_exactly_the_locked_packages_passes(tmp_path: Path) -> None:
    root = _root(tmp_path, DEBS)
    lock = _lock(python3=("3.11.2-1+b1", b"python3 deb"), libc6=("2.36-9+deb12u14", b"libc6 deb"))
    debian.check_against_lock(root, lock)
    assert debian.installed_packages(root) == {"python3": "3.11.2-1+b1", "libc6": "2.36-9+deb12u14"}
    assert debian.lock_of(root, lock) == lock


def test_a_mirror_that_moved_on_fails_naming_the_package(tmp_path: Path) -> None:
    root = _root(tmp_path, DEBS)
    lock = _lock(python3=("3.11.2-1+b1", b"python3 deb"), libc6=("2.36-9+deb12u7", b"libc6 deb"))
    with pytest.raises(ImageBuildError) as caught:
        debian.check_against_lock(root, lock)
    assert str(caught.value) == (
        "Debian package libc6 2.36-9+deb12u7 (locked) was not installed (the mirror served "
        "2.36-9+deb12u14): the mirror no longer serves the locked version; use a mirror that "
        "does (--mirror) or rewrite the lock, which changes the image digest"
    )


def test_an_unlocked_package_and_a_changed_deb_fail(tmp_path: Path) -> None:
    root = _root(tmp_path, DEBS)
    with pytest.raises(ImageBuildError, match=r"^Debian package libc6 2\.36-9\+deb12u14 was "):
        debian.check_against_lock(root, _lock(python3=("3.11.2-1+b1", b"python3 deb")))
    lock = _lock(python3=("3.11.2-1+b1", b"python3 deb"), libc6=("2.36-9+deb12u14", b"other"))
    with pytest.raises(ImageBuildError) as caught:
        debian.check_against_lock(root, lock)
    assert str(caught.value) == (
        f"Debian package libc6 2.36-9+deb12u14: its .deb has sha256 "
        f"{hashlib.sha256(b'libc6 deb').hexdigest()}, the lock says "
        f"{hashlib.sha256(b'other').hexdigest()}"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("suite bookworm\n", "x: missing include, source-date-epoch, variant"),
        ("suite a\nsuite b\n", "x:2: suite is given twice"),
        ("mirror http://x\n", "x:1: unknown line 'mirror http://x'"),
        ("package a 1 sha256:00\n", "x:1: want 'package NAME VERSION sha256:<64 hex>', got "),
        (
            "suite s\nvariant v\ninclude p\nsource-date-epoch soon\n",
            "x: source-date-epoch must be seconds since 1970",
        ),
    ],
)
def test_a_malformed_lock_is_refused(text: str, message: str) -> None:
    with pytest.raises(ImageBuildError) as caught:
        debian.parse_lock(text, where="x")
    assert str(caught.value).startswith(message)


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_wheels_are_unpacked_into_site_packages(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "a-1-py3-none-any.whl",
        {"a/__init__.py": b"x = 1\n", "a-1.data/purelib/b.py": b"", "a-1.dist-info/RECORD": b""},
    )
    site = tmp_path / "site"
    site.mkdir()
    assert unpack_wheels([wheel], site) == ["a-1-py3-none-any.whl"]
    assert sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()) == [
        "a-1.dist-info/RECORD",
        "a/__init__.py",
        "b.py",
    ]


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ("../evil.py", "a-1-py3-none-any.whl: member '../evil.py' leaves site-packages"),
        ("/etc/passwd", "a-1-py3-none-any.whl: member '/etc/passwd' leaves site-packages"),
        (
            "a-1.data/scripts/run",
            (
                "a-1-py3-none-any.whl: 'a-1.data/scripts/run' is a .data file other than "
                "purelib/platlib; the image build only unpacks wheels"
            ),
        ),
    ],
)
def test_a_wheel_that_needs_more_than_unpacking_is_refused(
    tmp_path: Path, member: str, message: str
) -> None:
    wheel = _wheel(tmp_path / "a-1-py3-none-any.whl", {member: b"x"})
    site = tmp_path / "site"
    site.mkdir()
    with pytest.raises(ImageBuildError) as caught:
        unpack_wheels([wheel], site)
    assert str(caught.value) == message
    assert not (tmp_path / "evil.py").exists()


def test_two_wheels_bringing_one_file_are_refused(tmp_path: Path) -> None:
    first = _wheel(tmp_path / "a-1-py3-none-any.whl", {"shared/x.py": b"1"})
    second = _wheel(tmp_path / "b-1-py3-none-any.whl", {"shared/x.py": b"2"})
    site = tmp_path / "site"
    site.mkdir()
    with pytest.raises(ImageBuildError, match=r"^b-1-py3-none-any\.whl and a-1-py3-none-any\.whl"):
        unpack_wheels([second, first], site)


def test_image_build_without_root_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr("shutil.which", lambda *_args, **_kwargs: "/usr/sbin/debootstrap")
    out = tmp_path / "layout"
    assert main(["image", "build", "--source", str(REPO), "--out", str(out)]) == 9
    assert capsys.readouterr().err == "error: image build runs debootstrap, which needs root\n"
    assert not out.exists()


def test_a_mirror_that_is_not_a_url_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "layout"
    args = ["image", "build", "--out", str(out), "--mirror=--foreign"]
    assert main(args) == 9
    assert capsys.readouterr().err == (
        "error: --mirror: '--foreign' is not an http://, https:// or file:/// URL\n"
    )
    assert main(["image", "build", "--out", str(tmp_path / "no" / "layout")]) == 9
    assert "does not exist" in capsys.readouterr().err
