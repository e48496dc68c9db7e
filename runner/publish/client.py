"""The publisher: deliver an envelope to a ``dir://`` or ``https://`` target, spooling it first.

An envelope that could not be delivered (an outage after all retries, a refusal, an exception)
is written to the spool before the error propagates; ``publish --flush`` delivers the spool
later and removes an item only once its target confirmed it. HTTP delivery is one idempotent
PUT of the envelope under its digest (``docs/publishing.md``); the service sets the run's
write-once pointer in the same transaction and answers with the log receipt (a service too old
to do so gets the ``runs/{runId}`` PUT as well). Connection errors, 429 and 5xx other than 507
are retried with exponential backoff, honouring ``Retry-After`` (the policy of
``attestation.tenant.http``); 507 (the service's storage is full) is spooled at once.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import structlog

from attestation.contracts import RUN_ID_GRAMMAR, is_run_id, is_tenant_id, sha256_digest
from attestation.envelope.merged import AnyEnvelope, parse_any_envelope, shard_index
from attestation.errors import MalformedError
from attestation.tenant.errors import TenantUsageError
from attestation.tenant.fsutil import atomic_write
from attestation.tenant.http import (
    Answer,
    HttpClient,
    HttpError,
    Limits,
    RetryPolicy,
    check_url,
    json_body,
)
from attestation.transparency.checkpoint import CheckpointError, parse_signed_note
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, verify_inclusion
from runner.errors import InputError, PublishError, UsageError
from runner.publish.spool import Spool, SpoolItem, default_spool_dir

log = structlog.get_logger("attested-replay.publish")

#: A publication answer (a receipt with its checkpoint and proof) is small; a PUT of the
#: largest envelope over a slow link still finishes well within the deadline.
RECEIPT_LIMIT: Final = Limits(max_bytes=64 * 1024, deadline=120.0)

Status = Literal["created", "already-present"]


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    digest: str  # "sha256:<hex>" of the exact bytes published
    status: Status
    target: str
    log_index: int | None = None
    tree_size: int | None = None
    checkpoint: str | None = None  # the C2SP signed note returned with the publish
    inclusion_proof: tuple[str, ...] | None = None  # base64 hashes, RFC 9162 order
    #: The latest checkpoint witnesses had cosigned when the service answered, if its tree
    #: holds the entry: the note with its cosignature lines, and the entry's proof under it.
    cosigned: CosignedReceipt | None = None


@dataclass(frozen=True, slots=True)
class CosignedReceipt:
    tree_size: int
    checkpoint: str  # the C2SP signed note with the witnesses' cosignature/v1 lines
    inclusion_proof: tuple[str, ...]  # base64 hashes: logIndex in the tree of tree_size


class TokenRequiredError(UsageError):
    """A target that needs a bearer token was given none (found before any delivery)."""


class DeliveryError(Exception):
    """One delivery attempt (with its retries) failed; the item stays spooled."""


def check_target(target: str) -> None:
    """Refuse targets other than ``dir://``, ``https://`` and loopback ``http://``."""
    parts = urlsplit(target)
    if parts.scheme == "dir":
        if not (parts.netloc + parts.path):
            raise UsageError(f"target {target!r} names no directory")
        return
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise UsageError(f"target {target!r} must be dir://PATH or https://HOST[/PREFIX]")
    try:
        check_url(target, what="target")
    except TenantUsageError as exc:
        raise UsageError(str(exc)) from exc


def _check_envelope(
    envelope_bytes: bytes, tenant: str, run_id: str, envelope: AnyEnvelope | None
) -> None:
    if not is_tenant_id(tenant):
        raise UsageError(f"tenant {tenant!r} is not a tenant id (a DNS label)")
    if not is_run_id(run_id):
        raise UsageError(f"run id {run_id!r} must match {RUN_ID_GRAMMAR}")
    if envelope is None:
        try:
            envelope = parse_any_envelope(envelope_bytes)
        except MalformedError as exc:
            raise InputError(f"not a valid attestation envelope: {exc}") from exc
    if envelope.tenant != tenant or envelope.run_id != run_id:
        raise InputError(
            f"envelope is for tenant {envelope.tenant!r} run {envelope.run_id!r}, "
            f"not tenant {tenant!r} run {run_id!r}"
        )


