"""Corpus checksum on today's flat shape and on the shape users have, against floors measured
in the same run.

    python benchmarks/corpus.py [--cases 1000000] [--small 100000] [--repeat 3]

Two shapes (``benchmarks/shapes.py``), each written to a temporary directory:

* **flat**: today's benchmark corpus, already canonical with printable-ASCII strings (the
  file's lines *are* the bytes the checksum's leaves hash: the script checks the checksum
  against the tree over the file's own blocks). Floor: ``sha256sum`` of the file. Goal: <= 4x.
* **realistic**: nested inputs, non-ASCII text, floats of every kind, keys in any order,
  spaces (nothing canonical). Floors: ``sha256sum`` of the file (goal <= 4x, at ``--cases``)
  and, at ``--small``, "orjson parse + sorted dump + SHA-256 of each line" (goal <= 2x).
  The checksum must equal the reference computed with the independent ``rfc8785`` package
  (checked on the small corpus).

Each of ``--repeat`` runs times the checksum and its floor back to back and gives one ratio
of wall times (the goal) and one of CPU times (this process and its children: the checksum
scans the parts of a large file in forked children, ``runner/corpus/parallel_scan.py``);
the script prints the least ratio and the spread (largest / least) of the runs.
Peak RSS (``VmHWM``, ``benchmarks/memory.py``) of a fresh process checksumming the realistic
corpus at both sizes
shows that memory does not grow with the corpus; a process that only imports the module is
the baseline.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import rfc8785

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.shapes import write_flat_cases, write_realistic_cases  # noqa: E402

_MEASURE = """
import sys
from pathlib import Path
from benchmarks.memory import own_peak_rss_kib
from runner.corpus.checksum import compute_checksum
for corpus in sys.argv[1:]:
    compute_checksum(Path(corpus))
print(own_peak_rss_kib())
"""


def peak_rss_kib(corpus: Path | None) -> int:
    """Peak RSS of a fresh process that checksums ``corpus`` (or only imports the module)."""
    argv = [sys.executable, "-c", _MEASURE, *([str(corpus)] if corpus else [])]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO)
    return int(done.stdout.strip())


def sha256sum(path: Path) -> str:
    done = subprocess.run(["sha256sum", str(path)], check=True, capture_output=True, text=True)
    return "sha256:" + done.stdout.split()[0]


def _tree_root(leaves: list[bytes]) -> bytes:
    """RFC 6962 MTH of leaf hashes, written out independently of the project's."""
    if len(leaves) == 1:
        return leaves[0]
    split = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(
        b"\x01" + _tree_root(leaves[:split]) + _tree_root(leaves[split:])
    ).digest()


def tree_checksum(lines: list[bytes]) -> str:
    """The corpus checksum v2 (docs/replay.md) of canonical lines, each ending in a newline."""
    leaves = [
        hashlib.sha256(b"\x00" + b"".join(lines[i : i + 256])).digest()
        for i in range(0, len(lines), 256)
    ]
    head = (
        b"attested-replay corpus checksum v2: cases in blocks of 256, RFC 6962 tree\n"
        + str(len(lines)).encode()
        + b"\n"
        + _tree_root(leaves).hex().encode()
        + b"\n"
    )
    return "sha256:" + hashlib.sha256(head).hexdigest()


def orjson_floor(path: Path) -> str:
    """The floor of the realistic shape: orjson parse + sorted dump + SHA-256 of each line."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for line in handle:
            digest.update(orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


def reference_checksum(path: Path) -> str:
    with path.open("rb") as handle:
        return tree_checksum([rfc8785.dumps(json.loads(line)) + b"\n" for line in handle])


def cpu_seconds() -> float:
    """CPU time of this process and of every child it waited for (``sha256sum``, and the
    processes the checksum forks for its parts: ``runner/corpus/parallel_scan.py``)."""
    # os.times() counts in clock ticks (10 ms); process_time and getrusage in microseconds.
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def paired(
    ours: Callable[[], object], floor: Callable[[], object], repeat: int
) -> tuple[float, float, list[float], list[float]]:
    """Least wall seconds of ours and of the floor, and each run's wall and CPU ratios (the
    two back to back in every run, so load hits both alike)."""
    times: list[list[float]] = [[], []]
    cpus: list[list[float]] = [[], []]
    for _ in range(repeat):
        for index, action in enumerate((ours, floor)):
            start, cpu = time.perf_counter(), cpu_seconds()
            action()
            times[index].append(time.perf_counter() - start)
            cpus[index].append(cpu_seconds() - cpu)
    ratios = [a / b for a, b in zip(*times, strict=True)]
    cpu_ratios = [a / b for a, b in zip(*cpus, strict=True)]
    return min(times[0]), min(times[1]), ratios, cpu_ratios


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

    report: dict[str, object] = {"machine": machine(), "load_average": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="corpus-bench-") as scratch:
        corpora = {
            "flat": Path(scratch) / "flat",
            "realistic": Path(scratch) / "realistic",
            "realistic_small": Path(scratch) / "realistic-small",
        }
        for directory in corpora.values():
            directory.mkdir()
        write_flat_cases(corpora["flat"] / "cases.jsonl", args.cases)
        write_realistic_cases(corpora["realistic"] / "cases.jsonl", args.cases)
        write_realistic_cases(corpora["realistic_small"] / "cases.jsonl", args.small)

        flat_file = corpora["flat"] / "cases.jsonl"
        if compute_checksum(corpora["flat"]) != tree_checksum(
            flat_file.read_bytes().splitlines(keepends=True)
        ):
            raise SystemExit("the flat checksum differs from the tree over the file's lines")
        small_file = corpora["realistic_small"] / "cases.jsonl"
        if compute_checksum(corpora["realistic_small"]) != reference_checksum(small_file):
            raise SystemExit("the realistic checksum differs from the rfc8785 reference")

        realistic_file = corpora["realistic"] / "cases.jsonl"
        rows: list[tuple[str, str, Callable[[], object]]] = [
            ("flat", "sha256sum", lambda: sha256sum(flat_file)),
            ("realistic", "sha256sum", lambda: sha256sum(realistic_file)),
            (
                "realistic_small",
                "orjson_parse_sorted_dump_sha256",
                lambda: orjson_floor(small_file),
            ),
        ]
        for name, floor_name, floor in rows:
            directory = corpora[name]
            ours, base, ratios, cpu_ratios = paired(
                functools.partial(compute_checksum, directory), floor, args.repeat
            )
            goal = 2.0 if name == "realistic_small" else 4.0
            report[name] = {
                "cases": args.small if name == "realistic_small" else args.cases,
                "cases_jsonl_bytes": (directory / "cases.jsonl").stat().st_size,
                "checksum_seconds_min": round(ours, 3),
                f"{floor_name}_seconds_min": round(base, 3),
                "ratio_min": round(min(ratios), 2),
                "ratio_spread": round(max(ratios) / min(ratios), 2),
                "cpu_ratio_min": round(min(cpu_ratios), 2),
                "cpu_ratios": [round(ratio, 2) for ratio in cpu_ratios],
                "runs_meeting_goal": f"{sum(r <= goal for r in ratios)} of {len(ratios)}",
                "goal": f"<= {goal:g}",
            }
        report["peak_rss_kib"] = {
            "import_only": peak_rss_kib(None),
            f"realistic_{args.small}_cases": peak_rss_kib(corpora["realistic_small"]),
            f"realistic_{args.cases}_cases": peak_rss_kib(corpora["realistic"]),
        }
    report["load_average_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
