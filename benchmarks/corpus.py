"""Corpus checksum on today's flat shape and on the shape users have, against floors measured
in the same run.

    python benchmarks/corpus.py [--cases 1000000] [--small 100000] [--repeat 3]

Two shapes (``benchmarks/shapes.py``), each written to a temporary directory:

* **flat**: today's benchmark corpus, already canonical with printable-ASCII strings (the
  file *is* the byte stream the checksum hashes: the script checks that ``sha256sum`` prints
  the same digest). Floor: ``sha256sum`` of the file. Goal: <= 6x.
* **realistic**: nested inputs, non-ASCII text, floats of every kind, keys in any order,
  spaces (nothing canonical). Floors: ``sha256sum`` of the file (goal <= 6x, at ``--cases``)
  and, at ``--small``, "orjson parse + sorted dump + SHA-256 of each line" (goal <= 2x).
  The checksum must equal the reference computed with the independent ``rfc8785`` package
  (checked on the small corpus).

Every time is the median of ``--repeat`` runs, the checksum and its floor alternating.
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
import statistics
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


def orjson_floor(path: Path) -> str:
    """The floor of the realistic shape: orjson parse + sorted dump + SHA-256 of each line."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for line in handle:
            digest.update(orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


def reference_checksum(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for line in handle:
            digest.update(rfc8785.dumps(json.loads(line)) + b"\n")
    return "sha256:" + digest.hexdigest()


def paired(ours: Callable[[], object], floor: Callable[[], object], repeat: int) -> list[float]:
    """[median ours, median floor] seconds, the two alternating so load hits both alike."""
    times: list[list[float]] = [[], []]
    for _ in range(repeat):
        for index, action in enumerate((ours, floor)):
            start = time.perf_counter()
            action()
            times[index].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


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

    report: dict[str, object] = {"machine": machine()}
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
        if compute_checksum(corpora["flat"]) != sha256sum(flat_file):
            raise SystemExit("sha256sum hashed different bytes than the checksum")
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
            ours, base = paired(functools.partial(compute_checksum, directory), floor, args.repeat)
            report[name] = {
                "cases": args.small if name == "realistic_small" else args.cases,
                "cases_jsonl_bytes": (directory / "cases.jsonl").stat().st_size,
                "checksum_seconds": round(ours, 3),
                f"{floor_name}_seconds": round(base, 3),
                "ratio": round(ours / base, 2),
                "goal": "<= 2" if name == "realistic_small" else "<= 6",
            }
        report["peak_rss_kib"] = {
            "import_only": peak_rss_kib(None),
            f"realistic_{args.small}_cases": peak_rss_kib(corpora["realistic_small"]),
            f"realistic_{args.cases}_cases": peak_rss_kib(corpora["realistic"]),
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
