"""The shard-set check runs inside the log's write transaction: parts of one run that
contradict each other cannot both be logged, even when they arrive in the same batch."""

from __future__ import annotations

from attestation.envelope.merged import parse_any_envelope
from attestation.transparency.entries import LogEntry
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.sequencer import AppendRequest, Outcome, PublicationLog
from runner.service.log.shard_sets import PartShape, part_shape, shard_set_conflict
from runner.service.log.storage import WHOLE_RUN, Storage
from tests.publish.conftest import make_envelope, make_merged_envelope, make_service, sha256_name


def _request(data: bytes) -> AppendRequest:
    envelope = parse_any_envelope(data)
    digest = sha256_name(data)
    entry = LogEntry(tenant="acme", run_id=envelope.run_id, envelope=digest).to_bytes()
    return AppendRequest("acme", digest, data, envelope.run_id, part_shape(envelope), entry)


def _started_log(storage: Storage, signer: CheckpointSigner) -> PublicationLog:
    log = make_service(storage, signer).log
    assert isinstance(log, PublicationLog)  # the in-process log: one batch per call
    log.start()
    return log


def test_two_splits_in_one_batch_log_only_the_first(
    storage: Storage, signer: CheckpointSigner
) -> None:
    of_two = make_envelope("acme", "run-s", 1, shard=(0, 2))
    of_three = make_envelope("acme", "run-s", 2, shard=(1, 3))
    log = _started_log(storage, signer)
    try:
        first, second = log.integrate([_request(of_two), _request(of_three)])
        assert first.result(timeout=30).outcome is Outcome.CREATED
        refused = second.result(timeout=30)
    finally:
        log.stop()
    assert refused.outcome is Outcome.SHARD_SET_CONFLICT
    assert refused.log_index is None
    assert refused.conflict == (
        "run 'run-s' has shard 0 of 2 logged; this envelope is shard 1 of 3"
    )
    assert storage.run_shards("acme", "run-s") == [0]
    assert storage.log_size("acme") == 1


def test_an_unsharded_envelope_and_a_shard_in_one_batch(
    storage: Storage, signer: CheckpointSigner
) -> None:
    whole = make_envelope("acme", "run-w", 1)
    shard = make_envelope("acme", "run-w", 2, shard=(0, 2))
    log = _started_log(storage, signer)
    try:
        first, second = log.integrate([_request(whole), _request(shard)])
        assert first.result(timeout=30).outcome is Outcome.CREATED
        refused = second.result(timeout=30)
    finally:
        log.stop()
    assert refused.outcome is Outcome.SHARD_SET_CONFLICT
    assert refused.conflict == (
        f"run 'run-w' has an unsharded envelope ({sha256_name(whole)}) logged; "
        "this envelope is shard 0 of 2"
    )
    assert storage.log_size("acme") == 1


def test_the_rules_read_no_envelope_for_an_unsharded_run() -> None:
    def never(digest: str) -> PartShape | None:
        raise AssertionError(f"read {digest}")

    assert shard_set_conflict("r", PartShape("unsharded", None), {}, never) is None
    assert shard_set_conflict("r", PartShape("unsharded", None), {WHOLE_RUN: "d"}, never) is None


def test_a_merged_envelope_of_another_count_beside_shards() -> None:
    shards = [make_envelope("acme", "run-m", n, shard=(n, 2)) for n in range(2)]
    merged = parse_any_envelope(make_merged_envelope("acme", "run-m", shards))
    shapes = {"d0": PartShape("shard", 3, 0), "d1": PartShape("shard", 3, 1)}
    assert shard_set_conflict("run-m", part_shape(merged), {"0": "d0", "1": "d1"}, shapes.get) == (
        "run 'run-m' has shard 0 of 3 logged; this envelope is a merged envelope of 2 shards"
    )
