"""`tenant fetch` in bulk: envelopes downloaded several at a time with the same result as one
at a time, the log proven from its entries (no proof per entry), the first failure in log
order reported whatever the timing, nothing kept after a failure."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.cli import main
from runner.publish.checkpoint import CheckpointSigner
from runner.publish.client import publish_envelope
from runner.publish.storage import Storage
from tenant import fetch as tenant_fetch
from tenant.errors import TamperingError, TenantUsageError
from tenant.fetch import fetch_tenant
from tenant.http import RetryPolicy

from .conftest import Service, sha256_name

FAST = RetryPolicy(attempts=2, backoff_factor=0.01, backoff_max=0.05)
BASE = "/v1/tenants/acme"


class Recorder:
    """An ASGI wrapper that records the paths asked for and can answer some of them itself,
    after a delay (an operator's server in front of the real one)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []
        self.answers: dict[str, tuple[float, int, bytes]] = {}
        self.rewrite_entries: Callable[[list[str]], list[str]] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] == "GET":
            self.paths.append(path)
        if path in self.answers:
            delay, status, body = self.answers[path]
            await asyncio.sleep(delay)
            await _answer(send, status, body)
        elif path == f"{BASE}/log/entries" and self.rewrite_entries is not None:
            await self._rewritten(scope, receive, send, self.rewrite_entries)
        else:
            await self.app(scope, receive, send)

    async def _rewritten(
        self, scope: Any, receive: Any, send: Any, rewrite: Callable[[list[str]], list[str]]
    ) -> None:
        parts: list[bytes] = []
        status = 500

        async def keep(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                parts.append(message.get("body", b""))

        await self.app(scope, receive, keep)
        page = json.loads(b"".join(parts))
        page["entries"] = rewrite(page["entries"])
        await _answer(send, status, json.dumps(page).encode())

    def envelope_path(self, data: bytes) -> str:
        return f"{BASE}/envelopes/{sha256_name(data)}"


async def _answer(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def recorded(
    storage: Storage, signer: CheckpointSigner, serve: Any
) -> Iterator[tuple[Service, Recorder]]:
    wrappers: list[Recorder] = []

    def wrap(app: Any) -> Recorder:
        wrappers.append(Recorder(app))
        return wrappers[0]

    with serve(storage, signer, wrap=wrap) as service:
        yield service, wrappers[0]


def publish(
    service: Service, envelope_for: Callable[..., bytes], seeds: range, spool: Path
) -> list[bytes]:
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


def fetch(service: Service, out: Path, *, jobs: int) -> tenant_fetch.FetchReport:
    return fetch_tenant(
        server=service.url,
        token=service.token("acme", "tenant"),
        tenant="acme",
        out_dir=out,
        log_key=service.verifier_key,
        retry=FAST,
        jobs=jobs,
    )


def stored(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


def test_eight_at_a_time_stores_what_one_at_a_time_stores(
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, recorder = recorded
    monkeypatch.setattr(tenant_fetch, "PAGE", 7)  # pages of 7 entries: 20 envelopes = 3 pages
    synced: list[Path] = []
    monkeypatch.setattr(tenant_fetch, "fsync_directory", synced.append)
    published = publish(service, envelope_for, range(20), tmp_path / "spool")
    outs = {jobs: tmp_path / f"jobs-{jobs}" for jobs in (1, 8)}
    for jobs, out in outs.items():
        recorder.paths.clear()
        synced.clear()
        report = fetch(service, out, jobs=jobs)
        assert report.new_envelopes == tuple(map(sha256_name, published))
        # checkpoint, 3 pages of entries, one GET per envelope: no proof at all
        assert recorder.paths[:4] == [f"{BASE}/log/checkpoint"] + [f"{BASE}/log/entries"] * 3
        assert sorted(recorder.paths[4:]) == sorted(map(recorder.envelope_path, published))
        assert synced == [out / "envelopes"] * 3  # one directory sync per page of envelopes
    more = publish(service, envelope_for, range(20, 30), tmp_path / "spool")
    for jobs, out in outs.items():
        recorder.paths.clear()
        report = fetch(service, out, jobs=jobs)
        assert (report.previous_size, report.size) == (20, 30)
        assert report.new_envelopes == tuple(map(sha256_name, more))
        # the kept tree's last entry and its inclusion proof give the kept right edge; the
        # entries 19..29 fit in 2 pages of 7
        assert recorder.paths[:4] == [
            f"{BASE}/log/checkpoint",
            f"{BASE}/log/entries",
            f"{BASE}/log/proof/inclusion",
            f"{BASE}/log/entries",
        ]
        assert sorted(recorder.paths[4:]) == sorted(map(recorder.envelope_path, more))
    assert stored(outs[1]) == stored(outs[8])
    index = json.loads((outs[8] / "index.json").read_text())
    assert index["29"] == {"digest": sha256_name(more[-1]), "runId": "run-29", "shard": None}


def test_the_first_failure_in_log_order_is_reported_and_nothing_is_kept(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, recorder = recorded
    published = publish(service, envelope_for, range(16), tmp_path / "spool")
    # Entry 3's envelope comes late and with other bytes; entry 9's is gone at once.
    recorder.answers[recorder.envelope_path(published[3])] = (0.5, 200, published[4])
    recorder.answers[recorder.envelope_path(published[9])] = (0.0, 404, b"{}")
    out = tmp_path / "store"
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=8)
    assert str(caught.value) == (f"envelope {sha256_name(published[3])} (entry 3) has other bytes")
    assert sorted(path.name for path in out.iterdir()) == ["envelopes"]  # no index, checkpoint
    # with entry 3 answered, entry 9 is the first failure
    del recorder.answers[recorder.envelope_path(published[3])]
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=8)
    assert str(caught.value) == (
        f"envelope {sha256_name(published[9])} of log entry 9 is gone: the signed log "
        "includes it, so it was removed after publication"
    )
    assert not (out / "checkpoint").exists()


def test_entries_that_do_not_give_the_signed_root_are_tampering(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(5), tmp_path / "spool")
    recorder.rewrite_entries = lambda entries: [entries[1], entries[0], *entries[2:]]
    out = tmp_path / "store"
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=4)
    assert str(caught.value) == (
        "the entries served do not give the root of the signed checkpoint of size 5: the "
        "server shows another log than the one it signed"
    )
    assert not out.exists()
    assert not any(path.endswith("/log/proof/inclusion") for path in recorder.paths)
    assert not any("/envelopes/" in path for path in recorder.paths)  # nothing downloaded


def test_the_kept_edge_must_be_the_servers(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(6), tmp_path / "spool")
    out = tmp_path / "store"
    fetch(service, out, jobs=2)
    publish(service, envelope_for, range(6, 9), tmp_path / "spool")
    # the server answers another entry 5 than the one the kept checkpoint holds
    recorder.rewrite_entries = lambda entries: [
        base64.b64encode(base64.b64decode(entries[0]).replace(b"run-5", b"run-7")).decode(),
        *entries[1:],
    ]
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=2)
    assert str(caught.value) == (
        "checkpoint of size 9 is not consistent with the kept checkpoint of size 6: entries "
        "were removed, reordered or rewritten, or the log forked"
    )
    assert (out / "checkpoint").read_text().split("\n")[1] == "6"


@pytest.mark.parametrize("jobs", ["0", "65", "x", "-1"])
def test_jobs_out_of_range_is_a_usage_error(
    jobs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("arp_t\n")
    argv = ["tenant", "fetch", "--server", "http://127.0.0.1:9", "--token-file", str(token)]
    argv += ["--tenant", "acme", "--out", str(tmp_path / "out"), f"--jobs={jobs}"]
    assert main(argv) == 9
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --jobs: not a whole number from 1 to 64: {jobs!r}"
    )
    with pytest.raises(TenantUsageError, match=r"^--jobs 0: must be between 1 and 64$"):
        fetch_tenant(
            server="http://127.0.0.1:9", token="t", tenant="acme", out_dir=tmp_path, jobs=0
        )
