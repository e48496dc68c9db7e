"""``attested-replay image build``: the replay image from Debian packages and hashed wheels.

Inputs, all in the source tree: ``image/debian.lock`` (debootstrap's suite, variant, extra
packages, the clamp time, and every package's version and .deb hash), ``image/python.lock``
(the runtime wheels, by hash), ``image/build.lock`` (setuptools and wheel, by hash) and the
project's files. Output: an OCI image layout whose manifest digest depends on nothing else
(docs/image.md lists what can still make two builds differ, and what the build does then).

Steps: debootstrap (or a copy of a cached root built from the same lock), checked against the
lock and stripped (:mod:`runner.image.debian`); the project's wheel built with the locked
setuptools, the runtime wheels downloaded by hash; all of them unpacked into a virtual
environment at ``/opt/attested-replay`` whose interpreter is Debian's python3
(:mod:`runner.image.wheels`); the replay user, the Job's mount points; then the layout
(:mod:`runner.image.layout`). pip runs on the build machine only: the image has no pip, no
setuptools, no apt lists or caches and no compiler.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from attestation.tenant.fsutil import atomic_write_text
from runner.errors import ImageBuildError, UsageError
from runner.image import debian
from runner.image.layout import ImageConfig, write_layout
from runner.image.steps import run_step
from runner.image.wheels import unpack_wheels
from runner.k8s.job import OUT_DIR, RUN_AS_UID, RUNNER_COMMAND, RUNNER_ENV

DEBIAN_LOCK: Final = "image/debian.lock"
PYTHON_LOCK: Final = "image/python.lock"
BUILD_LOCK: Final = "image/build.lock"
#: What of the source tree goes into the project's wheel (pyproject.toml decides the rest).
SOURCE_FILES: Final = (
    "pyproject.toml",
    "README.md",
    "attestation",
    "runner",
)
VENV: Final = "opt/attested-replay"
#: Mount points of the Job's volumes that must exist in a read-only root.
MOUNT_POINTS: Final = (OUT_DIR.lstrip("/"), "replay/corpus")
USER_NAME: Final = "replay"
#: glibc of Debian bookworm is 2.36: every manylinux tag up to it, newest first.
MANYLINUX_TAGS: Final = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
PIP_TIMEOUT_SECONDS: Final = 900


@dataclass(frozen=True)
class BuildResult:
    digest: str
    layout: Path
    debian_from_cache: bool


def _checked_source(source: Path) -> tuple[debian.DebianLock, str]:
    for relative in (*SOURCE_FILES, DEBIAN_LOCK, PYTHON_LOCK, BUILD_LOCK):
        if not (source / relative).exists():
            raise UsageError(f"--source {source}: {relative} is missing")
    text = (source / DEBIAN_LOCK).read_text(encoding="utf-8")
    return debian.parse_lock(text, where=DEBIAN_LOCK), text


def _labels(source: Path) -> dict[str, str]:
    project = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {
        "org.opencontainers.image.title": project["name"],
        "org.opencontainers.image.description": project["description"],
        "org.opencontainers.image.licenses": project["license"],
        "org.opencontainers.image.version": project["version"],
        "org.opencontainers.image.base.name": "debian:bookworm (debootstrap, image/debian.lock)",
    }


def _run(command: Sequence[str], *, what: str, env: dict[str, str] | None = None) -> None:
    run_step(command, what=what, env=env, timeout=PIP_TIMEOUT_SECONDS)


def _copy_tree(origin: Path, target: Path) -> None:
    """A copy that keeps owners, modes, times and hard links (the root's files are root's)."""
    _run(["cp", "-a", "--", str(origin), str(target)], what=f"copying {origin}")


def debian_root(
    root: Path, lock: debian.DebianLock, lock_text: str, *, mirror: str, cache: Path | None
) -> bool:
    """The stripped, lock-checked Debian root at ``root``; True when it came from ``cache``:
    one directory per lock file and version of :mod:`runner.image.debian` (the code that checks
    and strips the root), so a changed lock or a changed strip never reuses a root."""
    code = Path(debian.__file__).read_bytes()
    key = hashlib.sha256(lock_text.encode() + b"\0" + code).hexdigest()
    cached = cache / key if cache is not None else None
    if cached is not None and cached.is_dir():
        _copy_tree(cached, root)
        return True
    debian.debootstrap(root, lock, mirror=mirror)
    debian.check_against_lock(root, lock)
    debian.strip(root, lock)
    if cached is not None:
        partial = cached.with_name(key + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        _copy_tree(root, partial)
        partial.rename(cached)
    return False


def _python_minor(root: Path) -> str:
    found = sorted(
        path.name for path in root.glob("usr/lib/python3.*") if (path / "os.py").exists()
    )
    if len(found) != 1:
        raise ImageBuildError(f"want one Python standard library in the Debian root, found {found}")
    return found[0].removeprefix("python")


def _wheels(source: Path, work: Path, *, minor: str, epoch: int) -> list[Path]:
    """The project's wheel and the locked runtime wheels, in ``work/wheels``."""
    tools = work / "build-env"
    _run([sys.executable, "-m", "venv", str(tools)], what="creating the build environment")
    pip = [str(tools / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    environment = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PYTHONDONTWRITEBYTECODE": "1"}
    strict = ["--require-hashes", "--no-deps", "--only-binary=:all:"]
    _run(
        [*pip, "install", "--quiet", *strict, "-r", str(source / BUILD_LOCK)],
        what=f"pip install -r {BUILD_LOCK}",
        env=environment,
    )
    wheels = work / "wheels"
    platforms = [f"--platform={tag}" for tag in MANYLINUX_TAGS]
    _run(
        [
            *pip, "download", "--quiet", *strict, *platforms,
            f"--python-version={minor}", "--implementation=cp", f"--abi=cp{minor.replace('.', '')}",
            "-r", str(source / PYTHON_LOCK), "-d", str(wheels),
        ],
        what=f"pip download -r {PYTHON_LOCK}",
        env=environment,
    )  # fmt: skip
    tree = work / "source"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for relative in SOURCE_FILES:
        origin = source / relative
        if origin.is_dir():
            shutil.copytree(origin, tree / relative, ignore=ignore)
        else:
            shutil.copyfile(origin, tree / relative)
    _run(
        [
            *pip,
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(tree),
        ],
        what="building the project's wheel",
        env=environment,
    )
    return sorted(wheels.glob("*.whl"))


def _install(root: Path, wheels: list[Path], *, minor: str) -> None:
    venv = root / VENV
    site_packages = venv / "lib" / f"python{minor}" / "site-packages"
    site_packages.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    (venv / "bin" / "python3").symlink_to("python")
    (venv / "pyvenv.cfg").write_text(
        "home = /usr/bin\ninclude-system-site-packages = false\n", encoding="ascii"
    )
    unpack_wheels(wheels, site_packages)
    # Modes of what this build wrote, whatever the builder's umask was.
    for directory, _dirs, files in os.walk(venv):
        Path(directory).chmod(0o755)
        for name in files:
            path = Path(directory) / name
            path.chmod(0o755 if path.stat().st_mode & 0o100 else 0o644)


def _add_user(root: Path) -> None:
    """The Job's numeric user, named, so that tools asking for its name get one."""
    with (root / "etc/passwd").open("a", encoding="ascii") as passwd:
        passwd.write(f"{USER_NAME}:x:{RUN_AS_UID}:{RUN_AS_UID}::/tmp:/usr/sbin/nologin\n")
    with (root / "etc/group").open("a", encoding="ascii") as group:
        group.write(f"{USER_NAME}:x:{RUN_AS_UID}:\n")


def image_config(source: Path) -> ImageConfig:
    """What the Job and its agent policy pin: the entrypoint (RUNNER_COMMAND + run), the whole
    environment (RUNNER_ENV), the working directory and the user."""
    return ImageConfig(
        user=f"{RUN_AS_UID}:{RUN_AS_UID}",
        env=RUNNER_ENV,
        entrypoint=(*RUNNER_COMMAND, "run"),
        working_dir=OUT_DIR,
        labels=_labels(source),
    )


def build_image(
    source: Path, out: Path, *, mirror: str, cache: Path | None, work_parent: Path | None = None
) -> BuildResult:
    """Build the image of ``source`` as an OCI layout in the new directory ``out``."""
    lock, lock_text = _checked_source(source)
    debian.check_tools()
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out}: is not empty; give a new or empty directory")
    with tempfile.TemporaryDirectory(prefix="attested-replay-image-", dir=work_parent) as name:
        work = Path(name)
        root = work / "root"
        from_cache = debian_root(root, lock, lock_text, mirror=mirror, cache=cache)
        minor = _python_minor(root)
        wheels = _wheels(source, work, minor=minor, epoch=lock.source_date_epoch)
        _install(root, wheels, minor=minor)
        _add_user(root)
        for mount_point in MOUNT_POINTS:
            (root / mount_point).mkdir(parents=True, exist_ok=True)
            (root / mount_point).chmod(0o755)
        (root / "replay").chmod(0o755)
        staging = work / "layout"
        staging.mkdir()
        digest = write_layout(
            root,
            staging,
            image_config(source),
            source_date_epoch=lock.source_date_epoch,
            ref_name=_labels(source)["org.opencontainers.image.version"],
        )
        if out.exists():
            out.rmdir()  # empty (checked above): the finished layout takes its place
        shutil.move(staging, out)
    return BuildResult(digest=digest, layout=out, debian_from_cache=from_cache)


def write_debian_lock(source: Path, *, mirror: str, work_parent: Path | None = None) -> str:
    """Rewrite ``source/image/debian.lock`` from a fresh debootstrap of its settings; returns
    the new lock's text."""
    lock, _text = _checked_source(source)
    debian.check_tools()
    with tempfile.TemporaryDirectory(prefix="attested-replay-lock-", dir=work_parent) as name:
        root = Path(name) / "root"
        debian.debootstrap(root, lock, mirror=mirror)
        text = debian.lock_of(root, lock).render()
    atomic_write_text(source / DEBIAN_LOCK, text)
    return text
