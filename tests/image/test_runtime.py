"""The built image under a real OCI runtime (runc): its entrypoint replays the example corpus
with simulated evidence on a read-only root, as the Job's user, and the envelope verifies.

The bundle is the layout's one layer unpacked, and a config.json made from ``runc spec``
with the image config's user, environment, working directory and entrypoint, the root
read-only (``root.readonly``), and the Job's writable volumes (/tmp, /replay/out) as bind
mounts of directories of the test.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from attestation.cli import main as verify_main
from runner.cli import main as runner_main
from runner.evidence.simulated import load_or_create_simulated_amd
from runner.k8s.job import RUN_AS_UID
from tests.e2e.conftest import EXAMPLE_CORPUS
from tests.image.conftest import Build

pytestmark = pytest.mark.slow

RUNC = "/usr/sbin/runc"
RUN_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class Bundle:
    directory: Path
    rootfs: Path
    config: dict[str, object]
    digest: str


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


@pytest.fixture(scope="module")
def bundle(first_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    manifest = json.loads(_blob(first_build.layout, first_build.digest).read_bytes())
    config = json.loads(_blob(first_build.layout, manifest["config"]["digest"]).read_bytes())
    directory = tmp_path_factory.mktemp("bundle")
    rootfs = directory / "rootfs"
    rootfs.mkdir()
    (layer,) = manifest["layers"]
    with tarfile.open(_blob(first_build.layout, layer["digest"])) as tar:
        tar.extractall(rootfs, numeric_owner=True, filter="fully_trusted")
    return Bundle(directory, rootfs, config, first_build.digest)


def _tree_state(root: Path) -> str:
    """A digest of every path, type, mode, owner, size and time under ``root``."""
    digest = hashlib.sha256()
    for directory, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            status = os.lstat(Path(directory) / name)
            digest.update(
                f"{directory}/{name} {status.st_mode} {status.st_uid} {status.st_size} "
                f"{status.st_mtime_ns}\n".encode()
            )
    return digest.hexdigest()


def _runc(bundle: Bundle, work: Path, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in the image: the image config's user, env and cwd, a read-only root,
    ``work/tmp`` at /tmp, ``work/out`` at /replay/out, the example corpus read-only."""
    image = bundle.config["config"]
    assert isinstance(image, dict)
    uid, gid = (int(part) for part in image["User"].split(":"))
    for name in ("tmp", "out"):
        (work / name).mkdir(exist_ok=True)
        os.chown(work / name, uid, gid)
    spec_dir = work / "spec"
    spec_dir.mkdir(exist_ok=True)
    (spec_dir / "config.json").unlink(missing_ok=True)
    subprocess.run([RUNC, "spec", "--bundle", str(spec_dir)], check=True)
    spec = json.loads((spec_dir / "config.json").read_text(encoding="utf-8"))
    spec["root"] = {"path": str(bundle.rootfs), "readonly": True}
    spec["process"].update(
        terminal=False,
        user={"uid": uid, "gid": gid},
        args=list(args),
        env=list(image["Env"]),
        cwd=image["WorkingDir"],
    )
    for capabilities in spec["process"]["capabilities"].values():
        capabilities.clear()

    def bind(source: Path, target: str, *options: str) -> dict[str, object]:
        return {
            "destination": target,
            "type": "bind",
            "source": str(source),
            "options": ["rbind", "nosuid", "nodev", *options],
        }

    spec["mounts"] += [
        bind(work / "tmp", "/tmp", "rw"),
        bind(work / "out", "/replay/out", "rw"),
        bind(EXAMPLE_CORPUS, "/replay/corpus", "ro"),
    ]
    (spec_dir / "config.json").write_text(json.dumps(spec), encoding="utf-8")
    return subprocess.run(
        [RUNC, "run", "--bundle", str(spec_dir), f"replay-test-{uuid.uuid4().hex[:12]}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=RUN_TIMEOUT_SECONDS,
    )


def _entrypoint(bundle: Bundle) -> list[str]:
    image = bundle.config["config"]
    assert isinstance(image, dict)
    return list(image["Entrypoint"])


def test_the_entrypoint_replays_and_its_envelope_verifies(
    bundle: Bundle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _tree_state(bundle.rootfs)
    args = [
        *_entrypoint(bundle),
        "--corpus", "/replay/corpus",
        "--run-id", "image-run-1",
        "--tenant", "acme",
        "--evidence", "simulated",
        "--image-digest", bundle.digest,
        "--out", "/replay/out/envelope.json",
    ]  # fmt: skip
    result = _runc(bundle, tmp_path, args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _tree_state(bundle.rootfs) == before  # nothing on the root was written
    envelope = tmp_path / "out" / "envelope.json"
    assert envelope.stat().st_uid == RUN_AS_UID
    assert json.loads(envelope.read_bytes())["binding"]["imageDigest"] == bundle.digest
    # The simulated PKI the replay made lives in the container's /tmp (ATTESTED_REPLAY_STATE_DIR).
    root = load_or_create_simulated_amd(tmp_path / "tmp" / "attested-replay").root_fingerprint
    expected = tmp_path / "expected.json"
    assert runner_main([
        "expected", "--run-id", "image-run-1", "--corpus", str(EXAMPLE_CORPUS),
        "--tenant", "acme", "--image-digest", bundle.digest, "--simulated-root", root,
        "--out", str(expected),
    ]) == 0  # fmt: skip
    capsys.readouterr()
    assert verify_main(["--envelope", str(envelope), "--expected", str(expected), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verified"] is True
    # Another image digest in the expected values: the same envelope is refused.
    other = tmp_path / "other.json"
    assert runner_main([
        "expected", "--run-id", "image-run-1", "--corpus", str(EXAMPLE_CORPUS),
        "--image-digest", "sha256:" + "0" * 64, "--simulated-root", root, "--out", str(other),
    ]) == 0  # fmt: skip
    assert verify_main(["--envelope", str(envelope), "--expected", str(other)]) == 8


_PROBE = """\
import errno, os, sys
print(os.getuid(), os.getgid(), os.getcwd())
for path in ("/probe", "/opt/attested-replay/probe", "/etc/probe", "/usr/bin/probe"):
    try:
        open(path, "w").close()
    except OSError as exc:
        print(path, errno.errorcode[exc.errno])
    else:
        print(path, "written")
with open("/tmp/probe", "w") as handle:
    handle.write("ok")
print("tmp ok")
for module in ("pip", "setuptools", "wheel", "ensurepip"):
    try:
        __import__(module)
    except ImportError:
        print(module, "missing")
    else:
        print(module, "present")
"""


def test_the_process_runs_as_the_job_user_on_a_read_only_root(
    bundle: Bundle, tmp_path: Path
) -> None:
    python = _entrypoint(bundle)[0]
    result = _runc(bundle, tmp_path, [python, "-I", "-B", "-c", _PROBE])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{RUN_AS_UID} {RUN_AS_UID} /replay/out",
        "/probe EROFS",
        "/opt/attested-replay/probe EROFS",
        "/etc/probe EROFS",
        "/usr/bin/probe EROFS",
        "tmp ok",
        "pip missing",
        "setuptools missing",
        "wheel missing",
        "ensurepip missing",
    ]


def test_no_build_tool_and_nothing_writable_is_left(bundle: Bundle, first_build: Build) -> None:
    rootfs = bundle.rootfs
    for tool in ("gcc", "cc", "c++", "make", "ld", "as", "pip", "pip3", "dpkg-deb-build"):
        assert not (rootfs / "usr" / "bin" / tool).exists(), tool
    assert not list(rootfs.glob("usr/lib/python3*/**/pip"))
    assert not list(rootfs.glob("opt/attested-replay/lib/python3.11/site-packages/pip*"))
    assert not list(rootfs.glob("opt/attested-replay/lib/python3.11/site-packages/setuptools*"))
    assert list((rootfs / "var/cache/apt").iterdir()) == []
    assert list((rootfs / "var/lib/apt/lists").iterdir()) == []
    assert list((rootfs / "var/log").iterdir()) == []
    assert not list(rootfs.rglob("*.pyc"))
    manifest = json.loads(_blob(first_build.layout, first_build.digest).read_bytes())
    (layer,) = manifest["layers"]
    with tarfile.open(_blob(first_build.layout, layer["digest"])) as tar:
        members = tar.getmembers()
    # Every entry is root's; only sticky directories (/tmp, /var/tmp) are world-writable.
    assert {member.uid for member in members} == {0}
    writable = sorted(
        member.name for member in members if member.mode & 0o002 and not member.issym()
    )
    assert writable == ["tmp", "var/tmp"]
    assert all(member.mode & 0o1000 for member in members if member.name in {"tmp", "var/tmp"})
    venv = [m for m in members if m.name.startswith("opt/attested-replay/") and m.isfile()]
    assert {member.mode for member in venv} <= {0o644, 0o755}
