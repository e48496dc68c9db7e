"""Tenant fetch benchmark: `tenant fetch` of many envelopes against the sequential algorithm
it replaced, in the same run, from one local publication service.

    python benchmarks/fetch.py [--envelopes 10000] [--jobs 8] [--rounds 1]

Set-up (not timed): `attested-replay serve` on a loopback port (SQLite in a temporary state
directory), and ``--envelopes`` envelopes published to one tenant through the real client by
8 publishers. The envelopes are copies of a genuine simulated replay of the bundled example
corpus (``runner.pipeline.run``: a nested result, a PEM certificate chain, a base64 report,
about 16 KiB) with one run ID each; a tenant fetch does not verify evidence, so a copy costs
it what the original would.

Timed, each into an empty directory, in alternation (``--rounds`` times, the best kept):

* ``sequential``: the algorithm `tenant fetch` had before (kept below, verbatim in what it
  does): a consistency proof, then per entry an inclusion-proof request, an envelope request,
  a file fsync and a directory fsync, one entry at a time;
* ``bulk --jobs N``: ``attestation.tenant.fetch.fetch_tenant`` as shipped: the log proven from its
  tlog-tiles entry bundles and hash tiles (no proof per entry), the envelopes in bundles of
  up to 64 per request (``GET .../log/envelopes``), ``N`` requests at a time by ``N``
  worker processes (forked: this process runs no other thread then), each checking and
  writing what it downloaded, one fsync per envelope and one directory fsync per page of
  1,000;
* ``bulk N threads``: the same in ``N`` threads of the fetching process (what a fetch too
  small for the processes does, and what ``--jobs N`` did before them): one interpreter, so
  one core for the checks;
* ``bulk --jobs 1``: one request at a time, in the fetching process (what concurrency adds
  on its own).

Then ``tenant fetch --expected`` verification (``attestation.tenant.verify_fetched.verify_fetched``)
of ``--verify`` envelopes (each the genuine envelope the copies were made from, verified against
the expected values of its run, so every check runs and every verdict is VERIFIED), in this
process (``--verify-workers 1``, what `tenant fetch --expected` did before) and in a pool of
``--workers`` processes (default: one per CPU), the verdicts compared.

Each fetch line reports seconds, envelopes per second, HTTP requests and fsyncs per envelope
(counted, in the worker processes too), the CPU the fetching process and its worker processes
used (cores busy on average), the server's, the rest of the machine's busy CPU ("others":
other people's jobs take CPU from the measurement, and a loaded machine lowers the ratios),
and the speed-up over ``sequential``. All stores are compared byte for byte at the
end. The server and the fetcher share this machine's cores.

Each envelope is a new file, and on an ext4 without a journal creating one costs far more
kernel CPU (up to about 1 ms instead of 20 us) while its directory's block groups hold many
inodes deleted in the last minutes, as after this benchmark's own clean-up (some 40,000
files) or other test suites': runs started right after one another measure that as much as
the fetch.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import multiprocessing
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import requests
import structlog

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import canonicalize
from attestation.envelope.merged import parse_any_envelope, shard_index
from attestation.tenant import fetch as tenant_fetch
from attestation.tenant.fsutil import atomic_write, atomic_write_text
from attestation.tenant.http import Answer, HttpClient, Limits, RetryPolicy
from attestation.tenant.verify_fetched import default_workers, load_expectations, verify_fetched
from attestation.transparency.checkpoint import VerifierKey, verify_signed_checkpoint
from attestation.transparency.entries import LogEntry
from attestation.transparency.merkle import leaf_hash, verify_consistency, verify_inclusion
from runner.cli import main as runner_main
from runner.pipeline import RunRequest, run
from runner.publish.client import publish_envelope
from runner.service.log.storage import Role, open_storage
from runner.service.tokens import create_token

TENANT = "bench"
PUBLISHERS = 8
CORPUS = Path(str(resources.files("runner") / "examples" / "corpus"))
#: The baseline's page of entries (the route's 1,000 base64 entries, JSON).
ENTRIES_PAGE = Limits(max_bytes=1024 * 1024, deadline=60.0)


def genuine_envelope(scratch: Path) -> bytes:
    """A simulated replay of the bundled example corpus: the envelope a run writes."""
    scratch.mkdir()
    outcome = run(
        RunRequest(
            corpus=str(CORPUS),
            run_id="bench-template",
            tenant=TENANT,
            evidence="simulated",
            out=scratch / "envelope.json",
            state_dir=scratch / "simulated-amd",
        )
    )
    return outcome.envelope_bytes


def copy_with_run_id(template: dict[str, Any], run_id: str) -> bytes:
    document = json.loads(json.dumps(template))
    document["runId"] = document["binding"]["runId"] = run_id
    return canonicalize(document)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_server(state: Path, database: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "runner", "--log-level", "warning", "serve"]
    command += ["--port", str(port), "--state-dir", str(state), "--db", database]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
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


def publish_all(url: str, token: str, envelopes: list[tuple[str, bytes]], spool: Path) -> None:
    retry = RetryPolicy(backoff_factor=0.05, backoff_max=1.0)

    def publisher(part: list[tuple[str, bytes]]) -> None:
        with HttpClient(token=token, retry=retry) as client:
            for run_id, data in part:
                publish_envelope(
                    url,
                    data,
                    tenant=TENANT,
                    run_id=run_id,
                    token=token,
                    spool_dir=spool,
                    client=client,
                )

    with ThreadPoolExecutor(PUBLISHERS) as pool:
        for _ in pool.map(publisher, [envelopes[i::PUBLISHERS] for i in range(PUBLISHERS)]):
            pass


# -- the sequential algorithm `tenant fetch` had before (the baseline) ---------------------


def sequential_fetch(server: str, token: str, out_dir: Path, key: VerifierKey) -> int:
    """One entry at a time: inclusion proof, envelope, file fsync, directory fsync."""
    origin = f"{key.name}/t/{TENANT}"
    base = f"{server}/v1/tenants/{TENANT}"
    with HttpClient(token=token, what="server") as client:

        def get(path: str, limit: Limits = tenant_fetch.SMALL_ANSWER, **params: int) -> bytes:
            answer = client.get(base + path, params=params, limit=limit)
            if answer.status != 200:
                raise SystemExit(f"GET {path}: HTTP {answer.status}")
            return answer.body

        def hashes(path: str, **params: int) -> list[bytes]:
            return [
                base64.b64decode(h, validate=True)
                for h in json.loads(get(path, tenant_fetch.SMALL_ANSWER, **params))["hashes"]
            ]

        note = get("/log/checkpoint").decode()
        new = verify_signed_checkpoint(note, key, origin=origin)
        kept = out_dir / "checkpoint"
        old = (
            verify_signed_checkpoint(kept.read_text(), key, origin=origin)
            if kept.exists()
            else None
        )
        if old is not None:
            proof = hashes("/log/proof/consistency", **{"from": old.size, "to": new.size})
            if not verify_consistency(old.size, new.size, proof, old.root, new.root):
                raise SystemExit("not consistent")
        start = 0 if old is None else old.size
        index: dict[str, Any] = {}
        for page_start in range(start, new.size, tenant_fetch.PAGE):
            page_end = min(page_start + tenant_fetch.PAGE, new.size)
            page = json.loads(get("/log/entries", ENTRIES_PAGE, start=page_start, end=page_end))
            for position, encoded in enumerate(page["entries"], page_start):
                raw = base64.b64decode(encoded, validate=True)
                entry = LogEntry.from_bytes(raw)
                proof = hashes("/log/proof/inclusion", index=position, size=new.size)
                if not verify_inclusion(leaf_hash(raw), position, new.size, proof, new.root):
                    raise SystemExit(f"entry {position} is not included")
                data = get(f"/envelopes/{entry.envelope}", tenant_fetch.ENVELOPE_ANSWER)
                envelope = parse_any_envelope(data)
                if (sha256_digest(data), envelope.tenant, envelope.run_id) != (
                    entry.envelope,
                    TENANT,
                    entry.run_id,
                ):
                    raise SystemExit(f"envelope {entry.envelope} does not match its entry")
                hex_digest = entry.envelope.removeprefix("sha256:")
                atomic_write(out_dir / "envelopes" / f"sha256-{hex_digest}.json", data)
                index[str(position)] = {
                    "digest": entry.envelope,
                    "runId": entry.run_id,
                    "shard": shard_index(envelope),
                }
    atomic_write_text(out_dir / "index.json", json.dumps(index, indent=1, sort_keys=True) + "\n")
    atomic_write_text(out_dir / "checkpoint", note)
    atomic_write_text(out_dir / "log-key.pub", key.encode() + "\n")
    return new.size


# -- measuring ---------------------------------------------------------------------------


class Counts:
    """Counters in shared memory: a worker process forked by the fetch inherits the counting
    ``os.fsync`` and ``HttpClient.get`` below and adds to the same numbers."""

    def __init__(self) -> None:
        self._requests = multiprocessing.Value("q", 0)
        self._fsyncs = multiprocessing.Value("q", 0)

    @property
    def requests(self) -> int:
        return int(self._requests.value)

    @property
    def fsyncs(self) -> int:
        return int(self._fsyncs.value)

    def add_request(self) -> None:
        with self._requests.get_lock():
            self._requests.value += 1

    def add_fsync(self) -> None:
        with self._fsyncs.get_lock():
            self._fsyncs.value += 1


@contextmanager
def counted() -> Iterator[Counts]:
    """Count the HTTP requests and fsyncs of the fetching process (and of the worker
    processes it forks) while the block runs."""
    counts = Counts()
    real_fsync, real_get = os.fsync, HttpClient.get

    def fsync(fd: Any) -> None:  # noqa: ANN401 - os.fsync takes a descriptor or a file
        counts.add_fsync()
        real_fsync(fd)

    def get(self: HttpClient, *args: Any, **kwargs: Any) -> Answer:  # noqa: ANN401
        counts.add_request()
        return real_get(self, *args, **kwargs)

    os.fsync = fsync
    HttpClient.get = get  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        os.fsync = real_fsync
        HttpClient.get = real_get  # type: ignore[method-assign]


def cpu_seconds(pid: int | None = None) -> float:
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds the machine's CPUs were busy so far (``/proc/stat``: all but idle and I/O
    wait, time the hypervisor took included), to show what other jobs took from the
    measurement."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Measure:
    seconds: float
    requests: int
    fsyncs: int
    cpu: float
    server_cpu: float
    machine_cpu: float


def measure(fetch: Callable[[Path], object], out: Path, server_pid: int) -> Measure:
    """One fetch into ``out``; its CPU is this process's and that of the worker processes it
    started and ended (the server, a child still running, is counted apart)."""
    out.mkdir()
    with counted() as counts:
        cpu, server_cpu = cpu_seconds() + cpu_seconds_children(), cpu_seconds(server_pid)
        machine_cpu = machine_busy_seconds()
        began = time.perf_counter()
        fetch(out)
        seconds = time.perf_counter() - began
        cpu = cpu_seconds() + cpu_seconds_children() - cpu
        server_cpu = cpu_seconds(server_pid) - server_cpu
        machine_cpu = machine_busy_seconds() - machine_cpu
    return Measure(seconds, counts.requests, counts.fsyncs, cpu, server_cpu, machine_cpu)


def store_of(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envelopes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=tenant_fetch.DEFAULT_JOBS)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--verify", type=int, default=2000, help="envelopes verified")
    parser.add_argument("--workers", type=int, default=default_workers())
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load[0]:.2f}")
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        template = json.loads(genuine_envelope(scratch / "template"))
        envelopes = [
            (f"bench-{number:06d}", copy_with_run_id(template, f"bench-{number:06d}"))
            for number in range(args.envelopes)
        ]
        sizes = sorted(len(data) for _, data in envelopes)
        state = scratch / "state"
        state.mkdir()
        database = str(state / "publish.sqlite3")
        storage = open_storage(database)
        operator = create_token(storage, TENANT, Role.OPERATOR)
        reader = create_token(storage, TENANT, Role.TENANT)
        storage.close()
        process, url = start_server(state, database)
        try:
            began = time.perf_counter()
            publish_all(url, operator, envelopes, scratch / "spool")
            print(
                f"{args.envelopes} envelopes of {sizes[0]}-{sizes[-1]} bytes published in "
                f"{time.perf_counter() - began:.1f} s (set-up, not timed)"
            )
            key = tenant_fetch.load_verifier_key(
                requests.get(f"{url}/v1/log/public-key", timeout=10).text.strip()
            )

            def bulk(jobs: int, *, threads: bool = False) -> Callable[[Path], object]:
                def fetch(out: Path) -> object:
                    pool_from = tenant_fetch.POOL_MIN_BUNDLES
                    if threads:  # as if every fetch were too small for worker processes
                        tenant_fetch.POOL_MIN_BUNDLES = sys.maxsize  # type: ignore[misc]
                    try:
                        return tenant_fetch.fetch_tenant(
                            server=url,
                            token=reader,
                            tenant=TENANT,
                            out_dir=out,
                            log_key=key,
                            jobs=jobs,
                        )
                    finally:
                        tenant_fetch.POOL_MIN_BUNDLES = pool_from  # type: ignore[misc]

                return fetch

            variants: dict[str, Callable[[Path], object]] = {
                "sequential": lambda out: sequential_fetch(url, reader, out, key),
                f"bulk --jobs {args.jobs}": bulk(args.jobs),
                f"bulk {args.jobs} threads": bulk(args.jobs, threads=True),
                "bulk --jobs 1": bulk(1),
            }
            best: dict[str, Measure] = {}
            stores: dict[str, dict[str, bytes]] = {}
            for round_number in range(args.rounds):
                for name, fetch in variants.items():
                    out = scratch / f"out-{round_number}-{name.replace(' ', '')}"
                    result = measure(fetch, out, process.pid)
                    if name not in best or result.seconds < best[name].seconds:
                        best[name] = result
                    stores[name] = store_of(out)
        finally:
            process.terminate()
            process.wait()
    floor = best["sequential"].seconds
    count = args.envelopes
    print(
        f"{'':<16} {'seconds':>8} {'env/s':>7} {'req/env':>8} {'fsync/env':>9} "
        f"{'cores':>6} {'server':>7} {'others':>7} {'speed-up':>9}"
    )
    for name, result in best.items():
        others = max(0.0, result.machine_cpu - result.cpu - result.server_cpu)
        print(
            f"{name:<16} {result.seconds:8.2f} {count / result.seconds:7.0f} "
            f"{result.requests / count:8.3f} {result.fsyncs / count:9.3f} "
            f"{result.cpu / result.seconds:6.2f} {result.server_cpu / result.seconds:7.2f} "
            f"{others / result.seconds:7.2f} {floor / result.seconds:8.2f}x"
        )
    same = all(store == stores["sequential"] for store in stores.values())
    print(f"stores identical: {same}; load now {os.getloadavg()[0]:.2f}")
    if not same:
        raise SystemExit("the stores differ")
    if args.verify:
        verification(args.verify, args.workers)


def verification(count: int, workers: int) -> None:
    """``--expected`` verification of ``count`` genuine envelopes, in-process and pooled."""
    print(f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        data = genuine_envelope(scratch / "template")
        envelopes = scratch / "envelopes"
        envelopes.mkdir()
        digest = sha256_digest(data)
        (envelopes / f"sha256-{digest.removeprefix('sha256:')}.json").write_bytes(data)
        expected = scratch / "expected.json"
        argv = ["expected", "--run-id", "any", "--corpus", str(CORPUS), "--tenant", TENANT]
        argv += [
            "--trust-local-simulated-root",
            "--state-dir",
            str(scratch / "template" / "simulated-amd"),
        ]
        if runner_main([*argv, "--out", str(expected)]) != 0:
            raise SystemExit("expected failed")
        document = load_expectations(expected)
        entries = [(n, digest, "bench-template") for n in range(count)]
        now = datetime.now(UTC)
        timed: dict[str, tuple[float, float, list[Any]]] = {}
        for name, jobs in (("in-process", 1), (f"pool of {workers}", workers)):
            cpu, children = cpu_seconds(), cpu_seconds_children()
            began = time.perf_counter()
            verdicts = verify_fetched(envelopes, entries, document, now=now, workers=jobs)
            seconds = time.perf_counter() - began
            used = cpu_seconds() - cpu + cpu_seconds_children() - children
            timed[name] = (seconds, used, verdicts)
    floor = timed["in-process"][0]
    print(f"--expected verification of {count} envelopes")
    print(f"{'':<16} {'seconds':>8} {'env/s':>7} {'cores':>6} {'speed-up':>9}")
    for name, (seconds, used, _) in timed.items():
        print(
            f"{name:<16} {seconds:8.2f} {count / seconds:7.0f} {used / seconds:6.2f} "
            f"{floor / seconds:8.2f}x"
        )
    results = [verdicts for _, _, verdicts in timed.values()]
    same = all(result == results[0] for result in results)
    verified = all(verdict.ok for verdict in results[0])
    print(
        f"verdicts identical: {same}; all VERIFIED: {verified}; load now {os.getloadavg()[0]:.2f}"
    )
    if not (same and verified):
        raise SystemExit("the verdicts differ or did not verify")


if __name__ == "__main__":
    main()
