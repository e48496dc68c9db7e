"""Corpus checksum throughput and memory against ``sha256sum`` over the same bytes.

    python benchmarks/corpus.py [--cases 1000000] [--small 100000] [--repeat 3]

Builds an already-canonical, sorted corpus in a temporary directory (so ``cases.jsonl``
*is* the byte stream the checksum hashes; the script checks that ``sha256sum`` prints the
same digest), then reports the median wall time of ``compute_checksum`` (the code behind
``attested-replay corpus checksum``) and of ``sha256sum`` and their ratio (goal: <= 6). Peak
RSS (``ru_maxrss``) and the Python heap peak (``tracemalloc``) while checksumming are
measured in a fresh process for 100,000 cases and for the full size; a process that only
imports the module is the RSS baseline. The slow path (valid but not canonical lines) is
timed on the smaller size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOPICS = (b"invoice", b"login", b"refund", b"shipping", b"password", b"upgrade")

_MEASURE = """
import resource, sys, tracemalloc
from pathlib import Path
from runner.corpus.checksum import compute_checksum
mode, corpus = sys.argv[1], sys.argv[2:]
if mode == "heap":
    tracemalloc.start()
if corpus:
    compute_checksum(Path(corpus[0]))
if mode == "heap":
    print(tracemalloc.get_traced_memory()[1])
else:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def build_cases(path: Path, count: int, *, canonical: bool = True) -> None:
    """``count`` cases sorted by id; ``canonical=False`` adds spaces (the slow path)."""
    separator = b'", "' if not canonical else b'","'
    with path.open("wb") as out:
        batch: list[bytes] = []
        for number in range(count):
            topic = TOPICS[number % len(TOPICS)]
            label = b"flag" if (number * 7919) % 5 < 2 else b"clear"
            line = (
                b'{"case_id":"c-%08d' % number
                + separator
                + b'group":"%s-%06d' % (topic, number // 4)
                + separator
                + b'input":"synthetic %s message %d' % (topic, number)
                + separator
                + b'label":"%s' % label
                + separator
                + b'split":"holdout"}\n'
            )
            batch.append(line)
            if len(batch) == 10_000:
                out.write(b"".join(batch))
                batch = []
        out.write(b"".join(batch))


def run_measure(mode: str, corpus: Path | None) -> int:
    """In a fresh process: ``rss`` = peak RSS in KiB, ``heap`` = Python heap peak in bytes
    while checksumming (tracemalloc; measured separately because it inflates RSS)."""
    argv = [sys.executable, "-c", _MEASURE, mode]
    if corpus is not None:
        argv.append(str(corpus))
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO)
    return int(done.stdout.strip())


def time_sha256sum(path: Path) -> tuple[str, float]:
    start = time.perf_counter()
    done = subprocess.run(["sha256sum", str(path)], check=True, capture_output=True, text=True)
    return done.stdout.split()[0], time.perf_counter() - start


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from runner.corpus.checksum import compute_checksum

    with tempfile.TemporaryDirectory(prefix="corpus-bench-") as scratch:
        big = Path(scratch) / "big"
        small = Path(scratch) / "small"
        slow = Path(scratch) / "slow"
        for directory, count, canonical in (
            (big, args.cases, True),
            (small, args.small, True),
            (slow, args.small, False),
        ):
            directory.mkdir()
            build_cases(directory / "cases.jsonl", count, canonical=canonical)
        size = (big / "cases.jsonl").stat().st_size

        ours: list[float] = []
        theirs: list[float] = []
        checksum = ""
        for _ in range(args.repeat):
            start = time.perf_counter()
            checksum = compute_checksum(big)
            ours.append(time.perf_counter() - start)
            digest, elapsed = time_sha256sum(big / "cases.jsonl")
            theirs.append(elapsed)
            if "sha256:" + digest != checksum:
                raise SystemExit("sha256sum hashed different bytes than the checksum")
        start = time.perf_counter()
        slow_checksum = compute_checksum(slow)
        slow_time = time.perf_counter() - start
        if slow_checksum != compute_checksum(small):
            raise SystemExit("slow and fast paths disagree")

        baseline_rss = run_measure("rss", None)
        small_rss = run_measure("rss", small)
        big_rss = run_measure("rss", big)
        small_heap = run_measure("heap", small)
        big_heap = run_measure("heap", big)

    ours_median = statistics.median(ours)
    theirs_median = statistics.median(theirs)
    report = {
        "machine": machine(),
        "cases": args.cases,
        "cases_jsonl_bytes": size,
        "checksum_seconds_median": round(ours_median, 3),
        "sha256sum_seconds_median": round(theirs_median, 3),
        "ratio_checksum_over_sha256sum": round(ours_median / theirs_median, 2),
        "checksum_cases_per_second": round(args.cases / ours_median),
        "slow_path_cases": args.small,
        "slow_path_seconds": round(slow_time, 3),
        "peak_rss_kib_import_only": baseline_rss,
        f"peak_rss_kib_{args.small}_cases": small_rss,
        f"peak_rss_kib_{args.cases}_cases": big_rss,
        f"checksum_heap_peak_bytes_{args.small}_cases": small_heap,
        f"checksum_heap_peak_bytes_{args.cases}_cases": big_heap,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
