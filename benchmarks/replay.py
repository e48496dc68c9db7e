"""End-to-end replay (``replay_corpus``: validate, checksum, evaluation digest, score, report,
result digest) against the floor of parsing the same files, on both corpus shapes.

    python benchmarks/replay.py [--cases 400000] [--memory 100000 1000000] [--repeat 3]
                                [--workdir DIR] [--skip-flat]
    python benchmarks/replay.py --corpus runner/examples/corpus --memory

Shapes (``benchmarks/shapes.py``), two arms of two runs each:

* **realistic**: ``write_realistic_corpus``: nested non-ASCII inputs written non-canonically,
  run records in the pack's one-line template with ``json.dumps`` spacing and escapes,
  measured latencies (full-precision and integral floats, integers), token-priced costs,
  errors, unknown costs and latencies, off-label answers.
* **flat**: the bundled example's generator (``scripts/make_example_corpus.py``): canonical
  lines, flat string inputs.

Floor: ``orjson.loads`` of every line of ``cases.jsonl`` and ``runs.jsonl`` (a 400k-case run
is one line), measured in the same process, alternating with the replay so load hits both
alike. Goal for the realistic shape: replay <= 5x the floor. Times are medians of
``--repeat``; both wall-clock and process CPU ratios are printed (CPU is steadier on a
shared machine).

Memory: peak RSS (``VmHWM``) of a fresh process replaying the realistic shape at each
``--memory`` size, beside a process that only imports the replay. Goal: flat, the largest at
most 1.3x the smallest + 30 MB.

``--workdir`` keeps the generated corpora there and reuses them on the next run;
``--corpus DIR`` measures that corpus instead of the generated shapes.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.shapes import write_realistic_corpus  # noqa: E402

_MEASURE = """
import sys
from pathlib import Path
from benchmarks.memory import own_peak_rss_kib
from runner.pipeline.replay import replay_corpus
for corpus in sys.argv[1:]:
    replay_corpus(Path(corpus))
print(own_peak_rss_kib())
"""


def peak_rss_kib(corpus: Path | None) -> int:
    """Peak RSS (kiB) of a fresh process that replays ``corpus`` (or only imports)."""
    argv = [sys.executable, "-c", _MEASURE, *([str(corpus)] if corpus else [])]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO)
    return int(done.stdout.strip())


def generate_flat(out: Path, cases: int) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_example_corpus", REPO / "scripts" / "make_example_corpus.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(out, cases, 8537)


def corpus(workdir: Path, shape: str, cases: int) -> Path:
    """The corpus of ``shape`` with ``cases`` cases under ``workdir`` (made once)."""
    directory = workdir / f"{shape}-{cases}"
    done = directory / ".complete"
    if not done.exists():
        directory.mkdir(parents=True, exist_ok=True)
        if shape == "realistic":
            write_realistic_corpus(directory, cases)
        else:
            generate_flat(directory, cases)
        done.touch()
    return directory


def parse_floor(directory: Path) -> None:
    """The floor: orjson parses every line of cases.jsonl and runs.jsonl."""
    for name in ("cases.jsonl", "runs.jsonl"):
        with (directory / name).open("rb") as handle:
            for line in handle:
                orjson.loads(line)


def paired(
    ours: Callable[[], object], floor: Callable[[], object], repeat: int
) -> dict[str, float]:
    """Median wall and CPU seconds of both, alternating so load hits both alike."""
    wall: list[list[float]] = [[], []]
    cpu: list[list[float]] = [[], []]
    for _ in range(repeat):
        for index, action in enumerate((ours, floor)):
            start, start_cpu = time.perf_counter(), time.process_time()
            action()
            wall[index].append(time.perf_counter() - start)
            cpu[index].append(time.process_time() - start_cpu)
    ours_wall, floor_wall = (statistics.median(times) for times in wall)
    ours_cpu, floor_cpu = (statistics.median(times) for times in cpu)
    return {
        "replay_seconds": round(ours_wall, 3),
        "floor_seconds": round(floor_wall, 3),
        "ratio": round(ours_wall / floor_wall, 2),
        "replay_cpu_seconds": round(ours_cpu, 3),
        "floor_cpu_seconds": round(floor_cpu, 3),
        "cpu_ratio": round(ours_cpu / floor_cpu, 2),
    }


def machine() -> str:
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (
        f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=400_000)
    parser.add_argument("--memory", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--skip-flat", action="store_true")
    parser.add_argument("--corpus", type=Path, help="measure this corpus instead")
    args = parser.parse_args(argv)
    from runner.pipeline.replay import replay_corpus

    report: dict[str, object] = {"machine_before": machine()}
    with tempfile.TemporaryDirectory(prefix="replay-bench-") as scratch:
        workdir = args.workdir or Path(scratch)
        shapes = ["realistic"] if args.skip_flat else ["realistic", "flat"]
        for shape in ["given"] if args.corpus else shapes:
            directory = args.corpus or corpus(workdir, shape, args.cases)
            outcome = replay_corpus(directory)
            with (directory / "runs.jsonl").open("rb") as handle:
                run_records = sum(1 for _ in handle)
            row: dict[str, object] = {
                "cases": outcome.case_count,
                "run_records": run_records,
                "cases_jsonl_bytes": (directory / "cases.jsonl").stat().st_size,
                "runs_jsonl_bytes": (directory / "runs.jsonl").stat().st_size,
            }
            row.update(
                paired(
                    functools.partial(replay_corpus, directory),
                    functools.partial(parse_floor, directory),
                    args.repeat,
                )
            )
            row["goal"] = "ratio <= 5" if shape == "realistic" else "-"
            row["result_digest"] = outcome.result_digest
            report[shape] = row
        if args.memory:
            sizes = sorted(args.memory)
            peaks = {size: peak_rss_kib(corpus(workdir, "realistic", size)) for size in sizes}
            smallest, largest = peaks[sizes[0]] / 1024, peaks[sizes[-1]] / 1024
            report["peak_rss_mib"] = {
                "import_only": round(peak_rss_kib(None) / 1024, 1),
                **{f"realistic_{size}_cases": round(peaks[size] / 1024, 1) for size in sizes},
                "goal": f"largest <= 1.3 x smallest + 30 MiB = {1.3 * smallest + 30:.1f}",
                "flat": largest <= 1.3 * smallest + 30,
            }
    report["machine_after"] = machine()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
