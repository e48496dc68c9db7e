"""A sharded replay against the unsharded one, on a realistic corpus, as separate pods would run.

    python benchmarks/shards.py [--cases 400000] [--shards 2,4,8] [--repeat 3] [--work DIR]

The corpus has the shape users have (``benchmarks/shapes.py``: nested inputs, non-ASCII text,
floats, keys in any order, default ``json.dumps`` spacing) with 2 arms x 2 runs whose case
results carry float costs and latencies in random key order. Every measurement runs in a
process of its own, one after another on this machine (as the pods of an Indexed Job would,
each on its own VM), and reports that process's CPU time for the work (imports excluded): the
least over ``--repeat`` rounds, each round measuring everything once:

* the corpus checksum of ``cases.jsonl`` (what a shard without the runs index checks whole;
  with the index, since checksum v2, a shard hashes only its own blocks) and the integrity
  pass of an unsharded replay (the
  checksum and the evaluation digest over plan, marks and every run record);
* ``corpus index`` (``runs.index.json``: the leaves of every block of the cases and runs, and
  where each run's blocks are), which the operator runs once per corpus, before the Job,
  outside any TEE;
* the unsharded ``run`` (simulated evidence: report and verification included);
* every shard's ``run --shard-index I --shard-count N`` for each N, with the runs index beside
  the corpus (each shard hashes only its own blocks of the run records, and seeks past the
  others);
* ``merge`` of the N shard envelopes (which verifies the merged envelope), and verifying the
  merged envelope alone against N single verifications of one shard envelope.

CPU time is the process's and its children's (the corpus checksum scans the parts of a large
``cases.jsonl`` in forked children, ``runner/corpus/parallel_scan.py``): the work, wherever it
runs.

Goal (issue 30): the slowest shard's CPU time at most 1.3 x (unsharded / N), its checksum
included, and verifying a merged envelope of N shards at most N single verifications. The first
is printed for the least CPU of each measurement and, as a ratio within each round, with its
best, spread and the rounds that meet it; the exit status is 0 only when it holds in every
round and the second holds, for every N. The shard line also prints issue 16's looser bound
(1.3 x unsharded / N plus the checksum of ``cases.jsonl``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from benchmarks.memory import own_peak_rss_kib  # noqa: E402

RUN_ID = "bench-shards"
TENANT = "bench"


# -- the corpus -----------------------------------------------------------------------------


def write_corpus(directory: Path, cases: int, seed: int = 16) -> None:
    """Realistic cases (``shapes.write_realistic_cases``) and realistic run records."""
    from benchmarks.shapes import case_ids, write_realistic_cases
    from runner.corpus.checksum import compute_checksum

    directory.mkdir(parents=True, exist_ok=True)
    labels = write_realistic_cases(directory / "cases.jsonl", cases)
    plan = {
        "question": "Does the candidate flag risky messages better?",
        "decision": "Adopt A1 if every mark is met.",
        "arms": [
            {"arm_id": "A0", "role": "baseline", "change": "current prompt"},
            {"arm_id": "A1", "role": "candidate", "change": "prompt with examples"},
        ],
        "set_ref": compute_checksum(directory),
        "metrics": ["accuracy_points", "net_points", "cost_per_case_usd", "p95_latency_ms"],
        "runs_per_arm": 2,
        "scoring": {"method": "exact_match", "judge_use": "none"},
        "spread_limit_points": 5,
        "cost_accounting": "usage x dated price",
        "positive_label": "flag",
    }
    marks = {
        "evaluation_ref": "bench-shards",
        "committed_by": "human",
        "committed_at": "2026-12-01",
        "immutable": True,
        "marks": [
            {"id": "M1", "metric": "net_gain_points", "arm": "A1", "baseline": "A0",
             "threshold": 1, "rule": "A1 beats A0 by a point"},
            {"id": "M2", "metric": "p95_latency_at_most", "arm": "A1", "threshold": 2500,
             "rule": "A1's p95 latency at most 2.5 s"},
            {"id": "M3", "metric": "spread_points_below", "arm": "A1", "threshold": 5,
             "rule": "A1 is stable"},
            {"id": "M4", "metric": "cost_per_case_at_most", "arm": "A1", "threshold": 0.02,
             "rule": "A1 costs at most 2 cents a case"},
        ],
    }  # fmt: skip
    (directory / "plan.json").write_text(json.dumps(plan, indent=2, ensure_ascii=False))
    (directory / "marks.json").write_text(json.dumps(marks, indent=2))
    from runner.corpus.evaluation_files import load_evaluation

    marks_ref = load_evaluation(directory).marks_ref
    rng = random.Random(seed)
    ids = case_ids(cases)
    with (directory / "runs.jsonl").open("w", encoding="utf-8") as out:
        for arm, right in (("A0", 0.72), ("A1", 0.81)):
            for run_index in (1, 2):
                entries = []
                for case_id, label in zip(ids, labels, strict=True):
                    entry: dict[str, Any] = {
                        "case_id": case_id,
                        "prediction": label
                        if rng.random() < right
                        else ("clear" if label == "flag" else "flag"),
                        "cost_usd": rng.randint(200, 4000) * 2.5e-7 + rng.random() * 1e-6,
                        "latency_ms": round(rng.lognormvariate(6.6, 0.45), 2),
                    }
                    if rng.random() < 0.002:
                        entry.update(prediction=None, error="timeout")
                    items = list(entry.items())
                    rng.shuffle(items)
                    entries.append(dict(items))
                record = {
                    "usage": {"source": "benchmark", "input_tokens": cases * 310},
                    "cases": entries,
                    "arm_id": arm,
                    "run_index": run_index,
                    "marks_ref": marks_ref,
                    "set_ref": plan["set_ref"],
                }
                out.write(json.dumps(record, ensure_ascii=False) + "\n")


# -- what each child process measures ---------------------------------------------------------


#: What the measured tasks import, imported before their clock starts: the measurement is
#: the work's CPU, not the interpreter's start-up (every pod pays that once, whatever N).
_TASK_MODULES = (
    "attestation.envelope.merged_verification",
    "attestation.envelope.verification",
    "runner.corpus.checksum",
    "runner.corpus.evaluation_files",
    "runner.corpus.run_records",
    "runner.corpus.runs_index",
    "runner.evidence.simulated",
    "runner.pipeline",
    "runner.pipeline.merge",
)


def child(task: str, work: Path, argument: str) -> dict[str, Any]:
    """One measurement, in this (fresh) process: CPU seconds of the work alone (its imports
    done before the clock starts)."""
    for module in _TASK_MODULES:
        importlib.import_module(module)
    corpus = work / "corpus"
    state = work / "state"
    start = cpu_seconds()
    report: dict[str, Any] = {}
    if task == "checksum":
        from runner.corpus.checksum import compute_checksum

        compute_checksum(corpus)
    elif task == "integrity":
        from runner.corpus.checksum import read_case_ids, scan_cases
        from runner.corpus.evaluation_files import load_evaluation
        from runner.corpus.run_records import CorpusCases, IgnoreCases, RunReader

        scan = scan_cases(corpus, collect_labels=True)
        assert scan.labels is not None
        reader = RunReader(
            corpus,
            load_evaluation(corpus),
            checksum=scan.checksum,
            cases=CorpusCases(
                scan.case_count, scan.labels.id_blocks, lambda: read_case_ids(corpus)
            ),
        )
        for _ in reader.runs(IgnoreCases):
            pass
    elif task == "index":
        from runner.pipeline.replay import write_runs_index

        report["evaluationDigest"] = write_runs_index(corpus).evaluation_digest
    elif task == "run":
        from runner.pipeline import RunRequest, run

        shard = json.loads(argument) if argument else None
        out = work / ("unsharded.json" if shard is None else f"shard-{shard[1]}-{shard[0]}.json")
        outcome = run(
            RunRequest(
                corpus=str(corpus),
                run_id=RUN_ID,
                tenant=TENANT,
                evidence="simulated",
                state_dir=state,
                out=out,
                shard_index=None if shard is None else shard[0],
                shard_count=None if shard is None else shard[1],
            )
        )
        report["resultDigest"] = outcome.outcome.result_digest
        report["evaluationDigest"] = outcome.outcome.evaluation_digest
        report["envelopeBytes"] = len(outcome.envelope_bytes)
    elif task == "merge":
        from runner.evidence.simulated import load_or_create_simulated_amd
        from runner.pipeline.merge import merge_shards

        count = int(argument)
        root = load_or_create_simulated_amd(state).root_fingerprint
        start = cpu_seconds()  # the simulated root is read from disk, not measured
        merged = merge_shards(
            [work / f"shard-{count}-{index}.json" for index in range(count)],
            out=work / f"merged-{count}.json",
            simulated_root=root,
        )
        report["resultDigest"] = merged.envelope.result_digest
        report["envelopeBytes"] = len(merged.envelope_bytes)
    elif task in ("verify-merged", "verify-shard"):
        from datetime import UTC, datetime

        from attestation.envelope.expected import ExpectedValues
        from attestation.envelope.merged import parse_any_envelope
        from attestation.envelope.model import Envelope, ShardPosition
        from attestation.envelope.verification import verify_envelope
        from runner.evidence.simulated import load_or_create_simulated_amd

        count = int(argument)
        root = load_or_create_simulated_amd(state).root_fingerprint
        name = f"merged-{count}.json" if task == "verify-merged" else f"shard-{count}-0.json"
        data = (work / name).read_bytes()
        parsed = parse_any_envelope(data)
        bound = parsed.binding if isinstance(parsed, Envelope) else parsed
        expected = ExpectedValues.model_validate(
            {
                "runId": RUN_ID,
                "corpusChecksum": bound.corpus_checksum,
                "evaluationDigest": bound.evaluation_digest,
                "simulatedRoots": [root],
            }
        )
        shard = ShardPosition(index=0, count=count) if task == "verify-shard" else None
        start = cpu_seconds()
        verdict = verify_envelope(data, expected, now=datetime.now(UTC), shard=shard)
        assert verdict.ok, verdict.summary()
    else:
        raise SystemExit(f"unknown task {task}")
    report["cpu"] = cpu_seconds() - start
    report["peakRssMiB"] = own_peak_rss_kib() / 1024
    return report


def cpu_seconds() -> float:
    """CPU time of this process and of the children it waited for (the processes the corpus
    checksum forks for its parts: ``runner/corpus/parallel_scan.py``)."""
    # os.times() counts in clock ticks (10 ms); process_time and getrusage in microseconds.
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure(work: Path, task: str, argument: str = "") -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (as a pod would) and read its report."""
    answer = subprocess.run(
        [sys.executable, __file__, "--child", task, "--work", str(work), "--argument", argument],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(answer.stdout.strip().splitlines()[-1])
    return result


class Least:
    """Each measurement's report with the least CPU over the rounds. Other work on a shared
    machine only ever adds CPU time (cache and memory contention, steal), so the least is the
    closest to the work's own cost; a round measures everything once, so the samples of each
    measurement are minutes apart rather than back to back."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.best: dict[tuple[str, str], dict[str, Any]] = {}
        #: Every round's CPU seconds of each measurement, in round order.
        self.rounds: dict[tuple[str, str], list[float]] = {}

    def __call__(self, task: str, argument: str = "") -> dict[str, Any]:
        report = measure(self.work, task, argument)
        self.rounds.setdefault((task, argument), []).append(float(report["cpu"]))
        kept = self.best.get((task, argument))
        if kept is None or report["cpu"] < kept["cpu"]:
            self.best[task, argument] = report
        return report

    def cpu(self, task: str, argument: str = "") -> float:
        return float(self.best[task, argument]["cpu"])


# -- the report -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=400_000)
    parser.add_argument("--shards", default="2,4,8", help="shard counts, comma-separated")
    parser.add_argument("--work", type=Path, help="keep the corpus and envelopes here (reused)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of every measurement; the least CPU is kept"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--argument", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.work, args.argument)))
        return 0
    counts = [int(text) for text in args.shards.split(",")]
    with tempfile.TemporaryDirectory(prefix="shards-bench-") as scratch:
        work = args.work or Path(scratch)
        corpus = work / "corpus"
        if not (corpus / "runs.jsonl").exists():
            started = time.perf_counter()
            write_corpus(corpus, args.cases)
            print(f"generated {args.cases} cases in {time.perf_counter() - started:.0f} s")
        sizes = {name: (corpus / name).stat().st_size for name in ("cases.jsonl", "runs.jsonl")}
        print(
            f"corpus: {args.cases} cases, 2 arms x 2 runs; cases.jsonl {sizes['cases.jsonl'] >> 20}"
            f" MiB, runs.jsonl {sizes['runs.jsonl'] >> 20} MiB; {machine()}; least CPU of "
            f"{args.repeat} round(s); {load()}"
        )
        least = Least(work)
        for _ in range(args.repeat):
            run_round(least, counts)
        checksum, integrity = least.cpu("checksum"), least.cpu("integrity")
        whole = least.best["run", ""]
        unsharded = least.cpu("run")
        print(f"checksum of cases.jsonl        {checksum:8.2f} s CPU")
        print(f"integrity pass (checksum + evaluation digest) {integrity:.2f} s CPU")
        print(f"corpus index (operator, once)  {least.cpu('index'):8.2f} s CPU")
        print(
            f"unsharded run                  {unsharded:8.2f} s CPU, peak "
            f"{whole['peakRssMiB']:.0f} MiB, envelope {whole['envelopeBytes']} B"
        )
        ok = True
        for count in counts:
            cpus = [least.cpu("run", json.dumps([i, count])) for i in range(count)]
            share = unsharded / count
            goal = 1.3 * share
            loose = goal + checksum
            merged = least.best["merge", str(count)]
            verify_merged = least.cpu("verify-merged", str(count))
            verify_one = least.cpu("verify-shard", str(count))
            met = max(cpus) <= goal  # the goal of issue 30
            # The same ratio within each round (its shards against its own unsharded run).
            ratios = [
                max(least.rounds["run", json.dumps([i, count])][r] for i in range(count))
                / (least.rounds["run", ""][r] / count)
                for r in range(args.repeat)
            ]
            met_rounds = sum(ratio <= 1.3 for ratio in ratios)
            ok = ok and met_rounds == len(ratios) and verify_merged <= count * verify_one
            print(
                f"N={count}: shard CPU {', '.join(f'{cpu:.2f}' for cpu in cpus)} s; max "
                f"{max(cpus):.2f} = {max(cpus) / share:.2f} x unsharded/N; goal "
                f"1.3 x unsharded/N = {goal:.2f} ({'met' if met else 'missed'}); issue 16's "
                f"+ checksum = {loose:.2f} ({'met' if max(cpus) <= loose else 'missed'})"
            )
            print(
                f"      each round, slowest shard / (unsharded/N): "
                f"{', '.join(f'{ratio:.2f}' for ratio in ratios)}; best {min(ratios):.2f}, "
                f"spread {max(ratios) / min(ratios):.2f}; goal <= 1.3 met in {met_rounds} of "
                f"{len(ratios)} rounds"
            )
            print(
                f"      merge + verify {merged['cpu']:.3f} s CPU, merged envelope "
                f"{merged['envelopeBytes']} B (result digest = unsharded: yes); verify merged "
                f"{verify_merged:.3f} s vs {count} x one shard {verify_one:.3f} s = "
                f"{count * verify_one:.3f} s ({verify_merged / (count * verify_one):.2f}x)"
            )
        print(f"end: {load()}")
    return 0 if ok else 1


def run_round(least: Least, counts: list[int]) -> None:
    """Every measurement once, in the order pods would run: the unsharded replay, then for
    each N its shards one after another, their merge and the verifications."""
    least("checksum")
    least("integrity")
    whole = least("run")
    indexed = least("index")
    assert indexed["evaluationDigest"] == whole["evaluationDigest"], "index != unsharded"
    for count in counts:
        for index in range(count):
            least("run", json.dumps([index, count]))
        merged = least("merge", str(count))
        assert merged["resultDigest"] == whole["resultDigest"], "merged != unsharded"
        least("verify-merged", str(count))
        least("verify-shard", str(count))


def load() -> str:
    """The machine's load average (CPU times are comparable under load, wall times not)."""
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}"


if __name__ == "__main__":
    raise SystemExit(main())
