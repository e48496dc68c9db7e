"""The Debian root of the replay image: debootstrap, checked against ``image/debian.lock``.

debootstrap (minbase) installs whatever the mirror's suite holds today; the lock records what
it held when the lock was written: every package's version and the sha256 of its ``.deb``.
After debootstrap the root's installed packages and the downloaded ``.deb`` files must be
exactly the lock's, or the build fails naming the first package that differs. A mirror that
has moved on (a Debian point release replaces a version) makes the build fail; it never
builds another image silently.

The root is then stripped of what differs between two runs or is not part of the image: the
apt caches and lists, logs, ldconfig's aux-cache (it records file times of this build), the
device nodes debootstrap made, the host's hostname and resolv.conf (left empty: the runtime
mounts its own), and every ``.pyc`` (the image runs ``python -B`` and carries no bytecode).
apt's sources.list names the default mirror, whichever mirror the build used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runner.errors import ImageBuildError, UsageError
from runner.image.steps import run_step

DEFAULT_MIRROR: Final = "http://deb.debian.org/debian"
ARCHIVE_KEYRING: Final = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: debootstrap may take this long (a minbase root with python3 took under a minute here).
DEBOOTSTRAP_TIMEOUT_SECONDS: Final = 1800
_ARCHIVES: Final = "var/cache/apt/archives"
#: Removed from the root (their contents; the directories stay).
_EMPTIED: Final = ("var/cache/apt", "var/lib/apt/lists", "var/log", "dev", "tmp", "run")
#: Removed files: records of this build (times, the host) or duplicates of the kept files.
_REMOVED: Final = (
    "var/cache/ldconfig/aux-cache",
    "var/cache/debconf/config.dat-old",
    "var/cache/debconf/templates.dat-old",
    "var/lib/dpkg/status-old",
    "var/lib/dpkg/diversions-old",
    "etc/passwd-",
    "etc/group-",
    "etc/shadow-",
    "etc/gshadow-",
)
#: Left as empty files: the runtime mounts its own over them.
_EMPTY_FILES: Final = ("etc/hostname", "etc/resolv.conf")


@dataclass(frozen=True)
class LockedPackage:
    version: str
    deb_sha256: str


@dataclass(frozen=True)
class DebianLock:
    """``image/debian.lock``: what debootstrap is asked for, and exactly what it must install."""

    suite: str
    variant: str
    include: tuple[str, ...]
    source_date_epoch: int
    packages: Mapping[str, LockedPackage]

    def render(self) -> str:
        lines = [
            "# The Debian root of the replay image (attested-replay image build; docs/image.md).",
            "# Written by `attested-replay image lock-debian`; a package line is",
            "# 'package NAME VERSION sha256:<hex of the .deb>'.",
            f"suite {self.suite}",
            f"variant {self.variant}",
            f"include {','.join(self.include)}",
            f"source-date-epoch {self.source_date_epoch}",
        ]
        lines += [
            f"package {name} {locked.version} sha256:{locked.deb_sha256}"
            for name, locked in sorted(self.packages.items())
        ]
        return "\n".join(lines) + "\n"


def parse_lock(text: str, *, where: str) -> DebianLock:
    settings: dict[str, str] = {}
    packages: dict[str, LockedPackage] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        if key == "package":
            parts = value.split(" ")
            if len(parts) != 3 or not parts[2].startswith("sha256:") or len(parts[2]) != 71:
                raise ImageBuildError(
                    f"{where}:{number}: want 'package NAME VERSION sha256:<64 hex>', got {line!r}"
                )
            if parts[0] in packages:
                raise ImageBuildError(f"{where}:{number}: package {parts[0]} is locked twice")
            packages[parts[0]] = LockedPackage(parts[1], parts[2].removeprefix("sha256:"))
        elif key in {"suite", "variant", "include", "source-date-epoch"} and value:
            if key in settings:
                raise ImageBuildError(f"{where}:{number}: {key} is given twice")
            settings[key] = value
        else:
            raise ImageBuildError(f"{where}:{number}: unknown line {line!r}")
    missing = sorted({"suite", "variant", "include", "source-date-epoch"} - settings.keys())
    if missing:
        raise ImageBuildError(f"{where}: missing {', '.join(missing)}")
    if not settings["source-date-epoch"].isdigit():
        raise ImageBuildError(f"{where}: source-date-epoch must be seconds since 1970")
    return DebianLock(
        suite=settings["suite"],
        variant=settings["variant"],
        include=tuple(settings["include"].split(",")),
        source_date_epoch=int(settings["source-date-epoch"]),
        packages=packages,
    )


def check_tools() -> Path:
    """debootstrap and the archive keyring, as root; before any work."""
    debootstrap = shutil.which("debootstrap", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if debootstrap is None:
        raise UsageError("image build needs debootstrap (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise UsageError("image build runs debootstrap, which needs root")
    if not ARCHIVE_KEYRING.is_file():
        raise UsageError(
            f"image build checks the archive's signature with {ARCHIVE_KEYRING} "
            "(apt-get install debian-archive-keyring)"
        )
    return Path(debootstrap)


def debootstrap(root: Path, lock: DebianLock, *, mirror: str) -> None:
    """A fresh root from ``mirror``, signature-checked, with the lock's clamp time."""
    command = [
        str(check_tools()),
        f"--variant={lock.variant}",
        f"--include={','.join(lock.include)}",
        f"--keyring={ARCHIVE_KEYRING}",
        lock.suite,
        str(root),
        mirror,
    ]
    environment = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        # shadow writes the day of the last password change from it (etc/shadow).
        "SOURCE_DATE_EPOCH": str(lock.source_date_epoch),
    }
    run_step(
        command,
        what=f"debootstrap {lock.suite} from {mirror}",
        env=environment,
        timeout=DEBOOTSTRAP_TIMEOUT_SECONDS,
        tail=5,
    )


