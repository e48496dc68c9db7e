"""`tenant fetch` in bulk: envelopes downloaded several at a time, by threads of the fetching
process or by worker processes, with the same result as one at a time; the log proven from
its entries (no proof per entry), the first failure in log order reported whatever the
timing, nothing kept after a failure, and a worker process that dies an error."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
import requests

from attestation.tenant import fetch as tenant_fetch
from attestation.tenant import log_state
from attestation.tenant.errors import FetchWorkerError, TamperingError, TenantUsageError
from attestation.tenant.fetch import fetch_tenant
from attestation.tenant.http import RetryPolicy
from attestation.transparency.entries import MAX_ENTRY_BYTES, LogEntry
from attestation.transparency.tiles import decode_bundle, encode_bundle
from runner.cli import main
from runner.exit_codes import exit_code_for
from runner.publish.client import publish_envelope
from runner.service import bundles
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import Storage

from .conftest import Service, sha256_name

FAST = RetryPolicy(attempts=2, backoff_factor=0.01, backoff_max=0.05)
BASE = "/v1/tenants/acme"
BUNDLE_PATH = f"{BASE}/log/envelopes"


Bundle = list[str | None]


class Recorder:
    """An ASGI wrapper that records the paths asked for (and the ranges of the bundles) and can
    answer some of them itself, after a delay, or rewrite the real answer (an operator's server
    in front of the real one)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []
        self.bundles: list[tuple[int, int]] = []
        self.answers: dict[str, tuple[float, int, bytes]] = {}
        #: tlog-tiles path (after ``tlog/``) -> rewrite of the real tile's bytes
        self.rewrite_tiles: dict[str, Callable[[bytes], bytes]] = {}
        #: start -> (delay, rewrite of that bundle's envelopes)
        self.rewrite_bundles: dict[int, tuple[float, Callable[[Bundle], Bundle]]] = {}
        #: bundle requests being answered now, and the most at any one time
        self.bundles_in_flight = 0
        self.most_bundles_in_flight = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] == "GET":
            self.paths.append(path)
        query = dict(parse_qsl(scope["query_string"].decode()))
        if path != BUNDLE_PATH:
            await self._respond(path, query, scope, receive, send)
            return
        self.bundles.append((int(query["start"]), int(query["end"])))
        self.bundles_in_flight += 1  # one event loop answers them all: no lock needed
        self.most_bundles_in_flight = max(self.most_bundles_in_flight, self.bundles_in_flight)
        try:
            await self._respond(path, query, scope, receive, send)
        finally:
            self.bundles_in_flight -= 1

    async def _respond(
        self, path: str, query: dict[str, str], scope: Any, receive: Any, send: Any
    ) -> None:
        if path in self.answers:
            delay, status, body = self.answers[path]
            await asyncio.sleep(delay)
            await _answer(send, status, body)
        elif path.removeprefix(f"{BASE}/tlog/") in self.rewrite_tiles:
            await self._rewritten(
                scope, receive, send, self.rewrite_tiles[path.removeprefix(f"{BASE}/tlog/")]
            )
        elif path == BUNDLE_PATH and int(query["start"]) in self.rewrite_bundles:
            delay, rewrite = self.rewrite_bundles[int(query["start"])]
            await asyncio.sleep(delay)
            await self._rewritten(
                scope,
                receive,
                send,
                lambda body: json.dumps(
                    {**json.loads(body), "envelopes": rewrite(json.loads(body)["envelopes"])}
                ).encode(),
            )
        else:
            await self.app(scope, receive, send)

    async def _rewritten(
        self,
        scope: Any,
        receive: Any,
        send: Any,
        rewrite: Callable[[bytes], bytes],
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
        await _answer(send, status, rewrite(b"".join(parts)))

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


class StoredHere:
    """Counts the bundles this process downloads and stores itself (a worker process of the
    pool is a fresh interpreter here, since the test's server thread rules out a fork: it never
    counts)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bundles = 0
        real = tenant_fetch._download_and_store

        def counting(*args: Any) -> list[int | None] | None:
            self.bundles += 1
            return real(*args)

        monkeypatch.setattr(tenant_fetch, "_download_and_store", counting)


@pytest.fixture
def stored_here(monkeypatch: pytest.MonkeyPatch) -> StoredHere:
    return StoredHere(monkeypatch)


def in_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fetch from here on stores its bundles in threads of this process, whatever their
    number."""
    monkeypatch.setattr(tenant_fetch, "POOL_MIN_BUNDLES", 10**9)


@pytest.mark.parametrize("pooled", [True, False], ids=["processes", "threads"])
def test_eight_at_a_time_stores_what_one_at_a_time_stores(  # noqa: PLR0917 - fixtures
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stored_here: StoredHere,
    pooled: bool,
) -> None:
    service, recorder = recorded
    monkeypatch.setattr(tenant_fetch, "PAGE", 7)  # pages of 7 entries: 20 envelopes = 3 pages
    monkeypatch.setattr(tenant_fetch, "BUNDLE", 3)  # at most 3 envelopes asked for at once
    if not pooled:
        in_threads(monkeypatch)
    synced: list[Path] = []
    monkeypatch.setattr(tenant_fetch, "fsync_directory", synced.append)
    published = publish(service, envelope_for, range(20), tmp_path / "spool")
    outs = {jobs: tmp_path / f"jobs-{jobs}" for jobs in (1, 8)}
    for jobs, out in outs.items():
        recorder.paths.clear()
        recorder.bundles.clear()
        synced.clear()
        stored_here.bundles = 0
        report = fetch(service, out, jobs=jobs)
        assert report.new_envelopes == tuple(map(sha256_name, published))
        # checkpoint, the entries' bundle (a partial tile of 20), then the envelopes in
        # bundles: no proof at all
        assert recorder.paths[:2] == [
            f"{BASE}/tlog/checkpoint",
            f"{BASE}/tlog/tile/entries/000.p/20",
        ]
        assert recorder.paths[2:] == [BUNDLE_PATH] * 8
        # each page's entries in bundles of 3 (7 = 3 + 3 + 1), never across a page
        assert sorted(recorder.bundles) == [
            (0, 3),
            (3, 6),
            (6, 7),
            (7, 10),
            (10, 13),
            (13, 14),
            (14, 17),
            (17, 20),
        ]
        assert synced == [out / "envelopes"] * 3  # one directory sync per page of envelopes
        # with 8 at a time, worker processes store the 8 bundles, or else threads of this one
        assert stored_here.bundles == (0 if pooled and jobs == 8 else 8)
    more = publish(service, envelope_for, range(20, 30), tmp_path / "spool")
    for jobs, out in outs.items():
        recorder.paths.clear()
        recorder.bundles.clear()
        report = fetch(service, out, jobs=jobs)
        assert (report.previous_size, report.size) == (20, 30)
        assert report.new_envelopes == tuple(map(sha256_name, more))
        # the kept right edge (subtrees of 16 and 4 leaves) from the level-0 hash tile, the
        # entries 20..29 from the entry bundle, both partial tiles of the signed tree of 30
        assert recorder.paths[:3] == [
            f"{BASE}/tlog/checkpoint",
            f"{BASE}/tlog/tile/0/000.p/30",
            f"{BASE}/tlog/tile/entries/000.p/30",
        ]
        assert sorted(recorder.bundles) == [(20, 23), (23, 26), (26, 27), (27, 30)]
    assert stored(outs[1]) == stored(outs[8])
    index = json.loads((outs[8] / "index.json").read_text())
    assert index["29"] == {"digest": sha256_name(more[-1]), "runId": "run-29", "shard": None}


def test_the_pool_makes_at_most_jobs_requests_at_once(
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stored_here: StoredHere,
) -> None:
    service, recorder = recorded
    monkeypatch.setattr(tenant_fetch, "BUNDLE", 2)
    published = publish(service, envelope_for, range(12), tmp_path / "spool")
    for start in range(0, 12, 2):  # every answer takes a while, so that requests overlap
        recorder.rewrite_bundles[start] = (0.3, lambda envelopes: envelopes)
    report = fetch(service, tmp_path / "store", jobs=2)
    assert report.new_envelopes == tuple(map(sha256_name, published))
    assert stored_here.bundles == 0  # 6 bundles, 2 at a time: worker processes stored them
    assert sorted(recorder.bundles) == [(start, start + 2) for start in range(0, 12, 2)]
    assert 1 <= recorder.most_bundles_in_flight <= 2


def test_a_bundle_cut_short_is_asked_again_from_where_it_stopped(
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, recorder = recorded
    published = publish(service, envelope_for, range(7), tmp_path / "spool")
    # the service's byte bound lets 2 envelopes through per answer
    monkeypatch.setattr(bundles, "MAX_BUNDLE_BYTES", 2 * max(map(len, published)))
    out = tmp_path / "store"
    fetch(service, out, jobs=1)
    assert recorder.bundles == [(0, 7), (2, 7), (4, 7), (6, 7)]
    assert stored(out) == stored(_fetched_one_by_one(service, recorder, tmp_path / "one"))


def _fetched_one_by_one(service: Service, recorder: Recorder, out: Path) -> Path:
    """A store fetched from the service as one without the bundle route: one GET per envelope."""
    recorder.answers[BUNDLE_PATH] = (0.0, 404, b'{"error":"not found","reason":"not-found"}')
    recorder.paths.clear()
    try:
        report = fetch(service, out, jobs=3)
    finally:
        del recorder.answers[BUNDLE_PATH]
    envelope_paths = [path for path in recorder.paths if "/envelopes/" in path]
    assert len(envelope_paths) == len(report.new_envelopes)
    assert sorted(envelope_paths) == sorted(
        f"{BASE}/envelopes/{digest}" for digest in report.new_envelopes
    )
    return out


def test_a_service_without_the_bundle_route_is_asked_for_each_envelope(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(5), tmp_path / "spool")
    one_by_one = _fetched_one_by_one(service, recorder, tmp_path / "one")
    assert stored(one_by_one) == stored(fetch(service, tmp_path / "bulk", jobs=3).out_dir)


@pytest.mark.parametrize("pooled", [True, False], ids=["processes", "threads"])
def test_the_first_failure_in_log_order_is_reported_and_nothing_is_kept(  # noqa: PLR0917
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stored_here: StoredHere,
    pooled: bool,
) -> None:
    service, recorder = recorded
    monkeypatch.setattr(tenant_fetch, "BUNDLE", 3)
    if not pooled:
        in_threads(monkeypatch)
    published = publish(service, envelope_for, range(16), tmp_path / "spool")
    # The bundle with entry 3 comes late and holds entry 4's bytes for it; entry 9 is gone
    # from its bundle at once. Both are among the first 4 bundles, which the 4 workers take.
    recorder.rewrite_bundles[3] = (0.5, lambda envelopes: [envelopes[1], *envelopes[1:]])
    recorder.rewrite_bundles[9] = (0.0, lambda envelopes: [None, *envelopes[1:]])
    out = tmp_path / "store"
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=4)
    assert str(caught.value) == (f"envelope {sha256_name(published[3])} (entry 3) has other bytes")
    assert sorted(path.name for path in out.iterdir()) == ["envelopes"]  # no index, checkpoint
    assert not list((out / "envelopes").glob(".*"))  # no temporary file either
    # with entry 3 answered, entry 9 is the first failure
    del recorder.rewrite_bundles[3]
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=4)
    assert str(caught.value) == (
        f"envelope {sha256_name(published[9])} of log entry 9 is gone: the signed log "
        "includes it, so it was removed after publication"
    )
    assert not (out / "checkpoint").exists()
    # an interrupted fetch is simply repeated: the same store as a fetch that never failed
    del recorder.rewrite_bundles[9]
    report = fetch(service, out, jobs=4)
    assert report.new_envelopes == tuple(map(sha256_name, published))
    assert stored(out) == stored(fetch(service, tmp_path / "clean", jobs=4).out_dir)
    assert (stored_here.bundles == 0) == pooled