def publish_envelope(
    target: str,
    envelope_bytes: bytes,
    *,
    tenant: str,
    run_id: str,
    token: str | None,
    spool_dir: Path | None = None,
    retry: RetryPolicy | None = None,
    client: HttpClient | None = None,
    envelope: AnyEnvelope | None = None,
) -> PublishOutcome:
    """Publish one envelope; on failure it stays spooled and :class:`PublishError` says so.

    ``client`` (keep-alive connections, e.g. one per publisher thread) carries its own token
    and retry policy; without it one is made from ``token`` and ``retry``. ``envelope``: the
    envelope ``envelope_bytes`` were serialized from, when the caller made them (``run``, which
    has also verified those bytes as a tenant would); its tenant and run are checked instead
    of parsing the bytes again. Without it the bytes are parsed here (``publish FILE``). The
    service parses and checks the bytes it receives either way."""
    check_target(target)
    _check_envelope(envelope_bytes, tenant, run_id, envelope)
    if urlsplit(target).scheme != "dir" and token is None:
        raise TokenRequiredError(f"publishing to {target} needs a token")
    spool = Spool(spool_dir or default_spool_dir())
    digest = sha256_digest(envelope_bytes)
    item = SpoolItem(digest, tenant, run_id, target, spool.envelope_path(digest))
    try:
        return deliver(item, envelope_bytes, target=target, token=token, retry=retry, client=client)
    except DeliveryError as exc:
        spool.add(envelope_bytes, tenant=tenant, run_id=run_id, target=target)
        raise PublishError(
            f"could not publish {digest} to {target}: {exc}; the envelope is kept in the "
            f"spool {spool.directory}; deliver it later with "
            f"`attested-replay publish --flush --spool-dir {spool.directory} --token-file FILE`"
        ) from exc
    except BaseException:
        # Anything else (a bug, Ctrl-C) must not lose the envelope either.
        spool.add(envelope_bytes, tenant=tenant, run_id=run_id, target=target)
        raise


@dataclass(frozen=True, slots=True)
class FlushReport:
    delivered: tuple[PublishOutcome, ...]
    failed: tuple[tuple[str, str], ...]  # (digest, reason)


def flush_spool(
    *,
    spool_dir: Path | None = None,
    target: str | None = None,
    token: str | None,
    retry: RetryPolicy | None = None,
    ca_bundle: Path | None = None,
) -> FlushReport:
    """Deliver every spooled envelope (to ``target`` when given, else to its recorded target).
    Idempotent: already-present counts as delivered; only delivered items leave the spool."""
    if target is not None:
        check_target(target)
    spool = Spool(spool_dir or default_spool_dir())
    if token is None:
        needing = sorted(
            {
                destination
                for item in spool.items()
                if urlsplit(destination := target or item.target).scheme != "dir"
            }
        )
        if needing:  # refused before any delivery: each would be answered 401
            raise TokenRequiredError(f"delivering to {', '.join(needing)} needs a token")
    delivered: list[PublishOutcome] = []
    failed: list[tuple[str, str]] = []
    with HttpClient(token=token, retry=retry, what="target", ca_bundle=ca_bundle) as client:
        for item in spool.items():
            destination = target or item.target
            try:
                check_target(destination)
                outcome = deliver(
                    item,
                    item.envelope_bytes(),
                    target=destination,
                    token=token,
                    retry=retry,
                    client=client,
                )
            except (DeliveryError, UsageError, InputError) as exc:
                log.warning("spool_item_not_delivered", digest=item.digest, error=str(exc))
                failed.append((item.digest, str(exc)))
                continue
            spool.remove(item.digest)
            delivered.append(outcome)
    return FlushReport(tuple(delivered), tuple(failed))


