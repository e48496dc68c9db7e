"""Two builds of one source give one image digest; a changed source file gives another."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from runner.cli import main as runner_main
from runner.image.layout import LAYER_MEDIA_TYPE, manifest_digest
from tests.image.conftest import SKOPEO, Build, BuildFunction

pytestmark = pytest.mark.slow


def _blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _manifest(build: Build) -> dict[str, object]:
    document: dict[str, object] = json.loads(_blob(build.layout, build.digest).read_bytes())
    return document


def _layer(build: Build) -> Path:
    layers = _manifest(build)["layers"]
    assert isinstance(layers, list)
    assert [layer["mediaType"] for layer in layers] == [LAYER_MEDIA_TYPE]
    return _blob(build.layout, layers[0]["digest"])


def _entries(layer: Path) -> dict[str, tuple[object, ...]]:
    """Name -> (type, mode, owner, time, content hash or link target) of every entry."""
    entries: dict[str, tuple[object, ...]] = {}
    with tarfile.open(layer) as tar:
        for member in tar:
            handle = tar.extractfile(member) if member.isfile() else None
            content = hashlib.sha256(handle.read()).hexdigest() if handle else member.linkname
            entries[member.name] = (member.type, member.mode, member.uid, member.mtime, content)
    return entries


def test_two_separate_builds_give_one_digest(
    first_build: Build, second_build: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    second = second_build
    assert second.debian_from_cache is False
    assert second.digest == first_build.digest
    assert sorted(p.name for p in (second.layout / "blobs" / "sha256").iterdir()) == sorted(
        p.name for p in (first_build.layout / "blobs" / "sha256").iterdir()
    )
    assert (second.layout / "index.json").read_bytes() == (
        first_build.layout / "index.json"
    ).read_bytes()
    # The digest the layout gives back is the one the build printed.
    assert manifest_digest(second.layout) == second.digest
    assert runner_main(["image", "digest", str(first_build.layout)]) == 0
    assert capsys.readouterr().out == first_build.digest + "\n"


def test_a_changed_source_file_gives_another_digest(
    first_build: Build, build: BuildFunction, image_cache: Path
) -> None:
    def edit(source: Path) -> None:
        with (source / "runner" / "workload.py").open("a", encoding="utf-8") as handle:
            handle.write("# one more line\n")

    changed = build("changed", image_cache, edit)
    assert changed.debian_from_cache is True  # the first build filled the cache
    assert changed.digest != first_build.digest
    # Only the project's files differ: the Debian part of the layer is the same.
    old_members, new_members = _entries(_layer(first_build)), _entries(_layer(changed))
    differing = {
        name for name in old_members.keys() | new_members.keys()
        if old_members.get(name) != new_members.get(name)
    }  # fmt: skip
    site = "opt/attested-replay/lib/python3.11/site-packages/"
    assert differing == {
        site + "runner/workload.py",
        site + "attested_replay-0.1.0.dist-info/RECORD",
    }


def test_layer_entries_are_sorted_numeric_and_clamped(first_build: Build) -> None:
    manifest = _manifest(first_build)
    config_ref = manifest["config"]
    assert isinstance(config_ref, dict)
    config = json.loads(_blob(first_build.layout, config_ref["digest"]).read_bytes())
    epoch = 1747699200  # image/debian.lock's source-date-epoch
    assert config["created"] == "2025-05-20T00:00:00Z"
    # What the Job (runner/k8s/job.py) and its agent policy pin, written out.
    assert config["config"] == {
        "User": "65532:65532",
        "Entrypoint": ["/opt/attested-replay/bin/python", "-I", "-B", "-u", "-m", "runner", "run"],
        "Env": [
            "PATH=/opt/attested-replay/bin:/usr/local/bin:/usr/bin:/bin",
            "LANG=C.UTF-8",
            "HOME=/tmp",
            "TMPDIR=/tmp",
            "XDG_CACHE_HOME=/tmp/.cache",
            "ATTESTED_REPLAY_STATE_DIR=/tmp/attested-replay",
        ],
        "WorkingDir": "/replay/out",
        "Labels": {
            "org.opencontainers.image.title": "attested-replay",
            "org.opencontainers.image.description": (
                "Backtest replays bound into AMD SEV-SNP attestation reports, verifiable "
                "offline by tenants."
            ),
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.version": "0.1.0",
            "org.opencontainers.image.base.name": "debian:bookworm (debootstrap, image/debian.lock)",
        },
    }
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    with tarfile.open(_layer(first_build)) as layer:
        members = layer.getmembers()
    names = [member.name for member in members]
    assert names == sorted(names, key=lambda name: name.encode())
    assert all(member.uname == "" and member.gname == "" for member in members)
    assert max(member.mtime for member in members) == epoch
    assert not [m.name for m in members if m.isfile() and m.mode & 0o6000]
    assert not [m.name for m in members if not (m.isfile() or m.isdir() or m.issym() or m.islnk())]


def test_the_tenant_pins_the_operators_digest_with_its_rebuild(
    first_build: Build, second_build: Build, tmp_path: Path
) -> None:
    """The operator built ``first_build`` and runs it; the tenant rebuilt ``second_build`` and
    pins measurement, HOST_DATA and image digest, refusing any other image."""
    image = f"registry.example/attested-replay@{first_build.digest}"
    measurement = "ab" * 48
    job = [
        "--run-id", "run-7", "--corpus-checksum", "sha256:" + "cd" * 32, "--tenant", "acme",
        "--overlay", "snp", "--corpus-source", "https://corpora.example/acme/run-7.tar.gz",
        "--image-layout", str(second_build.layout), "--measurement", measurement,
        "--evaluation-digest", "sha256:" + "12" * 32,
    ]  # fmt: skip
    expected = tmp_path / "expected.json"
    assert runner_main(["expected", *job, "--image", image, "--out", str(expected)]) == 0
    document = json.loads(expected.read_text(encoding="utf-8"))
    assert document["imageDigest"] == first_build.digest
    assert document["measurements"] == [measurement]
    assert len(document["hostData"]) == 1
    other = "registry.example/attested-replay@sha256:" + "ef" * 32
    assert runner_main(["expected", *job, "--image", other, "--out", str(expected)]) == 9


def test_skopeo_reads_the_layout_and_copies_it_keeping_the_digest(
    first_build: Build, tmp_path: Path
) -> None:
    """Another OCI implementation (skopeo, what docs/image.md pushes with) reads the layout,
    and copying it with --preserve-digests keeps the digest the Job pins."""
    inspect = subprocess.run(
        [SKOPEO, "inspect", f"oci:{first_build.layout}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert inspect.returncode == 0, inspect.stderr
    assert json.loads(inspect.stdout)["Digest"] == first_build.digest
    copy = tmp_path / "copy"
    result = subprocess.run(
        [SKOPEO, "copy", "--preserve-digests", f"oci:{first_build.layout}", f"oci:{copy}:pushed"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert manifest_digest(copy) == first_build.digest
