"""An OCI image layout (image-spec v1.1) of one root filesystem, written deterministically.

The layer is an uncompressed tar (``application/vnd.oci.image.layer.v1.tar``): the bytes of a
gzip stream depend on the zlib that wrote it, a tar's only on this code. Entries are sorted by
path, owners are numeric (no names), modification times are clamped to SOURCE_DATE_EPOCH,
setuid/setgid bits are dropped, extended attributes are not written, and a file with more than
one link is written once and linked after. The config, the manifest and the index are JSON with
sorted keys and no whitespace. The image digest is the manifest's sha256: what a registry
serves for ``repository@sha256:<hex>`` when the layout is pushed without rewriting
(``skopeo copy --preserve-digests oci:DIR docker://...``).

:func:`manifest_digest` reads a layout back; it is the one reader of ``index.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

from runner.errors import ImageBuildError, InputError

LAYER_MEDIA_TYPE: Final = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE: Final = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE: Final = "application/vnd.oci.image.index.v1+json"
#: index.json and the manifest are a few hundred bytes; a larger one is not ours.
MAX_INDEX_BYTES: Final = 64 * 1024
_CHUNK: Final = 1 << 20


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of the image config (image-spec config.md ``config``)."""

    user: str
    env: Sequence[tuple[str, str]]
    entrypoint: Sequence[str]
    working_dir: str
    labels: Mapping[str, str]


def _canonical(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


class _HashingWriter:
    """A file that hashes what is written to it (the tar is hashed while it is written)."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.handle.write(data)


def _sorted_paths(root: Path) -> list[str]:
    """Every path under ``root``, relative, sorted by its bytes (a directory before its
    contents); symlinks to directories are not followed."""
    paths: list[str] = []
    for directory, dirnames, filenames in os.walk(root):
        base = Path(directory).relative_to(root)
        paths += [(base / name).as_posix() for name in (*dirnames, *filenames)]
    return sorted(paths, key=lambda path: path.encode("utf-8", "surrogateescape"))


def write_layer(root: Path, out: IO[bytes], *, source_date_epoch: int) -> tuple[str, int]:
    """The tar of ``root`` into ``out``; returns its ``sha256:`` digest and size."""
    writer = _HashingWriter(out)
    first_link: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for relative in _sorted_paths(root):
            path = root / relative
            status = os.lstat(path)
            info = tarfile.TarInfo(relative)
            info.uid, info.gid = status.st_uid, status.st_gid
            info.uname = info.gname = ""
            info.mtime = min(int(status.st_mtime), source_date_epoch)
            info.mode = stat.S_IMODE(status.st_mode)
            if not stat.S_ISDIR(status.st_mode):
                info.mode &= ~(stat.S_ISUID | stat.S_ISGID)
            if stat.S_ISDIR(status.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISLNK(status.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = str(path.readlink())
                tar.addfile(info)
            elif stat.S_ISREG(status.st_mode):
                key = (status.st_dev, status.st_ino)
                if status.st_nlink > 1 and key in first_link:
                    info.type = tarfile.LNKTYPE
                    info.linkname = first_link[key]
                    tar.addfile(info)
                    continue
                first_link[key] = relative
                info.size = status.st_size
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                raise ImageBuildError(f"{relative}: not a file, directory or symlink")
    return "sha256:" + writer.sha256.hexdigest(), writer.size


def _blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _write_blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _blob_path(layout, digest).write_bytes(data)
    return digest, len(data)


def write_layout(
    root: Path, layout: Path, config: ImageConfig, *, source_date_epoch: int, ref_name: str
) -> str:
    """Write the OCI layout of ``root`` into the empty directory ``layout``; returns the image
    (manifest) digest."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    temporary = blobs / "layer.partial"
    with temporary.open("wb") as handle:
        layer_digest, layer_size = write_layer(root, handle, source_date_epoch=source_date_epoch)
    temporary.rename(_blob_path(layout, layer_digest))
    created = datetime.fromtimestamp(source_date_epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config_document = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": config.user,
            "Env": [f"{name}={value}" for name, value in config.env],
            "Entrypoint": list(config.entrypoint),
            "WorkingDir": config.working_dir,
            "Labels": dict(config.labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": created, "created_by": "attested-replay image build"}],
    }
    config_digest, config_size = _write_blob(layout, _canonical(config_document))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": layer_size}],
    }
    manifest_digest_, manifest_size = _write_blob(layout, _canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            {
                "mediaType": MANIFEST_MEDIA_TYPE,
                "digest": manifest_digest_,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": ref_name},
            }
        ],
    }
    (layout / "index.json").write_bytes(_canonical(index))
    (layout / "oci-layout").write_bytes(_canonical({"imageLayoutVersion": "1.0.0"}))
    return manifest_digest_


def _read_json(path: Path, what: str) -> dict[str, object]:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_INDEX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{what}: {exc.strerror}") from exc
    if len(data) > MAX_INDEX_BYTES:
        raise InputError(f"{what}: larger than {MAX_INDEX_BYTES} bytes")
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise InputError(f"{what}: not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise InputError(f"{what}: not a JSON object")
    return document


def manifest_digest(layout: Path) -> str:
    """The digest of the one image manifest in the OCI layout ``layout``, checked against its
    blob (the manifest's bytes must hash to it)."""
    index = _read_json(layout / "index.json", f"{layout}/index.json")
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or len(manifests) != 1 or not isinstance(manifests[0], dict):
        raise InputError(f"{layout}/index.json: want exactly one manifest")
    digest = manifests[0].get("digest")
    if (
        not isinstance(digest, str)
        or not digest.startswith("sha256:")
        or len(digest) != 71
        or any(c not in "0123456789abcdef" for c in digest[7:])
    ):
        raise InputError(f"{layout}/index.json: the manifest digest is not sha256:<64 hex>")
    blob = _blob_path(layout, digest)
    try:
        data = blob.read_bytes() if blob.stat().st_size <= MAX_INDEX_BYTES else b""
    except OSError as exc:
        raise InputError(f"{blob}: {exc.strerror}") from exc
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise InputError(f"{blob}: its content does not hash to {digest}")
    return digest
