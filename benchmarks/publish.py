"""Publication benchmark: publisher throughput and latency, and Merkle proofs at 1,000,000 entries.

    python benchmarks/publish.py [--per-publisher 50] [--db postgresql://...] [--log-size 1000000]

Part 1 starts `attested-replay serve` (SQLite in a temporary state directory, or the given
PostgreSQL DSN) on a loopback port and publishes envelopes from 1, 8 and 32 concurrent
publishers (one thread and one keep-alive session each), through the real client with its
spool. It reports envelopes per second, p50 and p99 latency of a full publish (envelope PUT
plus run pointer PUT), and throughput as a ratio to the single-publisher baseline of the same
run. Part 2 builds an in-memory RFC 6962 tree of ``--log-size`` entries and reports inclusion
and consistency proof sizes and verification times, as a ratio to one SHA-256 leaf hash.
"""

from __future__ import annotations

import argparse
import base64
import gc
import hashlib
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
import structlog

from attestation.envelope.model import Binding, Envelope, Evidence, Workload
from attestation.transparency.merkle import leaf_hash, verify_consistency, verify_inclusion
from runner.publish.client import publish_envelope
from runner.publish.merkle import MerkleTree
from runner.publish.storage import Role, open_storage
from runner.publish.tokens import create_token
from tenant.http import HttpClient, RetryPolicy

LEVELS = (1, 8, 32)


def envelope(tenant: str, run_id: str) -> bytes:
    def digest(label: str) -> str:
        return "sha256:" + hashlib.sha256(f"{label}{run_id}".encode()).hexdigest()

    return Envelope(
        api_version="attested-replay.dev/v1",
        kind="AttestationEnvelope",
        run_id=run_id,
        tenant=tenant,
        binding=Binding(
            run_id=run_id,
            tenant=tenant,
            corpus_checksum=digest("c"),
            evaluation_digest=digest("e"),
            workload=Workload(name="replay", version="1", code_digest=digest("w")),
            result_digest=digest("r"),
        ),
        report_data=hashlib.sha512(run_id.encode()).hexdigest(),
        measurement=hashlib.sha384(run_id.encode()).hexdigest(),
        host_data=hashlib.sha256(run_id.encode()).hexdigest(),
        platform="simulated",
        evidence=Evidence(
            report=base64.b64encode(bytes(1184)).decode(), provider="sim", cert_chain=""
        ),
    ).canonical_bytes()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_server(state: Path, database: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "--log-level",
            "warning",
            "serve",
            "--port",
            str(port),
            "--state-dir",
            str(state),
            "--db",
            database,
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(400):
        try:
            requests.get(f"{url}/v1/log/public-key", timeout=1)
        except requests.ConnectionError:
            time.sleep(0.05)
        else:
            return process, url
    process.terminate()
    raise SystemExit("serve did not start")


def publish_level(url: str, token: str, spool: Path, level: int, per_publisher: int) -> list[float]:
    """Latencies (s) of ``level`` publishers, each publishing ``per_publisher`` envelopes."""
    tenant = f"bench-{level}"
    retry = RetryPolicy(backoff_factor=0.05)
    barrier = threading.Barrier(level)

    def publisher(number: int) -> list[float]:
        payloads = [envelope(tenant, f"r{level}-{number}-{i}") for i in range(per_publisher)]
        latencies = []
        with HttpClient(token=token, retry=retry) as client:
            barrier.wait()
            for i, data in enumerate(payloads):
                began = time.perf_counter()
                publish_envelope(
                    url,
                    data,
                    tenant=tenant,
                    run_id=f"r{level}-{number}-{i}",
                    token=token,
                    spool_dir=spool,
                    retry=retry,
                    client=client,
                )
                latencies.append(time.perf_counter() - began)
        return latencies

    with ThreadPoolExecutor(max_workers=level) as pool:
        return [latency for batch in pool.map(publisher, range(level)) for latency in batch]


def publishing(url: str, tokens: dict[str, str], spool: Path, per_publisher: int) -> None:
    print("== publish throughput and latency (loopback, full publish = 2 PUTs)")
    print(
        f"{'publishers':>10} {'envelopes':>9} {'env/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs 1':>6}"
    )
    baseline = None
    for level in LEVELS:
        began = time.perf_counter()
        latencies = publish_level(url, tokens[f"bench-{level}"], spool, level, per_publisher)
        elapsed = time.perf_counter() - began
        rate = len(latencies) / elapsed
        baseline = baseline or rate
        ordered = sorted(latencies)
        p50 = statistics.median(ordered) * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        print(
            f"{level:>10} {len(latencies):>9} {rate:>8.1f} {p50:>8.1f} {p99:>8.1f} "
            f"{rate / baseline:>5.2f}x"
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
    parser.add_argument("--per-publisher", type=int, default=50)
    parser.add_argument("--db", help="postgresql:// DSN (default: SQLite in a temporary directory)")
    parser.add_argument("--log-size", type=int, default=1_000_000)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    # Per-envelope info events would be measured too; keep warnings only.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if not args.skip_http:
        with tempfile.TemporaryDirectory() as scratch:
            state = Path(scratch) / "state"
            database = args.db or str(state / "publish.sqlite3")
            state.mkdir()
            storage = open_storage(database)
            tokens = {
                f"bench-{level}": create_token(storage, f"bench-{level}", Role.OPERATOR)
                for level in LEVELS
            }
            storage.close()
            process, url = start_server(state, database)
            try:
                print(f"storage: {'PostgreSQL' if args.db else 'SQLite'}")
                publishing(url, tokens, Path(scratch) / "spool", args.per_publisher)
            finally:
                process.terminate()
                process.wait()
    merkle(args.log_size)


if __name__ == "__main__":
    main()
