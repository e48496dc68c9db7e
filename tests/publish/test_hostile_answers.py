"""The publisher, `tenant fetch` and KDS against servers that answer with hostile bodies.

Each ends with its command's error class, keeps nothing it should not (no checkpoint kept by
`tenant fetch`, the envelope kept in the publisher's spool), and reads at most the answer's
cap (tracemalloc peak).
"""

from __future__ import annotations

import socket
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.tenant import tlog
from attestation.tenant.errors import ServiceUnavailableError, TamperingError
from attestation.tenant.fetch import fetch_tenant
from attestation.tenant.http import Limits, RetryPolicy
from attestation.transparency.checkpoint import Checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, node_hash
from attestation.transparency.tiles import encode_bundle
from runner.cli import main as runner_main
from runner.errors import EvidenceError, PublishError
from runner.evidence.kds import KdsClient
from runner.publish.client import publish_envelope
from runner.publish.spool import Spool
from runner.service.log.checkpoint import CheckpointSigner
from tests import hostile_server as hs

MiB = 1024 * 1024
FAST = RetryPolicy(attempts=2, backoff_factor=0.01, backoff_max=0.05)
BASE = "/v1/tenants/acme"


def _peak(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _fetch(server: hs.HostileServer, out: Path) -> None:
    key = CheckpointSigner("log.example", Ed25519PrivateKey.generate()).verifier_key
    fetch_tenant(
        server=server.url, token="arp_t", tenant="acme", out_dir=out, log_key=key, retry=FAST
    )


@pytest.mark.parametrize(
    "behaviour",
    [hs.declared(512 * MiB), hs.endless_chunked, hs.undeclared_stream],
    ids=["declares-512MiB", "endless", "undeclared"],
)
def test_a_giant_checkpoint_is_tampering_before_any_signature_check(
    tmp_path: Path, behaviour: hs.Behaviour
) -> None:
    out = tmp_path / "fetched"
    with hs.HostileServer(behaviour) as server:

        def fetch() -> None:
            with pytest.raises(TamperingError, match="65536-byte limit"):
                _fetch(server, out)

        peak = _peak(fetch)
    assert peak < 4 * MiB
    assert not (out / "checkpoint").exists()


def _kept_one_of_two(tmp_path: Path, hash_tile: hs.Behaviour) -> Callable[[], None]:
    """A fetch from a kept checkpoint of size 1 to one of size 2: it reads the kept tree's
    right edge from the level-0 hash tile, which ``hash_tile`` answers."""
    signer = CheckpointSigner("log.example", Ed25519PrivateKey.generate())
    entries = [
        LogEntry(tenant="acme", run_id=f"r{n}", envelope="sha256:" + f"{n}" * 64).to_bytes()
        for n in (1, 2)
    ]
    origin = "log.example/t/acme"
    kept = signer.sign(Checkpoint(origin=origin, size=1, root=leaf_hash(entries[0])))
    note = signer.sign(Checkpoint(origin=origin, size=2, root=node_hash(*map(leaf_hash, entries))))
    routes = {
        f"{BASE}/tlog/checkpoint": hs.answer(200, note.encode()),
        f"{BASE}/tlog/tile/entries/000.p/2": hs.answer(200, encode_bundle(entries)),
    }
    (tmp_path / "kept.checkpoint").write_text(kept)
    server = hs.HostileServer(hs.route(routes, hash_tile))

    def fetch() -> None:
        with server:
            fetch_tenant(
                server=server.url,
                token="arp_t",
                tenant="acme",
                out_dir=tmp_path / "fetched",
                log_key=signer.verifier_key,
                last_checkpoint=str(tmp_path / "kept.checkpoint"),
                retry=FAST,
            )

    return fetch


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        (hs.endless_chunked, "more than the 8192-byte limit"),
        (hs.declared(512 * MiB), "over the 8192-byte limit"),
    ],
    ids=["endless", "declares-512MiB"],
)
def test_an_endless_hash_tile_is_cut_at_its_bound(
    tmp_path: Path, behaviour: hs.Behaviour, message: str
) -> None:
    """The server streams the hash tile without end: a hash tile is at most 256 hashes."""
    fetch = _kept_one_of_two(tmp_path, behaviour)

    def refused() -> None:
        with pytest.raises(TamperingError, match=message):
            fetch()

    peak = _peak(refused)
    assert peak < 4 * MiB
    assert not (tmp_path / "fetched" / "checkpoint").exists()


