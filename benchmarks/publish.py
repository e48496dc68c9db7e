"""Publication benchmark: publisher throughput and latency against the raw speed of the same
database statements, and Merkle proofs at 1,000,000 entries.

    python benchmarks/publish.py [--per-publisher 400] [--db postgresql://...] [--log-size N]

``--db`` must name an empty database or schema (the benchmark refuses one holding logs).

Envelopes: a genuine simulated replay of the bundled example corpus (``runner.pipeline.run``,
about 16 KB: a nested result, a PEM certificate chain, a base64 report), copied with each
publisher's run IDs in the layout a run writes (``envelope_document_bytes``; until
2026-12-02 02:40 UTC the copies were canonical JSON, 12 KB). The service does not verify
evidence, so the copies cost it what the original would.

Part 1, the floor: the statements the service runs for one envelope (signed-head and
catch-up reads, digest and run-pointer lookups, the entry, envelope and pointer inserts, the
signed-head update), through the service's own storage code, one transaction per envelope on
one connection, in a fresh database beside the service's (same disk, same synchronous mode).
That is the raw single-connection rate.

Part 2: ``attested-replay serve`` (SQLite in a temporary state directory, or the given
PostgreSQL DSN) on a loopback port, and 1, 8 and 32 concurrent publishers (each a forked
process with one keep-alive client, as each pod publishes from its own process;
``--threads``: threads of the benchmark's process instead) publishing through the real
client (``publish_envelope``: the envelope checked, one PUT, the receipt's inclusion proof
checked). It reports envelopes per second, p50 and p99 of a whole publish, the rate as a
ratio to the raw rate of part 1, the CPU time the server (its process and the log's
process, ``runner.service.log.process``; before 2026-12-02 04:15 UTC there was one) and the
publishers spent per envelope, and the load average. Everything runs on the same machine: the
publishers' CPU is the server's competition, and so is every other process; the CPU per
envelope is what stays comparable on a busy machine (two idle CPUs publish at most
2 s / (server + client CPU per envelope) envelopes per second).

Then the service alone: ``--raw-publishers`` (8) processes that send prepared PUTs on raw
keep-alive sockets and only read each answer's status and length (no envelope check, no
receipt check, almost no CPU), so that the rate and the server's CPU per envelope show the
service's own ceiling on this machine, apart from the publishers' share of the CPUs.

Before part 2 it measures what waking up costs on this machine: the same envelope check
(``parse_any_envelope``) back to back and after each of 0.5, 2 and 10 ms of sleep. On a
virtual machine whose idle CPUs are given to other guests, code that runs right after a sleep
runs on cold caches; every publish (after waiting for its receipt) and every sequencer batch
(after its fsyncs) does, while the floor's loop sleeps only in its fsyncs.

Part 3 builds an in-memory RFC 6962 tree of ``--log-size`` entries and reports inclusion and
consistency proof sizes and verification times, as a ratio to one SHA-256 leaf hash.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import logging
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier as BarrierType
from pathlib import Path

import requests
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.contracts import sha256_digest
from attestation.envelope.merged import AnyEnvelope, parse_any_envelope
from attestation.tenant.http import HttpClient, RetryPolicy
from attestation.transparency.checkpoint import Checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, verify_consistency, verify_inclusion
from runner.pipeline import RunRequest, run
from runner.pipeline.envelope import envelope_document_bytes
from runner.publish.client import publish_envelope
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.merkle import MerkleTree
from runner.service.log.storage import (
    WHOLE_RUN,
    EntryRow,
    Role,
    RunPointer,
    Storage,
    open_storage,
    utc_now,
)
from runner.service.serve import DEFAULT_LOG_NAME, SIGNING_KEY_FILE
from runner.service.tokens import create_token

LEVELS = (1, 8, 32)
#: How the benchmark starts ``attested-replay`` (the checkout's, whatever is installed).
RUNNER = (sys.executable, "-m", "runner")


def genuine_envelope(scratch: Path) -> bytes:
    """A simulated replay of the example corpus: the envelope a run writes."""
    corpus = Path(str(resources.files("runner") / "examples" / "corpus"))
    result = run(
        RunRequest(
            corpus=str(corpus),
            run_id="bench-template",
            tenant="bench",
            evidence="simulated",
            out=scratch / "envelope.json",
            state_dir=scratch / "simulated-amd",
        )
    )
    return result.envelope_bytes


def variant(template: dict[str, object], tenant: str, run_id: str) -> bytes:
    """The template for ``tenant``'s run ``run_id``, in the layout a run writes its envelope."""
    document = json.loads(json.dumps(template))
    document["tenant"] = document["binding"]["tenant"] = tenant
    document["runId"] = document["binding"]["runId"] = run_id
    return envelope_document_bytes(document)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def raw_rate(storage: Storage, payloads: list[bytes], tenant: str) -> float:
    """Envelopes per second, each in its own transaction: the service's statements alone."""
    signer = CheckpointSigner("bench", Ed25519PrivateKey.generate())
    note = signer.sign(Checkpoint(f"bench/t/{tenant}", 1, bytes(32)))  # a typical head
    began = time.perf_counter()
    for index, data in enumerate(payloads):
        digest = sha256_digest(data)
        run_id = f"raw-{index}"
        entry = LogEntry(tenant=tenant, run_id=run_id, envelope=digest).to_bytes()
        with storage.transaction([tenant]) as txn:
            txn.head(tenant)
            txn.entries_since(tenant, max(index - 1, 0), 10_000)
            assert not txn.envelopes(tenant, [digest])
            assert not txn.run_parts(tenant, [run_id])
            txn.append([EntryRow(tenant, index, entry, digest, data, utc_now())])
            txn.set_run_pointers([RunPointer(tenant, run_id, WHOLE_RUN, digest)])
            txn.put_head(tenant, index + 1, bytes(32), note)
    return len(payloads) / (time.perf_counter() - began)


