"""The publisher, `tenant fetch` and KDS against servers that answer with hostile bodies.

Each ends with its command's error class, keeps nothing it should not (no checkpoint kept by
`tenant fetch`, the envelope kept in the publisher's spool), and reads at most the answer's
cap (tracemalloc peak).
"""

from __future__ import annotations

import base64
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.tenant.errors import TamperingError
from attestation.tenant.fetch import fetch_tenant
from attestation.tenant.http import RetryPolicy
from attestation.transparency.checkpoint import Checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, node_hash
from runner.cli import main as runner_main
from runner.errors import EvidenceError, PublishError
from runner.evidence.kds import KdsClient
from runner.publish.checkpoint import CheckpointSigner
from runner.publish.client import publish_envelope
from runner.publish.spool import Spool
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


def test_a_deeply_nested_proof_is_tampering_not_a_crash(tmp_path: Path) -> None:
    """A fetch from a kept checkpoint of size 1 asks for the inclusion proof of its last entry
    (it gives the kept tree's right edge); the proof is 10,000 levels deep."""
    signer = CheckpointSigner("log.example", Ed25519PrivateKey.generate())
    entries = [
        LogEntry(tenant="acme", run_id=f"r{n}", envelope="sha256:" + f"{n}" * 64).to_bytes()
        for n in (1, 2)
    ]
    origin = "log.example/t/acme"
    kept = signer.sign(Checkpoint(origin=origin, size=1, root=leaf_hash(entries[0])))
    note = signer.sign(Checkpoint(origin=origin, size=2, root=node_hash(*map(leaf_hash, entries))))
    page = json.dumps(
        {"start": 0, "entries": [base64.b64encode(entry).decode() for entry in entries]}
    ).encode()
    routes = {
        f"{BASE}/log/checkpoint": hs.answer(200, note.encode()),
        f"{BASE}/log/entries": hs.answer(200, page),
    }
    out = tmp_path / "fetched"
    (tmp_path / "kept.checkpoint").write_text(kept)
    with (
        hs.HostileServer(hs.route(routes, hs.nested_json(10_000))) as server,
        pytest.raises(TamperingError, match="nests deeper than 32 levels"),
    ):
        fetch_tenant(
            server=server.url,
            token="arp_t",
            tenant="acme",
            out_dir=out,
            log_key=signer.verifier_key,
            last_checkpoint=str(tmp_path / "kept.checkpoint"),
            retry=FAST,
        )
    assert not (out / "checkpoint").exists()


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
