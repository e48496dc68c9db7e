"""The service's witness submitter on its own: a witness that hangs costs a round one
timeout, not one per tenant log."""

from __future__ import annotations

import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runner.service import witnesses as submitter_module
from runner.service.log.heads import SignedHead
from runner.service.witnesses import WitnessEndpoint, WitnessSubmitter
from runner.witness.cosigner import Cosigner
from tests import hostile_server as hs
from tests.witness.logs import Log

TENANTS = ["acme", "globex", "initech"]


def test_a_hanging_witness_costs_a_round_one_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submitter_module, "READ_TIMEOUT_SECONDS", 0.5)
    logs = {tenant: Log(tenant=tenant) for tenant in TENANTS}
    for log in logs.values():
        log.signer = logs["acme"].signer  # one service, one log key
        log.grow(2)
    key = Cosigner("witness.test/hangs", Ed25519PrivateKey.generate()).verifier_key
    with hs.HostileServer(hs.silent) as hanging:
        submitter = WitnessSubmitter(
            [WitnessEndpoint(hanging.url, key)],
            tenants=lambda: TENANTS,
            signed_head=lambda tenant: SignedHead.parse(logs[tenant].note()),
            consistency_proof=lambda tenant, old, new: logs[tenant].tree.consistency_proof(
                old, new
            ),
        )
        started = time.monotonic()
        submitter.submit_all()
        elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 1.4  # one timeout, not three
        assert len(hanging.requests) == 1
        assert submitter.cosigned("acme") is None
        submitter.stop()