@pytest.mark.parametrize("pooled", [True, False], ids=["processes", "threads"])
def test_no_download_starts_after_a_bundle_failed(
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pooled: bool,
) -> None:
    service, recorder = recorded
    monkeypatch.setattr(tenant_fetch, "BUNDLE", 3)
    if not pooled:
        in_threads(monkeypatch)
    published = publish(service, envelope_for, range(18), tmp_path / "spool")
    # The first bundle is rewritten at once; every other one takes a second, so the failure
    # is known before either worker is free for a third bundle.
    recorder.rewrite_bundles[0] = (0.0, lambda envelopes: [envelopes[0], None, envelopes[2]])
    for start in range(3, 18, 3):
        recorder.rewrite_bundles[start] = (1.0, lambda envelopes: envelopes)
    with pytest.raises(TamperingError) as caught:
        fetch(service, tmp_path / "store", jobs=2)
    assert str(caught.value) == (
        f"envelope {sha256_name(published[1])} of log entry 1 is gone: the signed log "
        "includes it, so it was removed after publication"
    )
    # the first bundle, and at most the one the other worker had already asked for
    assert set(recorder.bundles) <= {(0, 3), (3, 6)}
    assert (0, 3) in recorder.bundles


def test_the_command_forks_its_workers_and_stores_what_one_at_a_time_stores(
    served_process: Service, envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    """`tenant fetch` as a command runs one thread, so its workers are forked: the pooled path
    as tenants run it, against the service in a process of its own."""
    service = served_process
    published = publish(service, envelope_for, range(3 * tenant_fetch.BUNDLE), tmp_path / "spool")
    token = tmp_path / "token"
    token.write_text(service.token("acme", "tenant") + "\n")
    out = tmp_path / "store"
    argv = [sys.executable, "-m", "runner", "tenant", "fetch", "--server", service.url]
    argv += ["--token-file", str(token), "--tenant", "acme", "--out", str(out), "--jobs", "2"]
    argv += ["--log-key", service.verifier_key.encode()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"verified log of {len(published)} entries (was 0); {len(published)} new envelope(s) "
        f"in {out / 'envelopes'}\n"
    )
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    workers = [event for event in events if event["event"] == "tenant_fetch_workers"]
    assert [(e["processes"], e["start"], e["bundles"]) for e in workers] == [(2, "fork", 3)]
    assert stored(out) == stored(fetch(service, tmp_path / "one", jobs=1).out_dir)


class _DiesWhenUnpickled(LogEntry):
    """A log entry that ends the process unpickling it (a worker process that dies)."""

    def __reduce_ex__(self, _protocol: Any) -> tuple[Any, tuple[int]]:
        return os._exit, (70,)


def _a_worker_dies_on_entry(monkeypatch: pytest.MonkeyPatch, doomed: int) -> None:
    real = log_state._log_entry

    def log_entry(raw: bytes, position: int, tenant: str) -> LogEntry:
        entry = real(raw, position, tenant)
        if position != doomed:
            return entry
        return _DiesWhenUnpickled(entry.tenant, entry.run_id, entry.envelope)

    monkeypatch.setattr(log_state, "_log_entry", log_entry)


def test_a_worker_process_that_dies_is_an_error_never_a_fetch(
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service, _recorder = recorded
    monkeypatch.setattr(tenant_fetch, "BUNDLE", 3)
    published = publish(service, envelope_for, range(15), tmp_path / "spool")
    _a_worker_dies_on_entry(monkeypatch, 10)  # in the fourth of five bundles
    out = tmp_path / "store"
    # What a worker killed in the middle of a write leaves (the executor kills the others
    # when one dies), and a file of no envelope of this fetch
    name = f"sha256-{sha256_name(published[4])[7:]}.json"
    (out / "envelopes").mkdir(parents=True)
    (out / "envelopes" / f".{name}.0123456789ab.tmp").write_bytes(b"half")
    (out / "envelopes" / ".other.json.0123456789ab.tmp").write_bytes(b"not ours")
    with pytest.raises(FetchWorkerError) as caught:
        fetch(service, out, jobs=2)
    assert str(caught.value).startswith("a worker process of the fetch died (")
    assert str(caught.value).endswith(
        "): the fetch is incomplete, and the kept index and checkpoint are unchanged"
    )
    assert exit_code_for(caught.value) == 9
    assert sorted(path.name for path in out.iterdir()) == ["envelopes"]  # no index, checkpoint
    # no temporary file of this fetch's envelopes is left, and nothing else is removed
    assert [path.name for path in (out / "envelopes").glob(".*")] == [
        ".other.json.0123456789ab.tmp"
    ]
    (out / "envelopes" / ".other.json.0123456789ab.tmp").unlink()
    # the same through the command line: exit 9, and nothing recorded as fetched
    token = tmp_path / "token"
    token.write_text(service.token("acme", "tenant") + "\n")
    argv = ["tenant", "fetch", "--server", service.url, "--token-file", str(token)]
    argv += ["--tenant", "acme", "--out", str(out), "--jobs", "2"]
    argv += ["--log-key", service.verifier_key.encode()]
    assert main(argv) == 9
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1].startswith("error: a worker process of the fetch died (")
    assert sorted(path.name for path in out.iterdir()) == ["envelopes"]
    # the envelopes a worker did store before are the published ones, whole
    kept = {path.name: path.read_bytes() for path in (out / "envelopes").iterdir()}
    by_name = {f"sha256-{sha256_name(data)[7:]}.json": data for data in published}
    assert all(by_name[name] == data for name, data in kept.items())


@pytest.mark.parametrize(
    ("rewrite", "message"),
    [
        (
            lambda envelopes: [],
            "the envelopes of log entries 0..3 are missing from the server's answer",
        ),
        (
            lambda envelopes: [*envelopes, envelopes[0]],
            "the envelopes of log entries 0..3 are missing from the server's answer",
        ),
        (
            lambda envelopes: [envelopes[0], "not base64!", *envelopes[2:]],
            "the envelope of log entry 1 is malformed: Only base64 data is allowed",
        ),
    ],
)
def test_a_bundle_that_is_no_answer_to_the_question_is_tampering(
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    rewrite: Callable[[Bundle], Bundle],
    message: str,
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(4), tmp_path / "spool")
    recorder.rewrite_bundles[0] = (0.0, rewrite)
    with pytest.raises(TamperingError) as caught:
        fetch(service, tmp_path / "store", jobs=2)
    assert str(caught.value) == message
    assert not (tmp_path / "store" / "checkpoint").exists()


def test_entries_that_do_not_give_the_signed_root_are_tampering(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(5), tmp_path / "spool")

    def swap_first_two(bundle: bytes) -> bytes:
        entries = decode_bundle(bundle, max_entry=MAX_ENTRY_BYTES)
        return encode_bundle([entries[1], entries[0], *entries[2:]])

    recorder.rewrite_tiles["tile/entries/000.p/5"] = swap_first_two
    out = tmp_path / "store"
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=4)
    assert str(caught.value) == (
        "the entries served do not give the root of the signed checkpoint of size 5: the "
        "server shows another log than the one it signed"
    )
    assert not out.exists()
    assert not any("envelopes" in path for path in recorder.paths)  # nothing downloaded


