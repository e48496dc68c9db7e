"""The trust panel's runs JSON (``GET /v1/tenants/{t}/panel/runs``) for every kind of envelope
a sharded run publishes: a whole run, its shard envelopes and its merged envelope (the page
itself is tested in a browser in ``tests/panel``)."""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.envelope.merged import MergedEnvelope
from attestation.envelope.model import Envelope
from runner.service.corpus_store import open_corpus_store
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import Role, SqliteStorage
from runner.service.panel import panel_routes
from runner.service.server import create_app
from runner.service.tokens import create_token
from tests.publish.conftest import (
    LOG_NAME,
    LiveServer,
    make_envelope,
    make_merged_envelope,
    make_service,
    sha256_name,
)


class PanelServer:
    def __init__(self, url: str, storage: SqliteStorage) -> None:
        self.url = url
        self.storage = storage
        self.operator = create_token(storage, "acme", Role.OPERATOR)
        self.reader = create_token(storage, "acme", Role.TENANT)

    def publish(self, data: bytes) -> None:
        content_digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        answer = requests.put(
            f"{self.url}/v1/tenants/acme/envelopes/{sha256_name(data)}",
            data=data,
            headers={
                "Authorization": f"Bearer {self.operator}",
                "Content-Digest": f"sha-256=:{content_digest}:",
                "If-None-Match": "*",
            },
            timeout=10,
        )
        assert answer.status_code == 201, answer.text

    def runs(self) -> list[dict[str, Any]]:
        answer = requests.get(
            f"{self.url}/v1/tenants/acme/panel/runs",
            headers={"Authorization": f"Bearer {self.reader}"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        runs: list[dict[str, Any]] = answer.json()["runs"]
        for run in runs:
            assert run.pop("publishedAt") is not None
        return runs


@pytest.fixture
def panel_server(tmp_path: Path) -> Iterator[PanelServer]:
    storage = SqliteStorage(tmp_path / "publish.sqlite3")
    storage.initialize()
    store = open_corpus_store(str(storage.path))
    service = make_service(
        storage,
        CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate()),
        state_dir=tmp_path / "server-state",
    )
    server = LiveServer(create_app(service, extra_routes=panel_routes(service, store))).start()
    try:
        yield PanelServer(server.url, storage)
    finally:
        server.stop()
        storage.close()


def _bound(data: bytes) -> dict[str, str]:
    binding = Envelope.model_validate_json(data).binding
    return {
        "platform": "simulated",
        "corpusChecksum": binding.corpus_checksum,
        "evaluationDigest": binding.evaluation_digest,
        "resultDigest": binding.result_digest,
    }


def test_a_whole_run_its_shards_and_its_merged_envelope_each_show_as_what_they_are(
    panel_server: PanelServer,
) -> None:
    whole = make_envelope("acme", "run-1", seed=1)
    shards = [make_envelope("acme", "run-s", seed=5, shard=(n, 2)) for n in range(2)]
    merged = make_merged_envelope("acme", "run-s", shards)
    for data in (whole, *shards, merged):
        panel_server.publish(data)
    header = MergedEnvelope.model_validate_json(merged)

    assert panel_server.runs() == [
        {
            "logIndex": 0,
            "runId": "run-1",
            "digest": sha256_name(whole),
            "kind": "run",
            "shardIndex": None,
            "shardCount": None,
            **_bound(whole),
            "corpusExport": None,
        },
        *(
            {
                "logIndex": 1 + n,
                "runId": "run-s",
                "digest": sha256_name(shards[n]),
                "kind": "shard",
                "shardIndex": n,
                "shardCount": 2,
                **_bound(shards[n]),  # the shard's own partial result digest, labelled as such
                "corpusExport": None,
            }
            for n in range(2)
        ),
        {
            "logIndex": 3,
            "runId": "run-s",
            "digest": sha256_name(merged),
            "kind": "merged",
            "shardIndex": None,
            "shardCount": 2,
            "platform": "simulated",
            "corpusChecksum": header.corpus_checksum,
            "evaluationDigest": header.evaluation_digest,
            "resultDigest": header.result_digest,
            "corpusExport": None,
        },
    ]


def test_a_merged_envelope_of_mixed_platforms_is_shown_as_mixed(
    panel_server: PanelServer,
) -> None:
    genuine = Envelope.model_validate_json(make_envelope("acme", "run-m", seed=2, shard=(0, 2)))
    hardware = genuine.model_copy(update={"platform": "sev-snp"}).canonical_bytes()
    simulated = make_envelope("acme", "run-m", seed=2, shard=(1, 2))
    merged = make_merged_envelope("acme", "run-m", [hardware, simulated])
    panel_server.publish(merged)

    (run,) = panel_server.runs()
    assert (run["kind"], run["shardCount"], run["platform"]) == (
        "merged",
        2,
        "mixed: sev-snp, simulated",
    )


def test_an_unparsable_stored_envelope_is_a_problem_not_a_run(panel_server: PanelServer) -> None:
    data = make_envelope("acme", "run-x", seed=3)
    panel_server.publish(data)
    with sqlite3.connect(panel_server.storage.path) as db:  # a damaged row, as on disk
        db.execute("UPDATE envelopes SET data = ?", (b'{"kind": "Other"}',))

    (run,) = panel_server.runs()
    assert run["problem"].startswith("the stored envelope does not parse: ")
    assert "kind" not in run