def wake_up_cost(data: bytes) -> None:
    """The envelope check's mean time back to back and after each of three sleeps."""
    times = []
    for pause in (0.0, 0.0005, 0.002, 0.01):
        total = 0.0
        for _ in range(200):
            if pause:
                time.sleep(pause)
            began = time.perf_counter()
            parse_any_envelope(data)
            total += time.perf_counter() - began
        times.append(total / 200)
    print(
        "== waking up: the envelope check back to back, then after 0.5 / 2 / 10 ms of sleep: "
        + " / ".join(f"{t * 1e6:.0f} us" for t in times)
        + f" ({times[2] / times[0]:.1f}x after 2 ms)"
    )


def start_witnesses(
    count: int, state: Path, scratch: Path
) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    """``count`` witness processes following the service's log key (made here, before the
    service starts); their ``serve --witness`` values."""
    if not count:
        return [], []
    key_file = state / SIGNING_KEY_FILE
    signer = CheckpointSigner.load_or_create(DEFAULT_LOG_NAME, key_file, create=True)
    processes: list[subprocess.Popen[bytes]] = []
    options: list[str] = []
    for number in range(count):
        home = scratch / f"witness-{number}"
        name = f"bench.witness/w{number}"
        made = subprocess.run(
            [*RUNNER, "witness", "key", "--name", name, "--state-dir", str(home)],
            check=True,
            capture_output=True,
            text=True,
        )
        port = free_port()
        with (scratch / f"witness-{number}.log").open("wb") as sink:
            processes.append(
                subprocess.Popen(
                    [
                        *RUNNER, "--log-level", "warning", "witness", "serve", "--name", name,
                        "--state-dir", str(home), "--log", signer.verifier_key.encode(),
                        "--port", str(port),
                    ],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        options.append(f"http://127.0.0.1:{port} {made.stdout.strip()}")
    return processes, options


def start_server(
    state: Path, database: str, log: Path, witnesses: list[str]
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                *RUNNER,
                "--log-level",
                "warning",
                "serve",
                *("--port", str(port), "--state-dir", str(state), "--db", database),
                *(item for witness in witnesses for item in ("--witness", witness)),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            requests.get(f"{url}/v1/log/public-key", timeout=1)
        except requests.RequestException:  # a loaded machine: a read timeout too
            time.sleep(0.05)
        else:
            return process, url
    process.terminate()
    raise SystemExit(f"serve did not start: {log.read_text()}")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time so far of process ``pid`` and its children (the service and
    its log process), from Linux ``/proc/PID/stat``."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # a process that ended meanwhile
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):  # itself, or its parent
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class PublisherJob:
    """What one publisher publishes: ``payloads`` as run ``r{level}-{number}-{i}``."""

    url: str
    token: str
    spool: Path
    level: int
    number: int
    payloads: list[bytes]
    #: Each payload's envelope as ``run`` holds it when it publishes (None: parsed by the
    #: publisher, as ``attested-replay publish FILE`` does).
    envelopes: list[AnyEnvelope] | None = None


def _publisher(job: PublisherJob) -> tuple[list[float], float]:
    """One publisher: its latencies (s) and the CPU time (s) it spent publishing."""
    tenant = f"bench-{job.level}"
    retry = RetryPolicy(backoff_factor=0.05)
    latencies = []
    with HttpClient(token=job.token, retry=retry, what="target") as client:
        cpu = time.process_time()
        for i, data in enumerate(job.payloads):
            began = time.perf_counter()
            publish_envelope(
                job.url,
                data,
                tenant=tenant,
                run_id=f"r{job.level}-{job.number}-{i}",
                token=job.token,
                spool_dir=job.spool,
                retry=retry,
                client=client,
                envelope=None if job.envelopes is None else job.envelopes[i],
            )
            latencies.append(time.perf_counter() - began)
        return latencies, time.process_time() - cpu


def _publisher_process(
    barrier: BarrierType,
    results: Queue[tuple[list[float], float] | str],
    job: PublisherJob,
) -> None:
    try:
        barrier.wait()
        results.put(_publisher(job))
    except BaseException as exc:
        results.put(f"{type(exc).__name__}: {exc}")
        raise


def publish_level(  # noqa: PLR0917 - one level's parameters
    url: str,
    token: str,
    spool: Path,
    level: int,
    payloads: list[list[bytes]],
    envelopes: list[list[AnyEnvelope]] | None,
    *,
    threads: bool,
) -> tuple[list[float], float, float]:
    """``level`` publishers, each publishing its list of envelopes: their latencies (s), the
    wall time (s) from the start signal to the last receipt and the CPU time (s) they spent.

    Each publisher is a process of its own (forked: its own interpreter and lock, as the
    pods that publish in a cluster are), or with ``threads`` a thread of this process.
    ``envelopes``: each payload's parsed envelope, handed to ``publish_envelope`` as ``run``
    hands the one it built (None: each publisher parses its payloads)."""

    def job(number: int) -> PublisherJob:
        return PublisherJob(
            url,
            token,
            spool,
            level,
            number,
            payloads[number],
            None if envelopes is None else envelopes[number],
        )

    if threads:
        barrier = threading.Barrier(level + 1)

        def in_thread(number: int) -> tuple[list[float], float]:
            barrier.wait()
            return _publisher(job(number))

        with ThreadPoolExecutor(max_workers=level) as pool:
            futures = [pool.submit(in_thread, number) for number in range(level)]
            cpu = time.process_time()
            barrier.wait()
            began = time.perf_counter()
            done = [future.result() for future in futures]
            elapsed = time.perf_counter() - began
            cpu = time.process_time() - cpu  # the whole process: the publishers' threads
        return [latency for batch, _ in done for latency in batch], elapsed, cpu
    context = multiprocessing.get_context("fork")  # the payloads are inherited, not copied
    process_barrier = context.Barrier(level + 1)
    results: Queue[tuple[list[float], float] | str] = context.Queue()
    processes = [
        context.Process(
            target=_publisher_process,
            args=(process_barrier, results, job(n)),
            daemon=True,
        )
        for n in range(level)
    ]
    for process in processes:
        process.start()
    try:
        process_barrier.wait(timeout=600)
        began = time.perf_counter()
        answers = [results.get(timeout=600) for _ in processes]
        elapsed = time.perf_counter() - began
    finally:
        for process in processes:
            process.join(timeout=60)
    failures = [answer for answer in answers if isinstance(answer, str)]
    if failures:
        raise SystemExit(f"{len(failures)} publishers failed: {failures[0]}")
    latencies = [
        latency for answer in answers if not isinstance(answer, str) for latency in answer[0]
    ]
    cpu = sum(answer[1] for answer in answers if not isinstance(answer, str))
    return latencies, elapsed, cpu


def publishing(args: argparse.Namespace, template: dict[str, object], scratch: Path) -> None:
    state = scratch / "state"
    state.mkdir()
    database = args.db or str(state / "publish.sqlite3")
    storage = open_storage(database)
    if storage.tenants():
        storage.close()
        raise SystemExit(
            f"--db {args.db}: the benchmark needs an empty database (or schema: add "
            "options=-csearch_path%3D<new schema> to the DSN)"
        )
    tokens = {level: create_token(storage, f"bench-{level}", Role.OPERATOR) for level in LEVELS}
    raw_token = create_token(storage, "bench-raw", Role.OPERATOR)
    floor_payloads = [variant(template, "raw", f"raw-{i}") for i in range(args.raw)]
    size = len(floor_payloads[0])
    raw_database = args.db or str(scratch / "raw.sqlite3")
    raw_storage = storage if args.db else open_storage(raw_database)
    raw = raw_rate(raw_storage, floor_payloads, "raw")
    if raw_storage is not storage:
        raw_storage.close()
    storage.close()
    kind = "PostgreSQL" if args.db else "SQLite (synchronous=FULL, WAL)"
    print(f"storage: {kind}; envelopes of {size:,} bytes")
    print(
        "== floor: the service's statements for one envelope, one transaction each, one connection"
    )
    print(f"raw single-connection rate: {raw:,.0f} envelopes/s ({args.raw} envelopes)")
    wake_up_cost(floor_payloads[0])
    witnesses, options = start_witnesses(args.witnesses, state, scratch)
    if witnesses:
        print(f"witnesses: {len(witnesses)} (serve --witness), each a process of its own")
    process, url = start_server(state, database, scratch / "serve.log", options)
    try:
        print("== publish: one PUT per envelope, receipts checked (loopback, real client)")
        print(
            f"{'publishers':>10} {'envelopes':>9} {'env/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'vs raw':>7} {'server CPU':>10} {'client CPU':>10} {'load':>5}"
        )
        for level in LEVELS:
            per = max(args.per_publisher * 8 // level, 20) if level > 1 else args.per_publisher
            payloads = [
                [variant(template, f"bench-{level}", f"r{level}-{n}-{i}") for i in range(per)]
                for n in range(level)
            ]
            envelopes = (
                None
                if args.parse_in_publisher
                else [[parse_any_envelope(data) for data in batch] for batch in payloads]
            )
            gc.collect()
            server_cpu = cpu_seconds(process.pid)
            latencies, elapsed, client_cpu = publish_level(
                url,
                tokens[level],
                scratch / "spool",
                level,
                payloads,
                envelopes,
                threads=args.threads,
            )
            server_cpu = cpu_seconds(process.pid) - server_cpu
            rate = len(latencies) / elapsed
            ordered = sorted(latencies)
            p50 = statistics.median(ordered) * 1000
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
            per_envelope = 1e6 / len(latencies)  # microseconds of CPU per envelope
            print(
                f"{level:>10} {len(latencies):>9} {rate:>8.0f} {p50:>8.1f} {p99:>8.1f} "
                f"{rate / raw:>6.2f}x {server_cpu * per_envelope:>8.0f}us "
                f"{client_cpu * per_envelope:>8.0f}us {os.getloadavg()[0]:>5.1f}"
            )
        if args.raw_publishers:
            server_alone(url, raw_token, template, process.pid, args=args, raw=raw)
    finally:
        process.terminate()
        process.wait()
        for witness in witnesses:
            witness.terminate()
            witness.wait()


def _prepared_puts(url: str, token: str, payloads: list[bytes]) -> list[bytes]:
    """Each envelope's whole PUT request, as ``publish_envelope`` would send it."""
    host = url.removeprefix("http://")
    requests_ = []
    for data in payloads:
        raw = sha256_digest(data).removeprefix("sha256:")
        content_digest = base64.b64encode(bytes.fromhex(raw)).decode()
        head = (
            f"PUT /v1/tenants/bench-raw/envelopes/sha256:{raw} HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\nIf-None-Match: *\r\n"
            f"Content-Digest: sha-256=:{content_digest}:\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        requests_.append(head.encode() + data)
    return requests_


def _raw_publisher(barrier: BarrierType, port: int, prepared: list[bytes]) -> None:
    """Send each request on one keep-alive socket and read its answer (status 201 or exit 1)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        barrier.wait()
        for request in prepared:
            sock.sendall(request)
            answer = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    raise SystemExit("the server closed the connection")
                answer += chunk
                head, found, body = answer.partition(b"\r\n\r\n")
                if found:
                    length = next(
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                    if len(body) >= length:
                        break
            if not answer.startswith(b"HTTP/1.1 201 "):
                raise SystemExit(f"answered {answer[:80]!r}")


def server_alone(
    url: str,
    token: str,
    template: dict[str, object],
    pid: int,
    *,
    args: argparse.Namespace,
    raw: float,
) -> None:
    """The service's own ceiling: ``--raw-publishers`` processes whose CPU is almost nil."""
    count = args.raw_publishers
    per = max(args.per_publisher * 8 // count, 20)
    prepared = [
        _prepared_puts(
            url, token, [variant(template, "bench-raw", f"s-{n}-{i}") for i in range(per)]
        )
        for n in range(count)
    ]
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(count + 1)
    port = int(url.rsplit(":", 1)[1])
    processes = [
        context.Process(target=_raw_publisher, args=(barrier, port, prepared[n]), daemon=True)
        for n in range(count)
    ]
    for process in processes:
        process.start()
    gc.collect()
    server_cpu = cpu_seconds(pid)
    barrier.wait(timeout=600)
    began = time.perf_counter()
    for process in processes:
        process.join(timeout=600)
    elapsed = time.perf_counter() - began
    server_cpu = cpu_seconds(pid) - server_cpu
    if any(process.exitcode != 0 for process in processes):
        raise SystemExit("a raw publisher failed")
    total = count * per
    print(
        f"== the service alone: {count} raw-socket publishers, prepared PUTs, answers not checked"
    )
    print(
        f"{count:>10} {total:>9} {total / elapsed:>8.0f} {'-':>8} {'-':>8} "
        f"{total / elapsed / raw:>6.2f}x "
        f"{server_cpu / total * 1e6:>8.0f}us {'-':>10} {os.getloadavg()[0]:>5.1f}"
    )


def merkle(size: int) -> None:
    print(f"== Merkle proofs at {size:,} entries (in memory)")
    began = time.perf_counter()
    tree = MerkleTree()
    for i in range(size):
        tree.append_entry(i.to_bytes(8, "big"))
    build = time.perf_counter() - began
    gc.freeze()  # two million long-lived hashes: keep collector pauses out of the timings
    root = tree.root()
    rng = random.Random(6962)
    samples = 2000
    one_hash = min(_timed(lambda: leaf_hash(b"\x00" * 8), 20000) for _ in range(3))
    indices = [rng.randrange(size) for _ in range(samples)]
    proofs = [tree.inclusion_proof(i, size) for i in indices]
    began = time.perf_counter()
    for i, proof in zip(indices, proofs, strict=True):
        assert verify_inclusion(tree.leaf_hash_at(i), i, size, proof, root)
    inclusion = (time.perf_counter() - began) / samples
    olds = [rng.randrange(1, size) for _ in range(samples)]
    consistency_proofs = [tree.consistency_proof(m, size) for m in olds]
    old_roots = [tree.root(m) for m in olds]
    began = time.perf_counter()
    for m, proof, old_root in zip(olds, consistency_proofs, old_roots, strict=True):
        assert verify_consistency(m, size, proof, old_root, root)
    consistency = (time.perf_counter() - began) / samples
    print(f"tree build: {build:.1f} s ({size / build:,.0f} appends/s)")
    print(f"one SHA-256 leaf hash (baseline): {one_hash * 1e6:.2f} us")
    print(
        f"inclusion proof: {max(map(len, proofs))} hashes max, {max(map(len, proofs)) * 32} bytes; "
        f"verify {inclusion * 1e6:.1f} us = {inclusion / one_hash:.0f}x one hash"
    )
    print(
        f"consistency proof: {max(map(len, consistency_proofs))} hashes max, "
        f"{max(map(len, consistency_proofs)) * 32} bytes; verify {consistency * 1e6:.1f} us = "
        f"{consistency / one_hash:.0f}x one hash"
    )


def _timed(fn: Callable[[], object], repeat: int) -> float:
    began = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - began) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--per-publisher",
        type=int,
        default=400,
        help="envelopes of the single publisher; at 8 and 32 publishers the same total as 8 "
        "publishers of this many (default 400: 3,200 envelopes per level, a few seconds each; "
        "at 100, one second per level, the same code measured 650 to 940 envelopes/s at 8 "
        "publishers within one minute)",
    )
    parser.add_argument("--raw", type=int, default=800, help="envelopes of the floor (800)")
    parser.add_argument("--db", help="postgresql:// DSN (default: SQLite in a temporary directory)")
    parser.add_argument("--log-size", type=int, default=1_000_000)
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument(
        "--raw-publishers",
        type=int,
        default=8,
        help="processes of the service-alone measurement (0: skip it)",
    )
    parser.add_argument(
        "--witnesses",
        type=int,
        default=0,
        help="witness processes the service submits every checkpoint to (serve --witness)",
    )
    parser.add_argument(
        "--parse-in-publisher",
        action="store_true",
        help="publishers parse each envelope's bytes, as `attested-replay publish FILE` does "
        "(default: they hand publish_envelope the parsed envelope, as `run --publish` hands "
        "the one it built and verified; the measurements before 2026-12-05 20:30 UTC parsed)",
    )
    parser.add_argument(
        "--threads",
        action="store_true",
        help="publishers as threads of the benchmark's process (one interpreter lock for all, "
        "as measured before 2026-12-01 12:00 UTC) instead of a process each",
    )
    args = parser.parse_args()
    # The publishers' per-envelope info events would be measured too; keep warnings only.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    load = os.getloadavg()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load[0]:.1f} "
        f"{load[1]:.1f} {load[2]:.1f} (other processes compete for the CPUs and the disk)"
    )
    if not args.skip_http:
        with tempfile.TemporaryDirectory() as directory:
            scratch = Path(directory)
            template = json.loads(genuine_envelope(scratch))
            publishing(args, template, scratch)
    merkle(args.log_size)


if __name__ == "__main__":
    main()