def test_the_kept_edge_must_be_the_servers(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(6), tmp_path / "spool")
    out = tmp_path / "store"
    fetch(service, out, jobs=2)
    publish(service, envelope_for, range(6, 9), tmp_path / "spool")
    # the kept tree of 6 is the subtrees [0, 4) and [4, 6): the server changes leaf hash 5
    recorder.rewrite_tiles["tile/0/000.p/9"] = lambda tile: (
        tile[: 5 * 32] + bytes([tile[5 * 32] ^ 1]) + tile[5 * 32 + 1 :]
    )
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=2)
    assert str(caught.value) == (
        "checkpoint of size 9 is not consistent with the kept checkpoint of size 6: entries "
        "were removed, reordered or rewritten, or the log forked (the hash tiles "
        "tile/0/000.p/9 do not give the kept root: the log no longer holds the kept tree, or "
        "the service served a wrong tile)"
    )
    assert (out / "checkpoint").read_text().split("\n")[1] == "6"
    # a new entry rewritten: the kept edge holds, the new root does not
    recorder.rewrite_tiles = {
        "tile/entries/000.p/9": lambda bundle: bundle.replace(b"run-7", b"run-X")
    }
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=2)
    assert str(caught.value) == (
        "checkpoint of size 9 is not consistent with the kept checkpoint of size 6: entries "
        "were removed, reordered or rewritten, or the log forked"
    )
    assert (out / "checkpoint").read_text().split("\n")[1] == "6"