def installed_packages(root: Path) -> dict[str, str]:
    """Name -> version of every package dpkg's status file says is installed."""
    status = (root / "var/lib/dpkg/status").read_text(encoding="utf-8")
    installed: dict[str, str] = {}
    for stanza in status.split("\n\n"):
        fields = {
            key: value.strip()
            for key, _, value in (
                line.partition(":") for line in stanza.splitlines() if line[:1] not in " \t"
            )
        }
        if fields.get("Status") == "install ok installed":
            installed[fields["Package"]] = fields["Version"]
    return installed


def downloaded_packages(root: Path) -> dict[str, LockedPackage]:
    """Name -> version and sha256 of the .deb files debootstrap left in apt's archive."""
    found: dict[str, LockedPackage] = {}
    for deb in sorted((root / _ARCHIVES).glob("*.deb")):
        name, version, _arch = deb.name.removesuffix(".deb").split("_")
        digest = hashlib.sha256(deb.read_bytes()).hexdigest()
        found[name] = LockedPackage(urllib.parse.unquote(version), digest)
    return found


def lock_of(root: Path, template: DebianLock) -> DebianLock:
    """The lock that describes ``root`` (``image lock-debian``)."""
    return DebianLock(
        suite=template.suite,
        variant=template.variant,
        include=template.include,
        source_date_epoch=template.source_date_epoch,
        packages=downloaded_packages(root),
    )


def check_against_lock(root: Path, lock: DebianLock) -> None:
    """Fail, naming the package, unless debootstrap installed exactly the locked files."""
    downloaded = downloaded_packages(root)
    installed = installed_packages(root)
    for name in sorted(lock.packages.keys() | downloaded.keys() | installed.keys()):
        locked = lock.packages.get(name)
        got = downloaded.get(name)
        if locked is None:
            raise ImageBuildError(
                f"Debian package {name} {installed.get(name, '')} was installed but is not in "
                "the lock: the suite changed; rewrite the lock (image lock-debian), which "
                "changes the image digest"
            )
        if got is None or installed.get(name) != locked.version:
            raise ImageBuildError(
                f"Debian package {name} {locked.version} (locked) was not installed "
                f"(the mirror served {installed.get(name, 'none')}): the mirror no longer "
                "serves the locked version; use a mirror that does (--mirror) or rewrite the "
                "lock, which changes the image digest"
            )
        if got != locked:
            raise ImageBuildError(
                f"Debian package {name} {locked.version}: its .deb has sha256 "
                f"{got.deb_sha256}, the lock says {locked.deb_sha256}"
            )


def strip(root: Path, lock: DebianLock) -> None:
    """Remove what is not part of the image (see the module docstring)."""
    # debootstrap writes the mirror it used; the image names the default whatever --mirror was.
    sources = root / "etc/apt/sources.list"
    sources.write_text(f"deb {DEFAULT_MIRROR} {lock.suite} main\n", encoding="ascii")
    sources.chmod(0o644)
    for relative in _EMPTIED:
        directory = root / relative
        for child in directory.iterdir() if directory.is_dir() else ():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    for relative in _REMOVED:
        (root / relative).unlink(missing_ok=True)
    for relative in _EMPTY_FILES:
        (root / relative).unlink(missing_ok=True)
        (root / relative).write_bytes(b"")
        (root / relative).chmod(0o644)
    for cache in sorted(root.glob("usr/**/__pycache__")):
        shutil.rmtree(cache)