def deliver(
    item: SpoolItem,
    envelope_bytes: bytes,
    *,
    target: str,
    token: str | None,
    retry: RetryPolicy | None = None,
    client: HttpClient | None = None,
) -> PublishOutcome:
    if urlsplit(target).scheme == "dir":
        outcome = _deliver_to_directory(item, envelope_bytes, target)
        log.info("envelope_published", digest=item.digest, status=outcome.status, target=target)
        return outcome
    if client is not None:
        return _deliver_http(item, envelope_bytes, target, client)
    with HttpClient(token=token, retry=retry, what="target") as own_client:
        return _deliver_http(item, envelope_bytes, target, own_client)


def _directory_of(target: str) -> Path:
    parts = urlsplit(target)
    return Path(parts.netloc + parts.path)


def _deliver_to_directory(item: SpoolItem, data: bytes, target: str) -> PublishOutcome:
    """``<root>/<tenant>/envelopes/sha256-<hex>.json`` and the run pointer:
    ``<root>/<tenant>/runs/<runId>``, or ``<root>/<tenant>/shards/<runId>/<index>`` for a
    shard envelope."""
    root = _directory_of(target) / item.tenant
    path = root / "envelopes" / f"sha256-{item.digest.removeprefix('sha256:')}.json"
    shard = shard_index(parse_any_envelope(data))  # checked before it was spooled
    run_path = root / "runs" / item.run_id
    what = f"run {item.run_id!r}"
    if shard is not None:
        run_path = root / "shards" / item.run_id / str(shard)
        what = f"shard {shard} of run {item.run_id!r}"
    if run_path.exists():  # checked first: another envelope for this run is not stored
        existing = run_path.read_text(encoding="utf-8").strip()
        if existing != item.digest:
            raise DeliveryError(f"{what} already points to {existing}")
    status: Status = "created"
    if path.exists():
        if path.read_bytes() != data:
            raise DeliveryError(f"{path} exists with different bytes (corrupted store)")
        status = "already-present"
    else:
        atomic_write(path, data)
    if not run_path.exists():
        atomic_write(run_path, item.digest.encode() + b"\n")
    return PublishOutcome(digest=item.digest, status=status, target=target)


def _deliver_http(item: SpoolItem, data: bytes, target: str, client: HttpClient) -> PublishOutcome:
    base = target.rstrip("/") + f"/v1/tenants/{item.tenant}"
    # The digest of ``data`` is the item's (computed once per publish; a mismatch is the
    # server's 422): hashing 12 KB again per envelope is measurable at hundreds a second.
    digest = bytes.fromhex(item.digest.removeprefix("sha256:"))
    content_digest = base64.b64encode(digest).decode()
    headers = {
        "Content-Type": "application/json",
        "If-None-Match": "*",
        "Content-Digest": f"sha-256=:{content_digest}:",
    }
    try:
        response = client.put(
            f"{base}/envelopes/{item.digest}", body=data, headers=headers, limit=RECEIPT_LIMIT
        )
    except HttpError as exc:
        raise DeliveryError(f"envelope upload failed: {exc}") from exc
    if response.status not in (200, 201, 412):
        raise DeliveryError(f"envelope upload answered {_describe(response)}")
    body = _receipt(response)
    status: Status = "created" if response.status == 201 else "already-present"
    if "runId" not in body:  # a service that does not set the run pointer with the envelope
        _put_run_pointer(base, item, client)
    outcome = PublishOutcome(digest=item.digest, status=status, target=target)
    if "logIndex" in body:
        outcome = _with_log_receipt(outcome, item, body)
    log.info("envelope_published", digest=item.digest, status=status, target=target)
    return outcome


def _put_run_pointer(base: str, item: SpoolItem, client: HttpClient) -> None:
    try:
        pointer = client.put(
            f"{base}/runs/{item.run_id}",
            body=json_body({"envelope": item.digest}),
            headers={"Content-Type": "application/json"},
            limit=RECEIPT_LIMIT,
        )
    except HttpError as exc:
        raise DeliveryError(f"run pointer failed: {exc}") from exc
    if pointer.status not in (200, 201):
        raise DeliveryError(f"run pointer answered {_describe(pointer)}")