@pytest.mark.parametrize(
    ("path", "answer", "message"),
    [
        (
            "tile/0/000.p/9",
            (200, bytes(8 * 32)),
            "hash tile tile/0/000.p/9 has 256 bytes, not the 288 of 9 hashes",
        ),
        (
            "tile/0/000.p/9",
            (404, b""),
            (
                "tile/0/000.p/9 is not served: the tree of the signed checkpoint of size 9 holds "
                "it, so the service withholds part of the log it signed"
            ),
        ),
        (
            "tile/0/000.p/9",
            (200, bytes(256 * 32 + 1)),
            "tlog/tile/0/000.p/9 announces 8193 bytes, over the 8192-byte limit",
        ),
        (
            "tile/entries/000.p/9",
            (200, b"\x00\x05abc"),
            "entry bundle tile/entries/000.p/9 is malformed: entry bundle ends inside entry 0",
        ),
        (
            "tile/entries/000.p/9",
            (200, b"\x00\x00" * 10),
            "entry bundle tile/entries/000.p/9 holds 10 entries, not 9",
        ),
        (
            "tile/entries/000.p/9",
            (200, b"\x01\x35" + bytes(309)),
            (
                "entry bundle tile/entries/000.p/9 is malformed: entry 0 of the bundle has 309 "
                "bytes, more than a log entry ever has (308)"
            ),
        ),
    ],
)
def test_a_tile_that_is_no_answer_to_the_question_is_tampering(  # noqa: PLR0917 - fixtures
    recorded: tuple[Service, Recorder],
    envelope_for: Callable[..., bytes],
    tmp_path: Path,
    path: str,
    answer: tuple[int, bytes],
    message: str,
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(6), tmp_path / "spool")
    out = tmp_path / "store"
    fetch(service, out, jobs=1)
    publish(service, envelope_for, range(6, 9), tmp_path / "spool")
    recorder.answers[f"{BASE}/tlog/{path}"] = (0.0, *answer)
    with pytest.raises(TamperingError) as caught:
        fetch(service, out, jobs=1)
    assert message in str(caught.value)
    assert (out / "checkpoint").read_text().split("\n")[1] == "6"


