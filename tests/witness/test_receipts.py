"""A publish receipt's cosigned checkpoint, checked by the publisher like the plain one: the
entry's inclusion proof under it, and the same log; a receipt that fails either is a failed
delivery (the envelope stays spooled)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from attestation.tenant.http import RetryPolicy
from attestation.transparency.checkpoint import Checkpoint, tenant_log_origin
from attestation.transparency.entries import LogEntry
from runner.errors import PublishError
from runner.publish.client import publish_envelope
from runner.publish.spool import Spool
from runner.service.log.merkle import MerkleTree
from tests import hostile_server as hs
from tests.publish.conftest import make_envelope, sha256_name
from tests.witness.logs import Log

FAST = RetryPolicy(attempts=1, backoff_factor=0.01, backoff_max=0.05)


def receipt(*, cosigned_index: int = 0, other_log: bool = False) -> dict[str, Any]:
    """A receipt for run-0 (entry 0) of a log of 3 entries, cosigned at size 2 (a witness
    cosignature is not checked by the publisher: it pins no witness)."""
    data = make_envelope("acme", "run-0")
    log = Log(tenant="acme")
    tree = MerkleTree()
    for n in range(3):
        digest = sha256_name(data) if n == 0 else "sha256:" + f"{n}" * 64
        tree.append_entry(LogEntry(tenant="acme", run_id=f"run-{n}", envelope=digest).to_bytes())

    def note(size: int, origin: str) -> str:
        return log.signer.sign(Checkpoint(origin, size, tree.root(size)))

    def proof(index: int, size: int) -> list[str]:
        return [base64.b64encode(h).decode() for h in tree.inclusion_proof(index, size)]

    other = tenant_log_origin("elsewhere.test", "acme") if other_log else log.origin
    return {
        "digest": sha256_name(data),
        "runId": "run-0",
        "status": "created",
        "logIndex": 0,
        "treeSize": 3,
        "checkpoint": note(3, log.origin),
        "inclusionProof": proof(0, 3),
        "cosigned": {
            "treeSize": 2,
            "checkpoint": note(2, other),
            "inclusionProof": proof(cosigned_index, 2),
        },
    }


def publish_to(server: hs.HostileServer, tmp_path: Path) -> Any:
    return publish_envelope(
        server.url,
        make_envelope("acme", "run-0"),
        tenant="acme",
        run_id="run-0",
        token="arp_t",
        spool_dir=tmp_path / "spool",
        retry=FAST,
    )


def test_a_cosigned_checkpoint_whose_proof_holds_is_kept(tmp_path: Path) -> None:
    body = receipt()
    with hs.HostileServer(hs.answer(201, json.dumps(body).encode())) as server:
        outcome = publish_to(server, tmp_path)
    assert outcome.cosigned is not None
    assert outcome.cosigned.tree_size == 2
    assert outcome.cosigned.checkpoint == body["cosigned"]["checkpoint"]
    assert list(outcome.cosigned.inclusion_proof) == body["cosigned"]["inclusionProof"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            receipt(cosigned_index=1),
            "the server's inclusion proof does not match its cosigned checkpoint",
        ),
        (receipt(other_log=True), "the server's cosigned checkpoint is of another log"),
        (
            {**receipt(), "cosigned": {"treeSize": 2}},
            "the server's log receipt is malformed: 'checkpoint'",
        ),
    ],
)
def test_a_cosigned_checkpoint_that_does_not_hold_the_entry_fails_the_delivery(
    tmp_path: Path, body: dict[str, Any], message: str
) -> None:
    with (
        hs.HostileServer(hs.answer(201, json.dumps(body).encode())) as server,
        pytest.raises(PublishError, match=message),
    ):
        publish_to(server, tmp_path)
    spooled = [item.digest for item in Spool(tmp_path / "spool").items()]
    assert spooled == [body["digest"]]  # kept for a later flush
