"""100 concurrent publishers x 20 envelopes: every envelope stored once, every proof valid."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from attestation.tenant.http import HttpClient, RetryPolicy
from attestation.transparency.checkpoint import verify_signed_checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, verify_consistency, verify_inclusion
from runner.publish.client import PublishOutcome, publish_envelope
from runner.service.log.merkle import MerkleTree

PUBLISHERS = 100
PER_PUBLISHER = 20


def test_concurrent_publishers_cannot_fork_the_log(
    served_process: Any, envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service = served_process
    token = service.token("acme")
    retry = RetryPolicy(backoff_factor=0.01)
    start = threading.Barrier(PUBLISHERS)

    def publisher(number: int) -> list[tuple[bytes, PublishOutcome]]:
        results = []
        with HttpClient(token=token, retry=retry) as client:  # keep-alive, one per publisher
            start.wait()
            for item in range(PER_PUBLISHER):
                data = envelope_for("acme", f"run-{number}-{item}", number * 1000 + item)
                outcome = publish_envelope(
                    service.url,
                    data,
                    tenant="acme",
                    run_id=f"run-{number}-{item}",
                    token=token,
                    spool_dir=tmp_path / f"spool-{number}",
                    retry=retry,
                    client=client,
                )
                results.append((data, outcome))
        return results

    with ThreadPoolExecutor(max_workers=PUBLISHERS) as pool:
        published = [pair for batch in pool.map(publisher, range(PUBLISHERS)) for pair in batch]

    total = PUBLISHERS * PER_PUBLISHER
    assert len(published) == total
    assert all(outcome.status == "created" for _data, outcome in published)
    indices = sorted(
        outcome.log_index for _data, outcome in published if outcome.log_index is not None
    )
    assert indices == list(range(total))  # every envelope exactly once, no index twice
    assert service.storage.log_size("acme") == total
    assert not [p for n in range(PUBLISHERS) for p in (tmp_path / f"spool-{n}").glob("*")]

    # Rebuild the tree from the stored log and check every receipt against it.
    entries = service.storage.log_entries("acme", 0, total)
    tree = MerkleTree([leaf_hash(entry) for entry in entries])
    key = service.verifier_key
    final_root = tree.root()
    for data, outcome in published:
        assert outcome.checkpoint is not None
        assert outcome.inclusion_proof is not None
        assert outcome.tree_size is not None
        assert outcome.log_index is not None
        checkpoint = verify_signed_checkpoint(outcome.checkpoint, key, origin="publish.test/t/acme")
        assert checkpoint.root == tree.root(checkpoint.size)  # every signed checkpoint is a prefix
        entry = LogEntry.from_bytes(entries[outcome.log_index])
        assert entry.envelope == outcome.digest
        assert service.storage.envelope("acme", outcome.digest) == (data, outcome.log_index)
        proof = [base64.b64decode(h) for h in outcome.inclusion_proof]
        assert verify_inclusion(
            leaf_hash(entries[outcome.log_index]),
            outcome.log_index,
            outcome.tree_size,
            proof,
            checkpoint.root,
        )
        consistency = tree.consistency_proof(checkpoint.size, total)
        assert verify_consistency(checkpoint.size, total, consistency, checkpoint.root, final_root)
