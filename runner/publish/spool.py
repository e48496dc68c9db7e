"""The local spool: every envelope waiting for delivery, kept until a target confirms it.

Layout (one directory, mode 0700): ``<hex>.envelope.json`` holds the exact envelope bytes and
``<hex>.meta.json`` the delivery metadata ``{"digest", "tenant", "runId", "target"}``, where
``<hex>`` is the SHA-256 of the envelope bytes. Both are written atomically, envelope first;
an item exists once its metadata does. Tokens are never spooled.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

from attestation.contracts import is_run_id, is_tenant_id, sha256_digest
from attestation.tenant.fsutil import atomic_write
from runner.errors import InputError
from runner.statedir import default_state_dir


def default_spool_dir() -> Path:
    """``spool`` in the runner's state directory (:func:`runner.statedir.default_state_dir`)."""
    return default_state_dir() / "spool"


@dataclass(frozen=True, slots=True)
class SpoolItem:
    digest: str  # "sha256:<hex>"
    tenant: str
    run_id: str
    target: str
    envelope_path: Path

    def envelope_bytes(self) -> bytes:
        data = self.envelope_path.read_bytes()
        if sha256_digest(data) != self.digest:
            raise InputError(
                f"spooled envelope {self.envelope_path} no longer matches {self.digest}"
            )
        return data


class Spool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _paths(self, digest: str) -> tuple[Path, Path]:
        hex_digest = digest.removeprefix("sha256:")
        return (
            self.directory / f"{hex_digest}.envelope.json",
            self.directory / f"{hex_digest}.meta.json",
        )

    def envelope_path(self, digest: str) -> Path:
        return self._paths(digest)[0]

    def add(self, envelope: bytes, *, tenant: str, run_id: str, target: str) -> SpoolItem:
        digest = sha256_digest(envelope)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        envelope_path, meta_path = self._paths(digest)
        atomic_write(envelope_path, envelope, mode=0o600)
        meta = {"digest": digest, "runId": run_id, "target": target, "tenant": tenant}
        atomic_write(meta_path, json.dumps(meta, sort_keys=True).encode() + b"\n", mode=0o600)
        return SpoolItem(digest, tenant, run_id, target, envelope_path)

    def items(self) -> list[SpoolItem]:
        """Spooled items in a stable order; a malformed metadata file is an error naming it."""
        if not self.directory.is_dir():
            return []
        found = []
        for meta_path in sorted(self.directory.glob("*.meta.json")):
            try:
                meta = json.loads(meta_path.read_bytes())
                item = SpoolItem(
                    digest=str(meta["digest"]),
                    tenant=str(meta["tenant"]),
                    run_id=str(meta["runId"]),
                    target=str(meta["target"]),
                    envelope_path=self.envelope_path(str(meta["digest"])),
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"spool metadata {meta_path} is malformed: {exc}") from exc
            if (
                self._paths(item.digest)[1] != meta_path
                or not is_tenant_id(item.tenant)
                or not is_run_id(item.run_id)
            ):
                raise InputError(f"spool metadata {meta_path} names a bad digest, tenant or run")
            found.append(item)
        return found

    def remove(self, digest: str) -> None:
        envelope_path, meta_path = self._paths(digest)
        for path in (meta_path, envelope_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
