"""End-to-end replay throughput: ``replay_corpus`` on a generated corpus.

    python benchmarks/replay.py [--cases 100000] [--repeat 3]
    python benchmarks/replay.py --corpus runner/examples/corpus

Generates a corpus with ``scripts/make_example_corpus.py`` (two arms, two runs) unless
``--corpus`` names one, then reports the median time of the case pass alone
(``scan_cases`` collecting labels) and of the whole replay (validate, checksum, evaluation
digest, score, report, result digest), as cases per second and case results per second.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def generate(out: Path, cases: int) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_example_corpus", REPO / "scripts" / "make_example_corpus.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(out, cases, 8537)


def median_time(action: object, repeat: int) -> float:
    assert callable(action)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from runner.corpus.checksum import scan_cases
    from runner.pipeline.replay import replay_corpus

    with tempfile.TemporaryDirectory(prefix="replay-bench-") as scratch:
        corpus = args.corpus
        if corpus is None:
            corpus = Path(scratch) / "corpus"
            generate(corpus, args.cases)
        outcome = replay_corpus(corpus)
        runs = sum(1 for _ in (corpus / "runs.jsonl").open("rb"))
        scan_time = median_time(lambda: scan_cases(corpus, collect_labels=True), args.repeat)
        replay_time = median_time(lambda: replay_corpus(corpus), args.repeat)
        runs_bytes = (corpus / "runs.jsonl").stat().st_size

    cases = outcome.case_count
    results = cases * runs
    report = {
        "machine": machine(),
        "cases": cases,
        "run_records": runs,
        "runs_jsonl_bytes": runs_bytes,
        "case_pass_seconds_median": round(scan_time, 3),
        "replay_seconds_median": round(replay_time, 3),
        "replay_cases_per_second": round(cases / replay_time),
        "replay_case_results_per_second": round(results / replay_time),
        "runs_phase_case_results_per_second": round(results / (replay_time - scan_time)),
        "result_digest": outcome.result_digest,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
