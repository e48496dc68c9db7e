"""Wiring of ``attested-replay serve``: state directory, storage, log key, uvicorn."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from attestation.transparency.checkpoint import CheckpointError
from runner.errors import UsageError
from runner.publish.checkpoint import CheckpointSigner
from runner.publish.storage import Storage, open_storage
from tenant.fsutil import atomic_write_text

DEFAULT_LOG_NAME = "attested-replay.local"
SIGNING_KEY_FILE = "log-signing-key.pem"
PUBLIC_KEY_FILE = "log-key.pub"
DATABASE_FILE = "publish.sqlite3"


def default_state_dir() -> Path:
    """Where ``serve`` keeps its database and log signing key: durable data, so under the
    XDG data directory (not the cache), unless ``ATTESTED_REPLAY_STATE_DIR`` says otherwise."""
    state = os.environ.get("ATTESTED_REPLAY_STATE_DIR")
    if state:
        return Path(state) / "server"
    data_home = os.environ.get("XDG_DATA_HOME")
    base = Path(data_home) if data_home else Path.home() / ".local" / "share"
    return base / "attested-replay" / "server"


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    state_dir: Path
    database: str | None = None  # SQLite path or postgresql:// DSN; default: state_dir file
    signing_key: Path | None = None  # default: state_dir/log-signing-key.pem, made on first start
    log_name: str = DEFAULT_LOG_NAME
    sqlite_synchronous: str = "FULL"

    def storage_location(self) -> str:
        return self.database or str(self.state_dir / DATABASE_FILE)


def open_service(config: ServiceConfig) -> tuple[Storage, CheckpointSigner]:
    """Open storage and the log key, creating them on first start; export the public key."""
    config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_file = config.signing_key or config.state_dir / SIGNING_KEY_FILE
    try:
        signer = CheckpointSigner.load_or_create(
            config.log_name, key_file, create=config.signing_key is None
        )
    except CheckpointError as exc:
        raise UsageError(str(exc)) from exc
    atomic_write_text(config.state_dir / PUBLIC_KEY_FILE, signer.verifier_key.encode() + "\n")
    return open_storage(
        config.storage_location(), sqlite_synchronous=config.sqlite_synchronous
    ), signer
