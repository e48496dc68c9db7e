"""``attested-replay image``: build the replay image reproducibly, print a layout's digest,
rewrite the Debian lock (docs/image.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runner.commands.parsing import add_actions, add_command, input_dir, output_dir
from runner.exit_codes import Family
from runner.image.debian import DEFAULT_MIRROR

if TYPE_CHECKING:
    from runner.commands import Subparsers

_BUILD = """\
Builds the replay image as an OCI image layout in DIR from the source tree: a Debian root made
by debootstrap and checked against image/debian.lock, the wheels of image/python.lock (by
hash) and the project's own wheel, with the entrypoint, environment and user the replay Job
pins. Prints the image (manifest) digest: the same source and lock files give the same digest
on any machine; a mirror that no longer serves a locked package fails the build, naming it.
Needs root and debootstrap (apt-get install debootstrap), Debian's archive and PyPI."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "image",
        summary="build the replay image reproducibly (OCI layout) and print its digest",
        family=Family.REFERENCE,
    )
    actions = add_actions(parser)
    build = add_command(
        actions,
        "build",
        summary="build the replay image as an OCI layout and print its digest",
        description=_BUILD,
        family=Family.REFERENCE,
    )
    build.add_argument(
        "--out",
        required=True,
        type=output_dir("--out", create=True, empty=True),
        metavar="DIR",
        help="the layout directory (new or empty), written once the build succeeded",
    )
    _add_source_and_mirror(build)
    build.add_argument(
        "--debian-cache",
        type=output_dir("--debian-cache", create=True),
        metavar="DIR",
        help="keep the checked Debian root here, one per lock file, and reuse it (no cache: "
        "debootstrap every time)",
    )
    build.set_defaults(handler=handle_build)

    digest = add_command(
        actions,
        "digest",
        summary="print the image digest of an OCI layout (compare a rebuild with a pin)",
        family=Family.REFERENCE,
    )
    digest.add_argument(
        "layout",
        type=input_dir("LAYOUT"),
        metavar="LAYOUT",
        help="an OCI image layout directory (index.json with one manifest)",
    )
    digest.set_defaults(handler=handle_digest)

    lock = add_command(
        actions,
        "lock-debian",
        summary="rewrite image/debian.lock from a fresh debootstrap (a new image digest)",
        family=Family.REFERENCE,
    )
    _add_source_and_mirror(lock)
    lock.set_defaults(handler=handle_lock)


def _add_source_and_mirror(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        type=input_dir("--source"),
        default=Path(),
        metavar="DIR",
        help="the project's source tree (pyproject.toml, image/*.lock)",
    )
    parser.add_argument(
        "--mirror",
        type=_mirror,
        default=DEFAULT_MIRROR,
        metavar="URL",
        help="Debian mirror for debootstrap (http://, https:// or file:///)",
    )


def _mirror(text: str) -> str:
    if not text.startswith(("http://", "https://", "file:///")):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http://, https:// or file:/// URL")
    return text


def handle_build(args: argparse.Namespace) -> int:
    from runner.image.build import build_image

    out: Path = args.out
    result = build_image(args.source, out, mirror=args.mirror, cache=args.debian_cache)
    origin = "cached" if result.debian_from_cache else "debootstrapped"
    print(f"image layout {out} (Debian root {origin})", file=sys.stderr)
    print(result.digest)
    return 0


def handle_digest(args: argparse.Namespace) -> int:
    from runner.image.layout import manifest_digest

    print(manifest_digest(args.layout))
    return 0


def handle_lock(args: argparse.Namespace) -> int:
    from runner.image.build import DEBIAN_LOCK, write_debian_lock

    write_debian_lock(args.source, mirror=args.mirror)
    print(f"wrote {args.source / DEBIAN_LOCK}", file=sys.stderr)
    return 0
