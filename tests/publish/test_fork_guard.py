"""The service never signs a fork: a store that lost or changed signed entries is refused.

Each test records every checkpoint the log key signs (``RecordingSigner``): a fork is two
signatures for one tree size with different roots, whoever saw them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.transparency.checkpoint import Checkpoint, verify_signed_checkpoint
from attestation.transparency.merkle import leaf_hash
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.heads import JOURNAL_FILE, HeadJournal, JournalError, SignedHead
from runner.service.log.merkle import MerkleTree
from runner.service.log.storage import PostgresStorage, SqliteStorage, Storage
from tests.publish.conftest import LOG_NAME, make_envelope

ORIGIN = f"{LOG_NAME}/t/acme"


class RecordingSigner(CheckpointSigner):
    """The log key, recording every checkpoint it signs."""

    def __init__(self) -> None:
        super().__init__(LOG_NAME, Ed25519PrivateKey.generate())
        self.signed: list[Checkpoint] = []
        self._lock = threading.Lock()

    def sign(self, checkpoint: Checkpoint) -> str:
        with self._lock:
            self.signed.append(checkpoint)
        return super().sign(checkpoint)

    def forks(self) -> dict[int, set[bytes]]:
        roots: dict[int, set[bytes]] = {}
        for checkpoint in self.signed:
            roots.setdefault(checkpoint.size, set()).add(checkpoint.root)
        return {size: found for size, found in roots.items() if len(found) > 1}


@pytest.fixture
def recording() -> RecordingSigner:
    return RecordingSigner()


def _sql(storage: Storage, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """SQL behind the service's back: a restore, a failover, an operator's DELETE."""
    if isinstance(storage, SqliteStorage):
        with sqlite3.connect(storage.path) as db:
            return db.execute(statement, params).fetchall()
    assert isinstance(storage, PostgresStorage)
    with psycopg.connect(storage.dsn) as db:
        cursor = db.execute(statement.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description else []


def _roll_back(storage: Storage, size: int, head_note: str | None) -> None:
    """The store as a backup taken at ``size`` would restore it (or a lagging replica holds
    it): the newer entries, envelopes and run pointers gone, the signed head of then."""
    _sql(
        storage,
        "DELETE FROM run_pointers WHERE digest IN "
        "(SELECT digest FROM envelopes WHERE tenant = 'acme' AND log_index >= ?)",
        (size,),
    )
    _sql(storage, "DELETE FROM envelopes WHERE tenant = 'acme' AND log_index >= ?", (size,))
    _sql(storage, "DELETE FROM log_entries WHERE tenant = 'acme' AND log_index >= ?", (size,))
    if head_note is None:
        _sql(storage, "DELETE FROM signed_heads WHERE tenant = 'acme'")
    else:
        head = SignedHead.parse(head_note)
        _sql(
            storage,
            "UPDATE signed_heads SET size = ?, root = ?, note = ? WHERE tenant = 'acme'",
            (head.size, head.checkpoint.root, head_note),
        )


def _put(url: str, token: str, data: bytes) -> requests.Response:
    digest = hashlib.sha256(data).digest()
    return requests.put(
        f"{url}/v1/tenants/acme/envelopes/sha256:{digest.hex()}",
        data=data,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Digest": f"sha-256=:{base64.b64encode(digest).decode()}:",
        },
        timeout=30,
    )


def _checkpoint(url: str, token: str) -> requests.Response:
    return requests.get(
        f"{url}/v1/tenants/acme/log/checkpoint",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _publish(url: str, token: str, seeds: range) -> list[str]:
    notes = []
    for seed in seeds:
        answer = _put(url, token, make_envelope("acme", f"run-{seed}", seed))
        assert answer.status_code == 201, answer.text
        notes.append(answer.json()["checkpoint"])
    return notes


def _refused(answer: requests.Response, reason: str) -> None:
    assert answer.status_code == 503, answer.text
    assert "Retry-After" not in answer.headers  # an operator has to act: retrying cannot help
    body = answer.json()
    assert body["reason"] == "log-refused"
    assert body["error"].startswith(f"the log of tenant 'acme' is refused: {reason}")
    assert body["error"].endswith(
        "; repair the store (docs/publishing.md, 'Recovering a refused log'), then restart "
        "the service"
    )


@pytest.fixture
def refusals() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def _refusal_events(captured: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [event for event in captured if event["event"] == "log_refused"]


def test_a_store_rolled_back_after_signing_is_refused_and_no_size_is_signed_twice(
    storage: Storage,
    recording: RecordingSigner,
    serve: Callable[..., Any],
    refusals: list[MutableMapping[str, Any]],
) -> None:
    with serve(storage, recording) as service:
        token = service.token("acme")
        notes = _publish(service.url, token, range(20))
        at_20 = notes[-1]
        notes += _publish(service.url, token, range(20, 30))
    assert verify_signed_checkpoint(notes[-1], recording.verifier_key, origin=ORIGIN).size == 30
    _roll_back(storage, 20, at_20)  # a backup of size 20 restored, or a lagging replica

    with serve(storage, recording) as service:
        reason = (
            "the store holds 20 entries but a checkpoint of size 30 was signed: signed entries "
            "were lost (a restored backup, a lagging replica, a DELETE)"
        )
        _refused(_checkpoint(service.url, token), reason)
        for seed in range(100, 110):  # ten different envelopes: never integrated, never signed
            _refused(_put(service.url, token, make_envelope("acme", f"run-{seed}", seed)), reason)
        for path in ("log/entries?start=0&end=5", "log/proof/inclusion?index=0&size=5"):
            answer = requests.get(
                f"{service.url}/v1/tenants/acme/{path}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            _refused(answer, reason)
        health = requests.get(f"{service.url}/v1/health", timeout=30)
        assert (health.status_code, health.json()["refusedLogs"]) == (503, 1)
        # Envelopes stay readable by digest: they are what tenants hold.
        kept = make_envelope("acme", "run-3", 3)
        by_digest = requests.get(
            f"{service.url}/v1/tenants/acme/envelopes/sha256:{hashlib.sha256(kept).hexdigest()}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert (by_digest.status_code, by_digest.content) == (200, kept)
    assert storage.log_size("acme") == 20
    assert recording.forks() == {}
    assert max(c.size for c in recording.signed) == 30
    [event] = _refusal_events(refusals)  # logged once, with the reason and the remedy
    assert (event["tenant"], event["reason"], event["log_level"]) == ("acme", reason, "error")


def test_rows_deleted_under_a_running_service_are_refused(
    storage: Storage,
    recording: RecordingSigner,
    serve: Callable[..., Any],
    refusals: list[MutableMapping[str, Any]],
) -> None:
    with serve(storage, recording) as service:
        token = service.token("acme")
        notes = _publish(service.url, token, range(35))
        assert _checkpoint(service.url, token).text == notes[-1]
        _roll_back(storage, 30, None)  # the five newest rows, deleted while it serves
        reason = (
            "the store holds 30 entries but the service had integrated 35: signed entries "
            "were lost (a restored backup, a lagging replica, a DELETE)"
        )
        _refused(_put(service.url, token, make_envelope("acme", "run-50", 50)), reason)
        _refused(_checkpoint(service.url, token), reason)
        _refused(_put(service.url, token, make_envelope("acme", "run-51", 51)), reason)
    with serve(storage, recording) as service:  # a restart does not forget it: the journal
        _refused(
            _checkpoint(service.url, token),
            "the store holds 30 entries but a checkpoint of size 35 was signed",
        )
    assert storage.log_size("acme") == 30
    assert recording.forks() == {}
    assert len(_refusal_events(refusals)) == 2  # once per service process


def test_an_entry_changed_under_a_running_service_is_refused(
    storage: Storage, recording: RecordingSigner, serve: Callable[..., Any]
) -> None:
    with serve(storage, recording) as service:
        token = service.token("acme")
        _publish(service.url, token, range(5))
        _sql(
            storage,
            "UPDATE log_entries SET entry = ? WHERE tenant = 'acme' AND log_index = 4",
            (b'{"forged":true}',),
        )
        _refused(
            _put(service.url, token, make_envelope("acme", "run-9", 9)),
            "log entry 4 changed under the service (a fork)",
        )
    assert recording.forks() == {}


def test_a_new_state_directory_adopts_database_heads_only_when_told(
    storage: Storage, recording: RecordingSigner, serve: Callable[..., Any], tmp_path: Path
) -> None:
    with serve(storage, recording) as service:
        token = service.token("acme")
        signed = _publish(service.url, token, range(3))[-1]
    fresh = tmp_path / "new-state"
    with serve(storage, recording, state_dir=fresh) as service:
        _refused(
            _checkpoint(service.url, token),
            "the database records a signed head of size 3 that this service's head journal "
            "does not know (a new or lost state directory)",
        )
    with serve(storage, recording, state_dir=fresh, adopt_database_heads=True) as service:
        assert _checkpoint(service.url, token).text == signed
        _publish(service.url, token, range(3, 5))
    journal = HeadJournal(fresh / JOURNAL_FILE, recording.verifier_key).open()
    assert journal[ORIGIN].size == 5
    assert recording.forks() == {}


def test_a_store_an_older_service_wrote_gets_its_head_signed_once(
    storage: Storage, recording: RecordingSigner, serve: Callable[..., Any], tmp_path: Path
) -> None:
    with serve(storage, recording) as service:
        token = service.token("acme")
        _publish(service.url, token, range(4))
    _sql(storage, "DELETE FROM signed_heads")  # what the first release's store looks like
    with serve(storage, recording, state_dir=tmp_path / "upgraded") as service:
        checkpoint = verify_signed_checkpoint(
            _checkpoint(service.url, token).text, recording.verifier_key, origin=ORIGIN
        )
        assert checkpoint.size == 4
        _publish(service.url, token, range(4, 6))
    assert recording.forks() == {}


def test_two_services_on_one_database_agree_on_one_head(
    storage: Storage, recording: RecordingSigner, serve: Callable[..., Any], tmp_path: Path
) -> None:
    """Two service processes (each its own connections, sequencer and head journal) publish
    into one tenant's log at once: one sequence of heads, every receipt a prefix of it."""
    with (
        serve(storage, recording, state_dir=tmp_path / "one") as first,
        serve(storage, recording, state_dir=tmp_path / "two", adopt_database_heads=True) as second,
    ):
        token = first.token("acme")
        urls = [first.url, second.url]

        def publisher(number: int) -> list[str]:
            notes = []
            with requests.Session() as session:
                for item in range(8):
                    data = make_envelope("acme", f"run-{number}-{item}", number * 100 + item)
                    digest = hashlib.sha256(data).digest()
                    answer = session.put(
                        f"{urls[(number + item) % 2]}/v1/tenants/acme/envelopes/sha256:"
                        + digest.hex(),
                        data=data,
                        headers={
                            "Authorization": f"Bearer {token}",
                            "Content-Digest": f"sha-256=:{base64.b64encode(digest).decode()}:",
                        },
                        timeout=60,
                    )
                    assert answer.status_code == 201, answer.text
                    notes.append(answer.json()["checkpoint"])
            return notes

        with ThreadPoolExecutor(max_workers=6) as pool:
            notes = [n for batch in pool.map(publisher, range(6)) for n in batch]
        heads = {_checkpoint(url, token).text for url in urls}
    assert len(heads) == 1  # both serve the same, latest head
    entries = storage.log_entries("acme", 0, 48)
    tree = MerkleTree([leaf_hash(entry) for entry in entries])
    assert tree.size == 48
    for note in [*notes, *heads]:
        checkpoint = verify_signed_checkpoint(note, recording.verifier_key, origin=ORIGIN)
        assert checkpoint.root == tree.root(checkpoint.size)
    assert recording.forks() == {}