def _with_log_receipt(
    outcome: PublishOutcome, item: SpoolItem, body: dict[str, Any]
) -> PublishOutcome:
    """Check the returned inclusion proof against the returned checkpoint's root, and the
    one under the cosigned checkpoint when the receipt carries one."""
    try:
        index = int(body["logIndex"])
        size = int(body["treeSize"])
        note = str(body["checkpoint"])
        proof = tuple(str(h) for h in body["inclusionProof"])
        cosigned = body.get("cosigned")
        if cosigned is not None:
            cosigned = CosignedReceipt(
                tree_size=int(cosigned["treeSize"]),
                checkpoint=str(cosigned["checkpoint"]),
                inclusion_proof=tuple(str(h) for h in cosigned["inclusionProof"]),
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise DeliveryError(f"the server's log receipt is malformed: {exc}") from exc
    entry = LogEntry(tenant=item.tenant, run_id=item.run_id, envelope=item.digest).to_bytes()
    origin = _check_inclusion(leaf_hash(entry), index, size, note, proof, "")
    if cosigned is not None and (
        _check_inclusion(
            leaf_hash(entry),
            index,
            cosigned.tree_size,
            cosigned.checkpoint,
            cosigned.inclusion_proof,
            "cosigned ",
        )
        != origin
    ):
        raise DeliveryError("the server's cosigned checkpoint is of another log")
    return PublishOutcome(
        digest=outcome.digest,
        status=outcome.status,
        target=outcome.target,
        log_index=index,
        tree_size=size,
        checkpoint=note,
        inclusion_proof=proof,
        cosigned=cosigned,
    )


def _check_inclusion(  # noqa: PLR0917 - the parts of one receipt
    leaf: bytes, index: int, size: int, note: str, proof: tuple[str, ...], what: str
) -> str:
    """The origin of ``note`` once ``proof`` shows ``leaf`` at ``index`` under its root."""
    try:
        checkpoint, _signatures = parse_signed_note(note)
        hashes = [base64.b64decode(h, validate=True) for h in proof]
    except (ValueError, binascii.Error, CheckpointError) as exc:
        raise DeliveryError(f"the server's log receipt is malformed: {exc}") from exc
    if checkpoint.size != size or not verify_inclusion(leaf, index, size, hashes, checkpoint.root):
        raise DeliveryError(f"the server's inclusion proof does not match its {what}checkpoint")
    return checkpoint.origin


def _receipt(answer: Answer) -> dict[str, Any]:
    """The JSON object of a successful upload's answer (it carries the log receipt when the
    service keeps a log); an empty body is none, a malformed one is a failed delivery."""
    if not answer.ok or not answer.body.strip():
        return _json_or_empty(answer)
    try:
        body = answer.json("the service's answer to the upload")
    except HttpError as exc:
        raise DeliveryError(str(exc)) from exc
    return body if isinstance(body, dict) else {}


def _json_or_empty(answer: Answer) -> dict[str, Any]:
    try:
        body = answer.json("the service's answer")
    except HttpError:
        return {}
    return body if isinstance(body, dict) else {}


def _describe(answer: Answer) -> str:
    detail = _json_or_empty(answer).get("error") or answer.text()
    return f"HTTP {answer.status}: {detail}"


def receipt_json(outcome: PublishOutcome) -> str:
    """The outcome as JSON, for the CLI and for storing beside the envelope."""
    return json.dumps(
        {
            "digest": outcome.digest,
            "status": outcome.status,
            "target": outcome.target,
            "logIndex": outcome.log_index,
            "treeSize": outcome.tree_size,
            "checkpoint": outcome.checkpoint,
            # The first entry of a log has an empty proof: [] (a list, as documented), not null.
            "inclusionProof": (
                None if outcome.inclusion_proof is None else list(outcome.inclusion_proof)
            ),
            "cosigned": (
                None
                if outcome.cosigned is None
                else {
                    "treeSize": outcome.cosigned.tree_size,
                    "checkpoint": outcome.cosigned.checkpoint,
                    "inclusionProof": list(outcome.cosigned.inclusion_proof),
                }
            ),
        },
        indent=2,
    )
