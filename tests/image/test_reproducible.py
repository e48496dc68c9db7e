"""Two builds of one source give one image digest; a changed source file gives another."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from runner.cli import main as runner_main
from runner.image.layout import LAYER_MEDIA_TYPE, manifest_digest
from tests.image.conftest import Build, BuildFunction

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
    first_build: Build, build: BuildFunction, capsys: pytest.CaptureFixture[str]
) -> None:
    second = build("second", None)  # no cache: a debootstrap of its own
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
    with tarfile.open(_layer(first_build)) as layer:
        members = layer.getmembers()
    names = [member.name for member in members]
    assert names == sorted(names, key=lambda name: name.encode())
    assert all(member.uname == "" and member.gname == "" for member in members)
    assert max(member.mtime for member in members) == epoch
    assert not [m.name for m in members if m.isfile() and m.mode & 0o6000]
    assert not [m.name for m in members if not (m.isfile() or m.isdir() or m.issym() or m.islnk())]
