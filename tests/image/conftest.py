"""Builds of the replay image (``attested-replay image build``), once per session.

They need root, debootstrap, runc, skopeo, Debian's archive and PyPI: without root or the tools the
tests skip, and fail when ``CI`` is set (``.ci/image.sh`` installs the tools). Two builds
from two copies of the source tree: the first may take its Debian root from the cache
(``ATTESTED_REPLAY_IMAGE_CACHE``, default: a directory of this session), the second always
runs debootstrap itself, so the digests they print come from two separate debootstraps.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.image.build import BUILD_LOCK, DEBIAN_LOCK, PYTHON_LOCK, SOURCE_FILES, build_image
from runner.image.debian import DEFAULT_MIRROR
from tests.publish.conftest import running_in_ci

REPO = Path(__file__).resolve().parents[2]
CACHE_VARIABLE = "ATTESTED_REPLAY_IMAGE_CACHE"
SKOPEO = "/usr/bin/skopeo"


def require_image_tools() -> None:
    problems = [
        f"{tool} is not installed"
        for tool in ("debootstrap", "runc", "skopeo")
        if shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin") is None
    ]
    if os.geteuid() != 0:
        problems.append("not root (debootstrap and runc need it)")
    if not problems:
        return
    message = "; ".join(problems) + ": run .ci/image.sh as root"
    if running_in_ci(os.environ):
        pytest.fail(f"CI is set but {message}")
    pytest.skip(message)


def copy_source(target: Path) -> Path:
    """What the build reads of the repository, in a directory of its own."""
    target.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for relative in SOURCE_FILES:
        origin = REPO / relative
        if origin.is_dir():
            shutil.copytree(origin, target / relative, ignore=ignore)
        else:
            shutil.copyfile(origin, target / relative)
    (target / "image").mkdir()
    for lock in (DEBIAN_LOCK, PYTHON_LOCK, BUILD_LOCK):
        shutil.copyfile(REPO / lock, target / lock)
    return target


@dataclass(frozen=True)
class Build:
    source: Path
    layout: Path
    digest: str
    debian_from_cache: bool


#: build(name, cache, edit=None, mirror=DEFAULT_MIRROR): copy the source, apply ``edit`` to
#: the copy, build it.
BuildFunction = Callable[..., Build]


@pytest.fixture(scope="session")
def image_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    return Path(configured) if configured else tmp_path_factory.mktemp("debian-cache")


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> BuildFunction:
    """Copy the source and build it; ``cache``: the Debian root cache, None for none."""

    def run(
        name: str,
        cache: Path | None,
        edit: Callable[[Path], None] | None = None,
        mirror: str = DEFAULT_MIRROR,
    ) -> Build:
        require_image_tools()
        base = tmp_path_factory.mktemp(name)
        source = copy_source(base / "source")
        if edit is not None:
            edit(source)
        layout = base / "layout"
        result = build_image(source, layout, mirror=mirror, cache=cache)
        return Build(source, layout, result.digest, result.debian_from_cache)

    return run


@pytest.fixture(scope="session")
def first_build(build: BuildFunction, image_cache: Path) -> Build:
    return build("first", image_cache)


@pytest.fixture(scope="session")
def second_build(build: BuildFunction) -> Build:
    """No cache: a debootstrap of its own, from the same mirror spelled another way (the
    mirror's URL is not part of the image)."""
    return build("second", None, mirror=DEFAULT_MIRROR + "/")
