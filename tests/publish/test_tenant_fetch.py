"""`attested-replay tenant fetch`: verified incremental downloads and tampering detection.

The tampering here is an operator's who rewrites the database and then starts the service on
a fresh state directory (so that no head journal remembers what was signed) after deleting the
signed heads the database records: the honest service's fork guard
(``tests/publish/test_fork_guard.py``) is out of the way, and the tenant has to notice alone.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.contracts import MAX_ENVELOPE_BYTES
from attestation.envelope.merged import parse_any_envelope
from attestation.tenant.http import RetryPolicy
from attestation.transparency.entries import LogEntry
from runner.cli import main
from runner.publish.client import publish_envelope
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.sequencer import AppendRequest
from runner.service.log.shard_sets import PartShape
from runner.service.log.storage import PostgresStorage, Role, SqliteStorage, Storage
from tests.publish.conftest import make_merged_envelope

FAST = RetryPolicy(backoff_factor=0.01, backoff_max=0.05)
TAMPERING = 7


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _sql(storage: Storage, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run SQL behind the service's back, as an operator with database access could."""
    if isinstance(storage, SqliteStorage):
        with sqlite3.connect(storage.path) as db:
            return db.execute(statement, params).fetchall()
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.dsn) as db:
        cursor = db.execute(statement.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description else []


def _rewrite_log(storage: Storage, tenant: str, entries: list[bytes]) -> None:
    _sql(storage, "DELETE FROM signed_heads WHERE tenant = ?", (tenant,))
    _sql(storage, "DELETE FROM log_entries WHERE tenant = ?", (tenant,))
    for index, entry in enumerate(entries):
        _sql(
            storage,
            "INSERT INTO log_entries (tenant, log_index, entry) VALUES (?, ?, ?)",
            (tenant, index, entry),
        )


class Tenant:
    """Drives the CLI as the tenant `acme` would."""

    def __init__(self, tmp_path: Path, token: str, key: str) -> None:
        self.out = tmp_path / "acme-store"
        self.token_file = tmp_path / "acme.token"
        self.token_file.write_text(token + "\n")
        self.key = key

    def fetch(self, url: str, *extra: str, pin: bool = True) -> int:
        argv = [
            "tenant",
            "fetch",
            "--server",
            url,
            "--token-file",
            str(self.token_file),
            "--tenant",
            "acme",
            "--out",
            str(self.out),
        ]
        if pin:
            argv += ["--log-key", self.key]
        return main([*argv, *extra])

    def stored(self) -> list[str]:
        return sorted(p.name for p in (self.out / "envelopes").iterdir())


@pytest.fixture
def world(
    storage: Storage,
    signer: CheckpointSigner,
    serve: Any,
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
) -> dict[str, Any]:
    """A service with five published acme envelopes and a tenant that fetched them once."""
    spool = tmp_path / "spool"

    def publish(service: Any, seeds: range) -> list[bytes]:
        published = []
        for seed in seeds:
            data = envelope_for("acme", f"run-{seed}", seed)
            publish_envelope(
                service.url,
                data,
                tenant="acme",
                run_id=f"run-{seed}",
                token=service.token("acme"),
                spool_dir=spool,
                retry=FAST,
            )
            published.append(data)
        return published

    with serve(storage, signer) as service:
        first = publish(service, range(5))
        tenant = Tenant(tmp_path, service.token("acme", "tenant"), signer.verifier_key.encode())
        assert tenant.fetch(service.url) == 0
        assert tenant.stored() == sorted(f"sha256-{_digest(d)[7:]}.json" for d in first)
        tokens = dict(service.tokens)

    def restart(
        *,
        with_signer: CheckpointSigner | None = None,
        on: Storage | None = None,
        fresh_state: bool = False,
    ) -> AbstractContextManager[Any]:
        state_dir = None
        if fresh_state:  # the operator's own state directory: no journal of signed heads
            state_dir = tmp_path / f"operator-state-{len(list(tmp_path.glob('operator-*')))}"
        running: AbstractContextManager[Any] = serve(
            on or storage, with_signer or signer, state_dir=state_dir
        )
        return running

    return {
        "storage": storage,
        "tenant": tenant,
        "restart": restart,
        "publish": publish,
        "first": first,
        "tokens": tokens,
    }


def _restarted(world: dict[str, Any], **kwargs: Any) -> AbstractContextManager[Any]:
    restart: Callable[..., AbstractContextManager[Any]] = world["restart"]
    return restart(**kwargs)


def test_incremental_fetch_stores_envelopes_and_checkpoint(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tenant: Tenant = world["tenant"]
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        later = world["publish"](service, range(5, 8))
        capsys.readouterr()
        assert tenant.fetch(service.url, pin=False) == 0  # the key pinned on the first fetch
        assert capsys.readouterr().out.startswith(
            "verified log of 8 entries (was 5); 3 new envelope(s)"
        )
        assert tenant.fetch(service.url) == 0
    assert len(tenant.stored()) == 8
    assert (tenant.out / "checkpoint").read_text().startswith("publish.test/t/acme\n8\n")
    index = json.loads((tenant.out / "index.json").read_text())
    assert index["7"] == {"digest": _digest(later[2]), "runId": "run-7", "shard": None}
    for name in tenant.stored():
        data = (tenant.out / "envelopes" / name).read_bytes()
        assert name == f"sha256-{hashlib.sha256(data).hexdigest()}.json"


def test_first_fetch_needs_a_pinned_key(
    world: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tenant: Tenant = world["tenant"]
    tenant.out = tmp_path / "fresh"
    with _restarted(world) as service:
        assert tenant.fetch(service.url, pin=False) == 9
        assert "no pinned log key" in capsys.readouterr().err


def _expect_tampering(
    tenant: Tenant, url: str, capsys: pytest.CaptureFixture[str], message: str
) -> None:
    before = (tenant.out / "checkpoint").read_text()
    capsys.readouterr()
    assert tenant.fetch(url) == TAMPERING
    assert message in capsys.readouterr().err
    assert (tenant.out / "checkpoint").read_text() == before  # the kept checkpoint is unchanged


def test_removed_entry_is_tampering(world: Any, capsys: pytest.CaptureFixture[str]) -> None:
    storage = world["storage"]
    entries = storage.log_entries("acme", 0, 5)
    _rewrite_log(storage, "acme", entries[:2] + entries[3:])
    with _restarted(world, fresh_state=True) as service:
        service.tokens.update(world["tokens"])
        _expect_tampering(
            world["tenant"], service.url, capsys, "the log shrank from 5 to 4 entries"
        )
        world["publish"](service, range(5, 7))  # growing past the old size does not hide it
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            "is not consistent with the kept checkpoint of size 5",
        )


def test_reordered_entries_are_tampering(world: Any, capsys: pytest.CaptureFixture[str]) -> None:
    storage = world["storage"]
    entries = storage.log_entries("acme", 0, 5)
    _rewrite_log(storage, "acme", [entries[1], entries[0], *entries[2:]])
    with _restarted(world, fresh_state=True) as service:
        service.tokens.update(world["tokens"])
        world["publish"](service, range(5, 6))
        _expect_tampering(
            world["tenant"], service.url, capsys, "checkpoint of size 6 is not consistent"
        )


def test_rewritten_entry_is_tampering(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    storage = world["storage"]
    replacement = envelope_for("acme", "run-3", 333)
    entries = storage.log_entries("acme", 0, 5)
    entries[3] = entries[3].replace(
        _digest(world["first"][3]).encode(), _digest(replacement).encode()
    )
    _rewrite_log(storage, "acme", entries)
    _sql(
        storage,
        "UPDATE envelopes SET digest = ?, data = ? WHERE tenant = 'acme' AND log_index = 3",
        (_digest(replacement), replacement),
    )
    with _restarted(world, fresh_state=True) as service:
        _expect_tampering(
            world["tenant"], service.url, capsys, "checkpoint of size 5 is not consistent"
        )


def test_rewritten_envelope_bytes_are_tampering(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = world["storage"]
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        (fresh,) = world["publish"](service, range(5, 6))
    _sql(
        storage,
        "UPDATE envelopes SET data = ? WHERE tenant = 'acme' AND digest = ?",
        (fresh.replace(b"run-5", b"run-6"), _digest(fresh)),
    )
    with _restarted(world) as service:
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"envelope {_digest(fresh)} (entry 5) has other bytes",
        )


def test_removed_envelope_bytes_are_tampering(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = world["storage"]
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        (fresh,) = world["publish"](service, range(5, 6))
    # The log entry stays (removing it is caught by consistency); only the bytes go.
    _sql(storage, "DELETE FROM envelopes WHERE tenant = 'acme' AND digest = ?", (_digest(fresh),))
    with _restarted(world) as service:
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"envelope {_digest(fresh)} of log entry 5 is gone: the signed log includes it, "
            "so it was removed after publication",
        )


def test_oversized_envelope_answer_is_tampering(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = world["storage"]
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        (fresh,) = world["publish"](service, range(5, 6))
    _sql(
        storage,
        "UPDATE envelopes SET data = ? WHERE tenant = 'acme' AND digest = ?",
        (fresh + b" " * MAX_ENVELOPE_BYTES, _digest(fresh)),
    )
    with _restarted(world) as service:
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"envelope {_digest(fresh)} of log entry 5 exceeds {MAX_ENVELOPE_BYTES} bytes, "
            "which the service never accepts",
        )


def test_forked_checkpoint_is_tampering(
    world: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The operator starts over on an empty database with the same key and publishes five
    # other envelopes: a checkpoint of the same size with another root, validly signed.
    other = SqliteStorage(tmp_path / "fork.sqlite3")
    other.initialize()
    with _restarted(world, on=other, fresh_state=True) as service:
        tenant_token = world["tenant"].token_file.read_text().strip()
        other.add_token(hashlib.sha256(tenant_token.encode()).hexdigest(), "acme", Role.TENANT)
        world["publish"](service, range(100, 105))
        _expect_tampering(
            world["tenant"], service.url, capsys, "checkpoint of size 5 is not consistent"
        )


def test_bad_signature_is_tampering(world: Any, capsys: pytest.CaptureFixture[str]) -> None:
    impostor = CheckpointSigner("publish.test", Ed25519PrivateKey.generate())
    _sql(world["storage"], "DELETE FROM signed_heads")
    with _restarted(world, with_signer=impostor, fresh_state=True) as service:
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            "no valid signature by the pinned key 'publish.test'",
        )


def test_consistency_with_a_publish_receipt_checkpoint(
    world: dict[str, Any],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tenant: Tenant = world["tenant"]
    tenant.out = tmp_path / "from-receipt"
    with _restarted(world) as service:
        data = envelope_for("acme", "run-50", 50)
        outcome = publish_envelope(
            service.url,
            data,
            tenant="acme",
            run_id="run-50",
            token=service.token("acme"),
            spool_dir=tmp_path / "spool",
            retry=FAST,
        )
        assert outcome.checkpoint is not None
        receipt = tmp_path / "receipt.checkpoint"
        receipt.write_text(outcome.checkpoint)
        world["publish"](service, range(51, 53))
        capsys.readouterr()
        assert tenant.fetch(service.url, "--checkpoint", str(receipt)) == 0
        assert capsys.readouterr().out.startswith(
            "verified log of 8 entries (was 6); 2 new envelope(s)"
        )
        forged = outcome.checkpoint.replace("\n6\n", "\n7\n")
        receipt.write_text(forged)
        assert tenant.fetch(service.url, "--checkpoint", str(receipt)) == 1
        assert "does not verify" in capsys.readouterr().err


def test_two_envelopes_for_one_run_are_tampering(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """The service refuses a second envelope for a run before the log (409); an operator who
    writes one into the database anyway is caught by the tenant."""
    storage = world["storage"]
    replacement = envelope_for("acme", "run-3", 333)
    entry = LogEntry(tenant="acme", run_id="run-3", envelope=_digest(replacement)).to_bytes()
    _sql(storage, "DELETE FROM signed_heads")
    _sql(
        storage,
        "INSERT INTO log_entries (tenant, log_index, entry) VALUES ('acme', 5, ?)",
        (entry,),
    )
    _sql(
        storage,
        "INSERT INTO envelopes (tenant, digest, data, log_index) VALUES ('acme', ?, ?, 5)",
        (_digest(replacement), replacement),
    )
    with _restarted(world, fresh_state=True) as service:
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"log entries 3 and 5 both publish run 'run-3' ({_digest(world['first'][3])} and "
            f"{_digest(replacement)}): the service never logs a second envelope for a run",
        )


def test_the_shards_of_a_run_and_its_merge_are_not_duplicates(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    shards = [envelope_for("acme", "run-s", n, shard=(n, 2)) for n in range(2)]
    merged = make_merged_envelope("acme", "run-s", shards)
    with _restarted(world) as service:
        token = service.token("acme")
        for data in (*shards, merged):
            publish_envelope(
                service.url,
                data,
                tenant="acme",
                run_id="run-s",
                token=token,
                spool_dir=world["tenant"].out.parent / "spool",
                retry=FAST,
            )
        capsys.readouterr()
        assert world["tenant"].fetch(service.url) == 0
    index = json.loads((world["tenant"].out / "index.json").read_text())
    assert [index[str(n)]["shard"] for n in range(5, 8)] == [0, 1, None]


def test_two_envelopes_for_one_shard_are_tampering(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """A second envelope for shard 1 of a run, written into the database behind the service,
    is caught even when the tenant's kept index predates the shard column."""
    shards = [envelope_for("acme", "run-s", n, shard=(n, 2)) for n in range(2)]
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        for data in shards:
            publish_envelope(
                service.url,
                data,
                tenant="acme",
                run_id="run-s",
                token=service.token("acme"),
                spool_dir=world["tenant"].out.parent / "spool",
                retry=FAST,
            )
        assert world["tenant"].fetch(service.url) == 0
    kept = world["tenant"].out / "index.json"
    older = {
        n: {"digest": i["digest"], "runId": i["runId"]}
        for n, i in json.loads(kept.read_text()).items()
    }
    kept.write_text(json.dumps(older))  # as an older tenant fetch wrote it: no "shard"
    storage = world["storage"]
    again = envelope_for("acme", "run-s", 77, shard=(1, 2))
    entry = LogEntry(tenant="acme", run_id="run-s", envelope=_digest(again)).to_bytes()
    _sql(storage, "DELETE FROM signed_heads")
    _sql(
        storage,
        "INSERT INTO log_entries (tenant, log_index, entry) VALUES ('acme', 7, ?)",
        (entry,),
    )
    _sql(
        storage,
        "INSERT INTO envelopes (tenant, digest, data, log_index) VALUES ('acme', ?, ?, 7)",
        (_digest(again), again),
    )
    with _restarted(world, fresh_state=True) as service:
        service.tokens.update(world["tokens"])
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"log entries 6 and 7 both publish shard 1 of run 'run-s' ({_digest(shards[1])} and "
            f"{_digest(again)})",
        )


def _publish_all(world: Any, service: Any, envelopes: list[bytes], run_id: str) -> None:
    for data in envelopes:
        publish_envelope(
            service.url,
            data,
            tenant="acme",
            run_id=run_id,
            token=service.token("acme"),
            spool_dir=world["tenant"].out.parent / "spool",
            retry=FAST,
        )


def test_a_merged_envelope_with_another_shard_than_the_logged_one_is_tampering(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """The pods publish shards 0 and 1; the operator publishes a merged envelope whose shard
    1 is other evidence (the service checks the kinds and shard counts of a run's parts, not
    whether the merged envelope's shards are the logged documents)."""
    shards = [envelope_for("acme", "run-s", n, shard=(n, 2)) for n in range(2)]
    other = envelope_for("acme", "run-s", 77, shard=(1, 2))
    merged = make_merged_envelope("acme", "run-s", [shards[0], other])
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        _publish_all(world, service, [*shards, merged], "run-s")
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"the merged envelope of run 'run-s' (log entry 7, {_digest(merged)}) holds another "
            f"shard 1 than the one log entry 6 publishes ({_digest(shards[1])})",
        )
    assert not (world["tenant"].out / "index.json").read_text().count("run-s")


def test_a_shard_logged_after_its_merged_envelope_is_checked_against_it(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """The merged envelope was fetched (and kept) first; shard 0, logged later, is compared
    with the kept merged envelope's shard 0."""
    shards = [envelope_for("acme", "run-s", n, shard=(n, 2)) for n in range(2)]
    merged = make_merged_envelope("acme", "run-s", shards)
    other = envelope_for("acme", "run-s", 50, shard=(0, 2))
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        _publish_all(world, service, [merged, shards[1]], "run-s")
        assert world["tenant"].fetch(service.url) == 0
        _publish_all(world, service, [other], "run-s")
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"the merged envelope of run 'run-s' (log entry 5, {_digest(merged)}) holds another "
            f"shard 0 than the one log entry 7 publishes ({_digest(other)})",
        )


def _log_past_the_service(service: Any, data: bytes, told: PartShape) -> None:
    """Log ``data`` as an operator writing to the log directly would: the log is told the
    envelope is ``told``, a part its shard-set check lets pass, so the tenant's checks are
    all that stands between the tenant and the contradiction."""
    envelope = parse_any_envelope(data)
    digest = _digest(data)
    entry = LogEntry(tenant="acme", run_id=envelope.run_id, envelope=digest).to_bytes()
    request = AppendRequest("acme", digest, data, envelope.run_id, told, entry)
    service.app_service.log.submit(request).result(timeout=30)


def test_a_logged_shard_of_another_split_is_tampering(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    shards = [envelope_for("acme", "run-s", n, shard=(n, 2)) for n in range(2)]
    merged = make_merged_envelope("acme", "run-s", shards)
    third = envelope_for("acme", "run-s", 9, shard=(2, 3))
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        _publish_all(world, service, [merged, *shards], "run-s")
        _log_past_the_service(service, third, told=PartShape("shard", 2, 2))
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"log entry 8 publishes shard 2 of run 'run-s' ({_digest(third)}), and the run's "
            f"merged envelope (log entry 5, {_digest(merged)}) holds no shard 2",
        )


def test_an_unsharded_envelope_beside_shards_of_its_run_is_tampering(
    world: Any, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    whole = envelope_for("acme", "run-s", 3)
    shard = envelope_for("acme", "run-s", 4, shard=(0, 2))
    with _restarted(world) as service:
        service.tokens.update(world["tokens"])
        _publish_all(world, service, [whole], "run-s")
        assert world["tenant"].fetch(service.url) == 0
        _log_past_the_service(service, shard, told=PartShape("unsharded", None, 0))
        _expect_tampering(
            world["tenant"],
            service.url,
            capsys,
            f"log entry 5 publishes run 'run-s' unsharded ({_digest(whole)}) and log entry 6 "
            f"publishes shard 0 of it ({_digest(shard)})",
        )
