"""The workload identity bound into every envelope: name, version and a digest of the code."""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from importlib.resources.abc import Traversable

from attestation.contracts import sha256_digest
from attestation.envelope.model import Workload
from runner import __version__

WORKLOAD_NAME = "attested-replay"
#: Every package of the distribution: the code that scored the corpus.
_CODE_PACKAGES = ("attestation", "runner")


@functools.cache
def code_digest() -> str:
    """``sha256:`` over every Python source file of the distribution's packages, in path order.

    Each file contributes ``<package-relative path> NUL <sha256 of its bytes> LF``, so the
    digest is independent of where the packages are installed. It identifies the code that
    scored the corpus; the container image digest (bound through init-data into HOST_DATA)
    is what ties it to the hardware measurement.
    """
    lines: list[bytes] = []
    for package in _CODE_PACKAGES:
        for relative, content in _python_sources(resources.files(package), package):
            lines.append(relative.encode() + b"\0" + hashlib.sha256(content).hexdigest().encode())
    lines.sort()
    return sha256_digest(b"\n".join(lines) + b"\n")


def _python_sources(root: Traversable, prefix: str) -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    for entry in root.iterdir():
        name = f"{prefix}/{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                found.extend(_python_sources(entry, name))
        elif entry.name.endswith(".py"):
            found.append((name, entry.read_bytes()))
    return found


def current_workload() -> Workload:
    """The workload of this installation."""
    return Workload(name=WORKLOAD_NAME, version=__version__, code_digest=code_digest())
