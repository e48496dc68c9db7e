"""``submit``, ``init-data`` and ``expected`` take the digest ``image build`` printed, and with
``--image-layout`` refuse an image that is not the layout's (no root or debootstrap needed:
the layout here is written from a small directory by the same writer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.cli import main
from runner.image.layout import ImageConfig, manifest_digest, write_layout
from tests.coco.conftest import CHECKSUM

CORPUS = "https://corpora.example/acme/run-7.tar.gz"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "root"
    (root / "opt").mkdir(parents=True)
    (root / "opt" / "hello").write_text("hello\n", encoding="utf-8")
    config = ImageConfig(
        user="65532:65532", env=(), entrypoint=("/bin/true",), working_dir="/", labels={}
    )
    directory = tmp_path / "layout"
    directory.mkdir()
    digest = write_layout(root, directory, config, source_date_epoch=0, ref_name="test")
    return directory, digest


def _run(image: str, layout: Path) -> list[str]:
    return [
        "--run-id", "run-7", "--tenant", "acme", "--image", image, "--image-layout", str(layout),
        "--overlay", "snp",
    ]  # fmt: skip


def test_manifest_digest_reads_back_what_was_written(layout: tuple[Path, str]) -> None:
    directory, digest = layout
    assert manifest_digest(directory) == digest
    assert main(["image", "digest", str(directory)]) == 0


def test_the_printed_digest_pins_submit_init_data_and_expected(
    layout: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, digest = layout
    image = f"registry.example/attested-replay@{digest}"
    run = _run(image, directory)
    assert main(["submit", *run, "--corpus", CORPUS, "--checksum", CHECKSUM, "--dry-run"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == image
    out = tmp_path / "init-data.toml"
    assert (
        main(["init-data", *run, "--corpus", CORPUS, "--checksum", CHECKSUM, "--out", str(out)])
        == 0
    )
    expected = tmp_path / "expected.json"
    assert main([
        "expected", *run, "--corpus-source", CORPUS, "--corpus-checksum", CHECKSUM,
        "--measurement", "cd" * 48, "--evaluation-digest", "sha256:" + "ef" * 32,
        "--out", str(expected),
    ]) == 0  # fmt: skip
    assert json.loads(expected.read_text())["imageDigest"] == digest
    # A tenant with only its rebuild: --image-layout alone pins the rebuild's digest.
    alone = tmp_path / "alone.json"
    assert main([
        "expected", "--run-id", "run-7", "--corpus-checksum", CHECKSUM,
        "--measurement", "cd" * 48, "--evaluation-digest", "sha256:" + "ef" * 32,
        "--image-layout", str(directory), "--out", str(alone),
    ]) == 0  # fmt: skip
    assert json.loads(alone.read_text())["imageDigest"] == digest


def test_an_image_other_than_the_layout_is_refused(
    layout: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, digest = layout
    other = "sha256:" + "ab" * 32
    run = _run(f"registry.example/attested-replay@{other}", directory)
    message = (
        f"error: --image-layout {directory} is image {digest}, but the image pinned is "
        f"{other}: that image was not built from this source\n"
    )
    out = tmp_path / "init-data.toml"
    for command in (
        ["submit", *run, "--corpus", CORPUS, "--checksum", CHECKSUM, "--dry-run"],
        ["init-data", *run, "--corpus", CORPUS, "--checksum", CHECKSUM, "--out", str(out)],
        [
            "expected", "--run-id", "run-7", "--corpus-checksum", CHECKSUM, "--image-digest",
            other, "--image-layout", str(directory), "--out", str(tmp_path / "x.json"),
            "--measurement", "cd" * 48, "--evaluation-digest", "sha256:" + "ef" * 32,
        ],
    ):  # fmt: skip
        assert main(command) == 9, command
        assert capsys.readouterr().err == message
    assert not out.exists()


def test_a_layout_whose_manifest_does_not_match_its_digest_is_refused(
    layout: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, digest = layout
    blob = directory / "blobs" / "sha256" / digest.removeprefix("sha256:")
    blob.write_bytes(blob.read_bytes() + b" ")
    assert main(["image", "digest", str(directory)]) == 1
    assert capsys.readouterr().err == f"error: {blob}: its content does not hash to {digest}\n"
