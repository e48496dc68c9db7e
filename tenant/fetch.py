"""Tenant side: download new envelopes and prove the log only grew.

State kept in the output directory (each file written atomically, the checkpoint last):
``log-key.pub`` (the pinned verifier key), ``checkpoint`` (the last verified signed note),
``envelopes/sha256-<hex>.json`` (exact bytes) and ``index.json`` (log index -> digest, run,
shard). Each fetch verifies the new checkpoint's signature with the pinned key, its
consistency with the kept checkpoint, and every new entry's inclusion proof; any failure is
tampering. So is a log holding two envelopes for one run (or one shard of a run): the service
never logs a replacement, so a second one means the operator rewrote which envelope a run has.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from attestation.contracts import MAX_ENVELOPE_BYTES, sha256_digest
from attestation.envelope.merged import parse_any_envelope, shard_index
from attestation.errors import MalformedError
from attestation.transparency.checkpoint import (
    Checkpoint,
    CheckpointError,
    VerifierKey,
    verify_signed_checkpoint,
)
from attestation.transparency.entries import EntryError, LogEntry
from attestation.transparency.merkle import (
    HASH_SIZE,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from tenant.errors import (
    ServiceUnavailableError,
    TamperingError,
    TenantInputError,
    TenantUsageError,
)
from tenant.fsutil import atomic_write, atomic_write_text
from tenant.http import (
    Answer,
    AnswerTooLargeError,
    HttpClient,
    HttpError,
    HttpRefusedError,
    Limits,
    RetryPolicy,
    check_url,
)

log = structlog.get_logger("attested-replay.tenant")

PAGE = 1000
#: A checkpoint or a proof; a page of PAGE entries; an envelope (the one contracts limit).
SMALL_ANSWER: Final = Limits(max_bytes=64 * 1024, deadline=60.0)
ENTRIES_ANSWER: Final = Limits(max_bytes=1024 * 1024, deadline=60.0)
ENVELOPE_ANSWER: Final = Limits(max_bytes=MAX_ENVELOPE_BYTES, deadline=120.0)


@dataclass(frozen=True, slots=True)
class FetchReport:
    previous_size: int
    size: int
    new_envelopes: tuple[str, ...]  # digests, in log order
    out_dir: Path


def load_verifier_key(value: str) -> VerifierKey:
    """A verifier key given literally or as a file holding one."""
    text = value
    path = Path(value)
    if "+" not in value or path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TenantUsageError(f"cannot read log key {value}: {exc}") from exc
    try:
        return VerifierKey.parse(text)
    except CheckpointError as exc:
        raise TenantUsageError(f"log key {value}: {exc}") from exc


class _Api:
    def __init__(self, server: str, tenant: str, client: HttpClient) -> None:
        self._base = server.rstrip("/") + f"/v1/tenants/{tenant}"
        self._client = client

    def get(self, path: str, limit: Limits = SMALL_ANSWER, **params: int) -> Answer:
        try:
            answer = self._client.get(self._base + path, params=params, limit=limit)
        except AnswerTooLargeError as exc:
            raise TamperingError(f"GET {path}: {exc}") from exc
        except HttpError as exc:
            raise ServiceUnavailableError(f"publication service unreachable: {exc}") from exc
        if answer.status != 200:
            raise ServiceUnavailableError(
                f"GET {path} answered HTTP {answer.status}: {answer.text()}"
            )
        return answer

    def envelope(self, digest: str, position: int) -> bytes:
        """The bytes of an envelope that log entry ``position`` names (already proven included).

        The log commits to the entry, so a 404 here means the envelope was removed after it
        was published: tampering, not unavailability. The download is capped while reading.
        """
        path = f"/envelopes/{digest}"
        try:
            answer = self._client.get(self._base + path, limit=ENVELOPE_ANSWER)
        except AnswerTooLargeError as exc:
            raise TamperingError(
                f"envelope {digest} of log entry {position} exceeds "
                f"{MAX_ENVELOPE_BYTES} bytes, which the service never accepts"
            ) from exc
        except HttpError as exc:
            raise ServiceUnavailableError(f"publication service unreachable: {exc}") from exc
        if answer.status == 404:
            raise TamperingError(
                f"envelope {digest} of log entry {position} is gone: the signed log "
                "includes it, so it was removed after publication"
            )
        if answer.status != 200:
            raise ServiceUnavailableError(f"GET {path} answered HTTP {answer.status}")
        return answer.body

    def json(self, path: str, limit: Limits = SMALL_ANSWER, **params: int) -> dict[str, Any]:
        try:
            body = self.get(path, limit, **params).json(f"GET {path}")
        except HttpRefusedError as exc:
            raise TamperingError(f"GET {path} did not return JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise TamperingError(f"GET {path} did not return a JSON object")
        return body


def _hashes(body: dict[str, Any], what: str) -> list[bytes]:
    try:
        hashes = [base64.b64decode(h, validate=True) for h in body["hashes"]]
    except (KeyError, TypeError, binascii.Error, ValueError) as exc:
        raise TamperingError(f"{what} is malformed: {exc}") from exc
    if any(len(h) != HASH_SIZE for h in hashes):
        raise TamperingError(f"{what} holds a hash that is not {HASH_SIZE} bytes")
    return hashes


def fetch_tenant(
    *,
    server: str,
    token: str,
    tenant: str,
    out_dir: Path,
    log_key: VerifierKey | None = None,
    last_checkpoint: str | None = None,
    retry: RetryPolicy | None = None,
    ca_bundle: Path | None = None,
) -> FetchReport:
    """Fetch and verify everything the log gained since the kept (or given) checkpoint."""
    check_url(server, what="server")
    key = _pinned_key(out_dir, log_key)
    origin = f"{key.name}/t/{tenant}"
    old = _old_checkpoint(out_dir, last_checkpoint, key, origin)
    with HttpClient(token=token, retry=retry, what="server", ca_bundle=ca_bundle) as client:
        api = _Api(server, tenant, client)
        note = api.get("/log/checkpoint").body.decode("utf-8", "replace")
        try:
            new = verify_signed_checkpoint(note, key, origin=origin)
        except CheckpointError as exc:
            raise TamperingError(f"the server's checkpoint is not acceptable: {exc}") from exc
        if old is not None:
            _check_consistency(api, old, new)
        start = 0 if old is None else old.size
        index = _load_index(out_dir)
        new_digests = []
        for page_start in range(start, new.size, PAGE):
            page_end = min(page_start + PAGE, new.size)
            body = api.json("/log/entries", ENTRIES_ANSWER, start=page_start, end=page_end)
            raw_entries = body.get("entries")
            if (
                body.get("start") != page_start
                or not isinstance(raw_entries, list)
                or len(raw_entries) != page_end - page_start
            ):
                raise TamperingError(
                    f"entries {page_start}..{page_end - 1} are missing from the server's log"
                )
            for offset, encoded in enumerate(raw_entries):
                position = page_start + offset
                digest, run_id, shard = _fetch_entry(
                    api, out_dir, tenant=tenant, position=position, encoded=encoded, new=new
                )
                index[str(position)] = {"digest": digest, "runId": run_id, "shard": shard}
                new_digests.append(digest)
    _check_one_envelope_per_run(index, out_dir)
    atomic_write_text(out_dir / "index.json", json.dumps(index, indent=1, sort_keys=True) + "\n")
    atomic_write_text(out_dir / "checkpoint", note)
    atomic_write_text(out_dir / "log-key.pub", key.encode() + "\n")
    log.info("tenant_fetched", tenant=tenant, size=new.size, new=len(new_digests))
    return FetchReport(
        previous_size=start, size=new.size, new_envelopes=tuple(new_digests), out_dir=out_dir
    )


def _pinned_key(out_dir: Path, given: VerifierKey | None) -> VerifierKey:
    stored_path = out_dir / "log-key.pub"
    stored = load_verifier_key(str(stored_path)) if stored_path.is_file() else None
    if stored is not None and given is not None and stored != given:
        raise TenantUsageError(
            f"--log-key differs from the key pinned in {stored_path}; "
            "re-pin only after checking the new key out of band (move that file away)"
        )
    key = given or stored
    if key is None:
        raise TenantUsageError("no pinned log key: pass --log-key (the key `serve` printed)")
    return key


def _old_checkpoint(
    out_dir: Path, given: str | None, key: VerifierKey, origin: str
) -> Checkpoint | None:
    if given is not None:
        try:
            note, source = Path(given).read_text(encoding="utf-8"), given
        except OSError as exc:
            raise TenantUsageError(f"cannot read checkpoint {given}: {exc}") from exc
    elif (out_dir / "checkpoint").is_file():
        source = str(out_dir / "checkpoint")
        note = (out_dir / "checkpoint").read_text(encoding="utf-8")
    else:
        return None
    try:
        return verify_signed_checkpoint(note, key, origin=origin)
    except CheckpointError as exc:
        raise TenantInputError(f"kept checkpoint {source} does not verify: {exc}") from exc


def _check_consistency(api: _Api, old: Checkpoint, new: Checkpoint) -> None:
    if new.size < old.size:
        raise TamperingError(
            f"the log shrank from {old.size} to {new.size} entries: entries were removed"
        )
    proof = _hashes(
        api.json("/log/proof/consistency", SMALL_ANSWER, **{"from": old.size, "to": new.size}),
        "consistency proof",
    )
    if not verify_consistency(old.size, new.size, proof, old.root, new.root):
        raise TamperingError(
            f"checkpoint of size {new.size} is not consistent with the kept checkpoint of size "
            f"{old.size}: entries were removed, reordered or rewritten, or the log forked"
        )


def _fetch_entry(
    api: _Api, out_dir: Path, *, tenant: str, position: int, encoded: object, new: Checkpoint
) -> tuple[str, str, int | None]:
    try:
        raw = base64.b64decode(str(encoded), validate=True)
        entry = LogEntry.from_bytes(raw)
    except (binascii.Error, ValueError, EntryError) as exc:
        raise TamperingError(f"log entry {position} is malformed: {exc}") from exc
    if entry.tenant != tenant:
        raise TamperingError(f"log entry {position} belongs to tenant {entry.tenant!r}")
    proof = _hashes(
        api.json("/log/proof/inclusion", index=position, size=new.size),
        f"inclusion proof of entry {position}",
    )
    if not verify_inclusion(leaf_hash(raw), position, new.size, proof, new.root):
        raise TamperingError(f"log entry {position} is not included in the signed checkpoint")
    data = api.envelope(entry.envelope, position)
    if sha256_digest(data) != entry.envelope:
        raise TamperingError(f"envelope {entry.envelope} (entry {position}) has other bytes")
    try:
        envelope = parse_any_envelope(data)
    except MalformedError as exc:
        raise TamperingError(f"envelope {entry.envelope} is not a valid envelope: {exc}") from exc
    if envelope.tenant != tenant or envelope.run_id != entry.run_id:
        raise TamperingError(f"envelope {entry.envelope} does not match its log entry {position}")
    atomic_write(_envelope_path(out_dir, entry.envelope), data)
    return entry.envelope, entry.run_id, shard_index(envelope)


def _envelope_path(out_dir: Path, digest: str) -> Path:
    return out_dir / "envelopes" / f"sha256-{digest.removeprefix('sha256:')}.json"


def _check_one_envelope_per_run(index: dict[str, Any], out_dir: Path) -> None:
    """Tampering when two log entries publish one run (or one shard of a run)."""
    first: dict[tuple[str, int | None], int] = {}
    for position in sorted(index, key=int):
        item = index[position]
        if "shard" not in item:  # kept by an older tenant fetch: read its envelope once
            item["shard"] = _kept_shard(out_dir, str(item["digest"]))
        shard = item["shard"]
        key = (str(item["runId"]), None if shard is None else int(shard))
        if key in first:
            what = f"run {key[0]!r}" if shard is None else f"shard {shard} of run {key[0]!r}"
            raise TamperingError(
                f"log entries {first[key]} and {position} both publish {what} "
                f"({index[str(first[key])]['digest']} and {item['digest']}): the service "
                "never logs a second envelope for a run, so the run's envelope was replaced"
            )
        first[key] = int(position)


def _kept_shard(out_dir: Path, digest: str) -> int | None:
    path = _envelope_path(out_dir, digest)
    try:
        return shard_index(parse_any_envelope(path.read_bytes()))
    except (OSError, MalformedError) as exc:
        raise TenantInputError(f"kept envelope {path} cannot be read: {exc}") from exc


def _load_index(out_dir: Path) -> dict[str, Any]:
    return load_index(out_dir / "index.json")


def load_index(path: Path) -> dict[str, Any]:
    """A kept index file (a JSON object), or an empty one when there is none yet."""
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_bytes())
    except ValueError as exc:
        raise TenantInputError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise TenantInputError(f"{path} is not a JSON object")
    return loaded
