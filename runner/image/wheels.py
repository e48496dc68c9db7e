"""Wheels unpacked into the image's virtual environment, without pip in the image.

pip checked each downloaded wheel against its hash in ``image/python.lock``; here a wheel is
only unpacked (a wheel is a zip whose paths are relative to site-packages): no ``.pyc`` is
compiled, no INSTALLER or direct_url.json records this machine, no script gets this machine's
interpreter in its shebang. The image runs ``python -m runner``, so no console script is
written. A wheel that needs more than unpacking (``.data`` scripts, headers or data) is refused,
as is a path that leaves site-packages or a file two wheels both bring.
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path, PurePosixPath
from typing import Final

from runner.errors import ImageBuildError

_SITE_DATA: Final = ("purelib", "platlib")


def _target(wheel: Path, name: str) -> PurePosixPath | None:
    """Where the member goes, relative to site-packages (None: a directory entry)."""
    if name.endswith("/"):
        return None
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or not path.parts:
        raise ImageBuildError(f"{wheel.name}: member {name!r} leaves site-packages")
    if path.parts[0].endswith(".data"):
        if len(path.parts) < 3 or path.parts[1] not in _SITE_DATA:
            raise ImageBuildError(
                f"{wheel.name}: {name!r} is a .data file other than purelib/platlib; the image "
                "build only unpacks wheels"
            )
        return PurePosixPath(*path.parts[2:])
    return path


def unpack_wheels(wheels: list[Path], site_packages: Path) -> list[str]:
    """Unpack every wheel (sorted by file name) into ``site_packages``; returns their names."""
    written: dict[PurePosixPath, str] = {}
    for wheel in sorted(wheels, key=lambda path: path.name):
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                target = _target(wheel, member.filename)
                if target is None:
                    continue
                if target in written:
                    raise ImageBuildError(
                        f"{wheel.name} and {written[target]} both bring {target.as_posix()}"
                    )
                written[target] = wheel.name
                destination = site_packages.joinpath(*target.parts)
                destination.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                destination.write_bytes(archive.read(member))
                executable = (member.external_attr >> 16) & stat.S_IXUSR
                destination.chmod(0o755 if executable else 0o644)
    return sorted(wheel.name for wheel in wheels)