def test_a_partial_tile_that_is_not_served_is_read_in_full(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    """A service that serves only full tiles once the log grew past them (tlog-tiles allows
    it): the fetch reads the full tiles and uses their first hashes and entries."""
    service, recorder = recorded
    publish(service, envelope_for, range(3), tmp_path / "spool")
    out = tmp_path / "store"
    fetch(service, out, jobs=1)
    more = publish(service, envelope_for, range(3, 10), tmp_path / "spool")
    reader = {"Authorization": f"Bearer {service.token('acme', 'tenant')}"}
    for level, filler in (("0", bytes(32)), ("entries", b"\x00\x00")):
        partial = f"{BASE}/tlog/tile/{level}/000.p/10"
        served = requests.get(service.url + partial, headers=reader, timeout=10).content
        # the full tile: the 10 hashes or entries of the signed tree, then 246 others
        recorder.answers[partial.removesuffix(".p/10")] = (0.0, 200, served + filler * 246)
        recorder.answers[partial] = (0.0, 404, b"")
    recorder.paths.clear()
    report = fetch(service, out, jobs=1)
    assert report.new_envelopes == tuple(map(sha256_name, more))
    assert recorder.paths[:5] == [
        f"{BASE}/tlog/checkpoint",
        f"{BASE}/tlog/tile/0/000.p/10",
        f"{BASE}/tlog/tile/0/000",
        f"{BASE}/tlog/tile/entries/000.p/10",
        f"{BASE}/tlog/tile/entries/000",
    ]


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


def test_a_bundle_answer_over_the_bound_is_tampering(
    recorded: tuple[Service, Recorder], envelope_for: Callable[..., bytes], tmp_path: Path
) -> None:
    service, recorder = recorded
    publish(service, envelope_for, range(2), tmp_path / "spool")
    limit = tenant_fetch.BUNDLE_ANSWER.max_bytes
    recorder.answers[BUNDLE_PATH] = (0.0, 200, b'{"start":0,"envelopes":["' + b"A" * limit + b'"]}')
    with pytest.raises(TamperingError) as caught:
        fetch(service, tmp_path / "store", jobs=1)
    assert str(caught.value) == (
        f"the envelopes of log entries 0..1 exceed {limit} bytes, more than the service "
        "ever answers"
    )