def test_a_hash_tile_dripped_byte_by_byte_meets_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tile sent a byte at a time: its deadline (60 s; 1 s here) ends the call."""
    monkeypatch.setattr(tlog, "HASH_TILE_ANSWER", Limits(max_bytes=8192, deadline=1.0))

    def drip(conn: socket.socket, _request: bytes, server: hs.HostileServer) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n")
        server.send_slowly(conn, bytes(64), 0.2)

    fetch = _kept_one_of_two(tmp_path, drip)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailableError, match="publication service unreachable"):
        fetch()
    assert time.monotonic() - started < 8  # the deadline, not the 13 s of the drip
    assert not (tmp_path / "fetched" / "checkpoint").exists()


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        (hs.declared(512 * MiB, status=201), "over the 65536-byte limit"),
        (hs.endless_chunked, "more than the 65536-byte limit"),
        (
            hs.answer(307, headers={"Location": "https://elsewhere.example/v1/"}),
            "which this call does not follow",
        ),
        (hs.answer(201, b"[" * 5000 + b"]" * 5000), "nests deeper than 32 levels"),
    ],
    ids=["receipt-512MiB", "endless-receipt", "redirected-put", "nested-receipt"],
)
def test_a_hostile_upload_answer_fails_and_keeps_the_envelope_spooled(
    tmp_path: Path, envelope_for: Callable[..., bytes], behaviour: hs.Behaviour, message: str
) -> None:
    data = envelope_for("acme", "run-1", 1)
    spool = tmp_path / "spool"
    with hs.HostileServer(behaviour) as server:

        def publish() -> None:
            with pytest.raises(PublishError, match=message):
                publish_envelope(
                    server.url,
                    data,
                    tenant="acme",
                    run_id="run-1",
                    token="arp_t",
                    spool_dir=spool,
                    retry=FAST,
                )

        peak = _peak(publish)
    assert peak < 4 * MiB + 4 * len(data)
    assert [item.run_id for item in Spool(spool).items()] == ["run-1"]


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        (hs.declared(512 * MiB), "over the 16384-byte limit"),
        (hs.endless_chunked, "more than the 16384-byte limit"),
        (hs.answer(429, headers={"Retry-After": "86400"}), r"86400 s \(more than 120 s\)"),
        (hs.answer(302, headers={"Location": "http://203.0.113.7/vcek"}), "not 203.0.113.7"),
    ],
    ids=["512MiB", "endless", "retry-after-a-day", "redirect-to-http"],
)
def test_a_hostile_kds_answer_is_an_evidence_error(behaviour: hs.Behaviour, message: str) -> None:
    with hs.HostileServer(behaviour) as server:
        client = KdsClient(server.url, deadline=30, sleep=lambda _seconds: None)

        def get() -> None:
            with pytest.raises(EvidenceError, match=message):
                client.get("/vcek/v1/Milan/cert_chain")

        peak = _peak(get)
    assert peak < 4 * MiB


def test_tenant_fetch_trusts_another_ca_only_when_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    context, ca = hs.mint_tls(tmp_path)
    token = tmp_path / "token"
    token.write_text("arp_t\n", encoding="utf-8")
    key = CheckpointSigner("log.example", Ed25519PrivateKey.generate()).verifier_key
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca))  # never used
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    with hs.HostileServer(hs.answer(404, b"down"), tls=context) as server:
        args = ["tenant", "fetch", "--server", server.url, "--token-file", str(token)]
        args += ["--tenant", "acme", "--out", str(tmp_path / "out"), "--log-key", key.encode()]
        assert runner_main(args) == 6
        assert "TLS failed" in capsys.readouterr().err
        assert server.requests == []
        assert runner_main([*args, "--ca-bundle", str(ca)]) == 6
        assert "answered HTTP 404: down" in capsys.readouterr().err
        assert len(server.requests) >= 1