def test_the_journal_survives_a_torn_last_line_and_refuses_a_foreign_or_forked_one(
    tmp_path: Path,
) -> None:
    signer = CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate())
    path = tmp_path / JOURNAL_FILE

    def head(size: int, root: bytes) -> SignedHead:
        checkpoint = Checkpoint(ORIGIN, size, root)
        return SignedHead(checkpoint, signer.sign(checkpoint))

    journal = HeadJournal(path, signer.verifier_key)
    journal.open()
    journal.record([head(1, bytes(32)), head(2, b"\x01" * 32)])
    journal.record([head(2, b"\x01" * 32)])  # not newer: not appended
    assert len(path.read_bytes().splitlines()) == 2
    with path.open("ab") as handle:  # a crash in the middle of an append
        handle.write(b'{"note": "publish.test/t/acme\\n3\\n')
    reopened = HeadJournal(path, signer.verifier_key)
    assert reopened.open()[ORIGIN].size == 2
    assert path.read_bytes().count(b"\n") == 1  # compacted, the torn line cut
    reopened.record([head(3, b"\x02" * 32)])
    assert HeadJournal(path, signer.verifier_key).open()[ORIGIN].size == 3

    impostor = CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate())
    with pytest.raises(JournalError, match="line 1 is not a head signed with the log key"):
        HeadJournal(path, impostor.verifier_key).open()
    forked = head(3, b"\x03" * 32)
    with path.open("ab") as appended:
        appended.write(json.dumps({"note": forked.note}).encode() + b"\n")
    with pytest.raises(JournalError, match="two different heads of size 3"):
        HeadJournal(path, signer.verifier_key).open()
