"""The ``add-checkpoint`` request of C2SP tlog-witness, and the witness's judgement of it.

Pure: the request body is parsed (:func:`parse_add_checkpoint`) and judged against the log's
pinned key and the latest checkpoint the witness cosigned (:func:`judge`); each refusal is a
:class:`WitnessRefusal` carrying the HTTP status the specification assigns to it:

=======  ==================================================================================
status   when
=======  ==================================================================================
400      a malformed body, or an old size beyond the checkpoint's size
403      no valid signature by the log's key, or a line with its name and key ID that fails
404      an origin the witness does not follow
409      the old size is not the size of the latest checkpoint cosigned (body: that size)
422      a non-empty proof from size 0, a consistency proof that does not verify, another
         root for the size already cosigned, or a size-0 checkpoint whose root is not empty
=======  ==================================================================================
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from attestation.contracts import TENANT_ID_PATTERN
from attestation.transparency.checkpoint import (
    Checkpoint,
    CheckpointError,
    VerifierKey,
    parse_signed_note,
    signed_by,
)
from attestation.transparency.merkle import EMPTY_ROOT, HASH_SIZE, verify_consistency

#: The largest request body the witness reads: 63 proof lines and a checkpoint with a few
#: dozen signature lines fit many times over.
MAX_REQUEST_BYTES: Final = 64 * 1024
#: tlog-witness: a client MUST NOT send more than 63 consistency proof lines.
MAX_PROOF_LINES: Final = 63
_OLD_SIZE: Final = re.compile(r"old (0|[1-9][0-9]{0,19})")
_TENANT: Final = re.compile(TENANT_ID_PATTERN)


class WitnessRefusal(Exception):  # noqa: N818 (an answer, not a fault)
    """A request the witness does not cosign, with the HTTP status that says why."""

    def __init__(self, status: int, message: str, *, size: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        #: For 409: the size of the latest checkpoint cosigned for the origin.
        self.size = size


@dataclass(frozen=True, slots=True)
class AddCheckpoint:
    old_size: int
    proof: tuple[bytes, ...]
    #: The signed note as received (the checkpoint and every signature line).
    note: str
    checkpoint: Checkpoint
    signatures: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Cosigned:
    """The latest checkpoint a witness cosigned for one origin."""

    size: int
    root: bytes


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """The old size, consistency proof and checkpoint of an ``add-checkpoint`` body (400)."""
    if len(body) > MAX_REQUEST_BYTES:
        raise WitnessRefusal(400, f"request body exceeds {MAX_REQUEST_BYTES} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WitnessRefusal(400, f"request body is not UTF-8: {exc}") from exc
    head, separator, note = text.partition("\n\n")
    if not separator:
        raise WitnessRefusal(400, "request body has no empty line before the checkpoint")
    lines = head.split("\n")
    old = _OLD_SIZE.fullmatch(lines[0])
    if old is None:
        raise WitnessRefusal(400, f"first line {lines[0][:40]!r} is not 'old <size>'")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise WitnessRefusal(400, f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof: list[bytes] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            node = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise WitnessRefusal(400, f"line {number}: proof hash is not base64") from exc
        if len(node) != HASH_SIZE:
            raise WitnessRefusal(400, f"line {number}: proof hash has {len(node)} bytes")
        proof.append(node)
    try:
        checkpoint, signatures = parse_signed_note(note)
    except CheckpointError as exc:
        raise WitnessRefusal(400, f"checkpoint: {exc}") from exc
    return AddCheckpoint(
        old_size=int(old.group(1)),
        proof=tuple(proof),
        note=note,
        checkpoint=checkpoint,
        signatures=tuple(signatures),
    )


def log_key_for(origin: str, logs: Mapping[str, VerifierKey]) -> VerifierKey | None:
    """The key of the followed log whose tenant logs include ``origin`` (``<name>/t/<tenant>``,
    :func:`~attestation.transparency.checkpoint.tenant_log_origin`), or None."""
    name, separator, tenant = origin.rpartition("/t/")
    if not separator or not _TENANT.fullmatch(tenant):
        return None
    return logs.get(name)


def judge(request: AddCheckpoint, key: VerifierKey | None, latest: Cosigned | None) -> None:
    """Refuse (:class:`WitnessRefusal`) unless the checkpoint may be cosigned, in the order
    tlog-witness gives; ``latest`` is what the witness cosigned for the origin, if anything."""
    checkpoint = request.checkpoint
    if key is None:
        raise WitnessRefusal(404, f"this witness does not follow the log {checkpoint.origin!r}")
    _require_log_signature(request, key)
    if request.old_size > checkpoint.size:
        raise WitnessRefusal(
            400, f"old size {request.old_size} exceeds the checkpoint size {checkpoint.size}"
        )
    cosigned_size = 0 if latest is None else latest.size
    if request.old_size != cosigned_size:
        raise WitnessRefusal(
            409,
            f"old size {request.old_size} is not the size of the latest checkpoint cosigned "
            f"for {checkpoint.origin!r} ({cosigned_size})",
            size=cosigned_size,
        )
    if checkpoint.size == 0 and checkpoint.root != EMPTY_ROOT:
        raise WitnessRefusal(422, "a checkpoint of size 0 must carry the empty tree's root")
    if request.old_size == 0:
        if request.proof:
            raise WitnessRefusal(422, "a consistency proof from size 0 must be empty")
        return
    assert latest is not None  # old_size == latest.size > 0
    if checkpoint.size == latest.size:
        if checkpoint.root != latest.root:
            raise WitnessRefusal(
                422, f"another root for size {checkpoint.size}, which this witness cosigned"
            )
        return
    if not verify_consistency(
        latest.size, checkpoint.size, request.proof, latest.root, checkpoint.root
    ):
        raise WitnessRefusal(
            422,
            f"the consistency proof from size {latest.size} to {checkpoint.size} does not "
            "verify: the checkpoint does not extend the one this witness cosigned",
        )


def _require_log_signature(request: AddCheckpoint, key: VerifierKey) -> None:
    try:
        signed = signed_by(request.checkpoint, list(request.signatures), key)
    except CheckpointError as exc:
        raise WitnessRefusal(403, str(exc)) from exc
    if not signed:
        raise WitnessRefusal(
            403, f"the checkpoint carries no signature by the log key {key.name!r}"
        )
