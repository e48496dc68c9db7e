"""Sharded replay at scale: ``run --shard-count N`` + ``merge`` against the unsharded run.

    python benchmarks/shard_merge.py [--cases 4000000] [--shards 2,4,8] [--work DIR]

Generates (once per ``--work`` directory) a corpus of the realistic shape
(``benchmarks/shapes.py``: nested, non-ASCII, keys in any order) with 2 arms x 2 runs whose
case results all carry a latency (so every run's p95 is proven by tail openings in the merged
envelope), writes its runs index, runs the unsharded replay, then for each N every shard
(``run --shard-index I --shard-count N``, simulated evidence, one process after another) and
``merge`` (which verifies the merged envelope as a tenant would). It prints, for each N, the
sizes that issue 30 is about: the largest shard envelope (bounded: no latencies), the largest
tails file (the latencies, beside the envelope), the merged envelope against the bound the
early refusal computes (``attestation.contracts.merged_envelope_bound``) and the envelope
limit, and whether the merged report is byte for byte the unsharded one. Exit 0 only when
every merged report is the unsharded one and every size is within its limit.

Not a timing benchmark: the machine may be shared; wall times are printed for orientation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RUN_ID = "bench-shard-merge"
TENANT = "bench"


def write_corpus(directory: Path, count: int, seed: int = 30) -> None:
    """Realistic cases and 2 x 2 runs, every case result with a latency (streamed)."""
    from attestation.contracts import sha256_digest
    from attestation.encoding.canonical import canonicalize
    from benchmarks.shapes import case_ids, write_realistic_cases
    from runner.corpus.checksum import compute_checksum

    directory.mkdir(parents=True, exist_ok=True)
    labels = write_realistic_cases(directory / "cases.jsonl", count, seed)
    checksum = compute_checksum(directory)
    marks = {
        "evaluation_ref": "shard-merge-scale",
        "committed_by": "human",
        "committed_at": "2026-12-05",
        "immutable": True,
        "marks": [
            {"id": "M1", "metric": "net_gain_points", "arm": "A1", "baseline": "A0",
             "threshold": 1, "rule": "A1 beats A0 by a point"},
            {"id": "M2", "metric": "p95_latency_at_most", "arm": "A1", "threshold": 3900,
             "rule": "A1's p95 latency at most 3.9 s"},
        ],
    }  # fmt: skip
    plan = {
        "question": "Does the candidate flag risky messages better?",
        "decision": "Adopt A1 if every mark is met.",
        "arms": [
            {"arm_id": "A0", "role": "baseline", "change": "current prompt"},
            {"arm_id": "A1", "role": "candidate", "change": "prompt with examples"},
        ],
        "set_ref": checksum,
        "metrics": ["accuracy_points", "net_points", "cost_per_case_usd", "p95_latency_ms"],
        "runs_per_arm": 2,
        "scoring": {"method": "exact_match", "judge_use": "none"},
        "spread_limit_points": 5,
        "cost_accounting": "tokens times list price, USD",
        "positive_label": "flag",
    }  # fmt: skip
    (directory / "plan.json").write_text(json.dumps(plan, indent=2), encoding="utf-8")
    (directory / "marks.json").write_text(json.dumps(marks, indent=2), encoding="utf-8")
    marks_ref = sha256_digest(canonicalize(marks))
    rng = random.Random(seed + 1)
    ids = case_ids(count)
    with (directory / "runs.jsonl").open("wb") as out:
        for arm_id, hit_rate in (("A0", 0.78), ("A1", 0.86)):
            for run_index in (1, 2):
                head = {"arm_id": arm_id, "run_index": run_index, "set_ref": checksum,
                        "marks_ref": marks_ref,
                        "usage": {"source": "benchmark", "input_tokens": 41 * count}}  # fmt: skip
                out.write(json.dumps(head)[:-1].encode() + b', "cases": [')
                for start in range(0, count, 10_000):
                    chunk = zip(
                        ids[start : start + 10_000], labels[start : start + 10_000], strict=True
                    )
                    entries = (
                        json.dumps(
                            {
                                "latency_ms": rng.choice(
                                    (rng.uniform(80, 4000), float(rng.randint(80, 4000)))
                                ),
                                "case_id": case_id,
                                "cost_usd": rng.randint(20, 3000) * 3e-06,
                                "prediction": label
                                if rng.random() < hit_rate
                                else ("clear" if label == "flag" else "flag"),
                            }
                        )
                        for case_id, label in chunk
                    )
                    out.write((", " if start else "").encode() + ", ".join(entries).encode())
                out.write(b"]}\n")


def attested_replay(*args: str) -> float:
    """Run ``attested-replay ARGS`` in a process of its own; its wall time."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    answer = subprocess.run(
        [sys.executable, "-m", "runner", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if answer.returncode != 0:
        sys.exit(f"attested-replay {' '.join(args)} exited {answer.returncode}:\n{answer.stderr}")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    from attestation.contracts import (
        MAX_ENVELOPE_BYTES,
        MAX_SHARD_ENVELOPE_BYTES,
        merged_envelope_bound,
    )

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=4_000_000)
    parser.add_argument("--shards", default="2,4,8")
    parser.add_argument("--work", type=Path, help="directory kept between invocations")
    args = parser.parse_args(argv)
    counts = [int(text) for text in args.shards.split(",")]
    work = args.work or Path(tempfile.mkdtemp(prefix="shard-merge-"))
    corpus = work / f"corpus-{args.cases}"
    if not (corpus / "runs.jsonl").exists():
        started = time.monotonic()
        write_corpus(corpus, args.cases)
        print(f"corpus of {args.cases} cases written in {time.monotonic() - started:.0f} s")
    if not (corpus / "runs.index.json").exists():
        attested_replay("corpus", "index", str(corpus))
    sizes = {name: (corpus / name).stat().st_size for name in ("cases.jsonl", "runs.jsonl")}
    print(f"{args.cases} cases, 2 arms x 2 runs; cases.jsonl {sizes['cases.jsonl']} B, "
          f"runs.jsonl {sizes['runs.jsonl']} B")  # fmt: skip
    common = ["--corpus", str(corpus), "--run-id", RUN_ID, "--tenant", TENANT]
    common += ["--evidence", "simulated", "--state-dir", str(work / "state")]
    out = work / f"out-{args.cases}"
    out.mkdir(exist_ok=True)
    unsharded = out / "unsharded.json"
    seconds = attested_replay("run", *common, "--out", str(unsharded))
    reference = unsharded.with_name(unsharded.name + ".result.json").read_bytes()
    print(f"unsharded: envelope {unsharded.stat().st_size} B, {seconds:.0f} s")
    ok = True
    for count in counts:
        shards = [out / f"n{count}-shard-{index}.json" for index in range(count)]
        started = time.monotonic()
        for index, shard in enumerate(shards):
            attested_replay(
                "run", *common, "--shard-index", str(index), "--shard-count", str(count),
                "--out", str(shard),
            )  # fmt: skip
        shard_seconds = time.monotonic() - started
        merged = out / f"n{count}-merged.json"
        merge_seconds = attested_replay(
            "merge", *map(str, shards), "--out", str(merged), "--trust-simulated-root",
            "--state-dir", str(work / "state"),
        )  # fmt: skip
        same = merged.with_name(merged.name + ".result.json").read_bytes() == reference
        largest_shard = max(shard.stat().st_size for shard in shards)
        largest_tails = max(shard.with_name(shard.name + ".tails.json").stat().st_size
                            for shard in shards)  # fmt: skip
        merged_size = merged.stat().st_size
        bound = merged_envelope_bound(count, 4)[0]
        within = largest_shard <= MAX_SHARD_ENVELOPE_BYTES and merged_size <= bound
        within = within and bound <= MAX_ENVELOPE_BYTES
        ok = ok and same and within
        print(
            f"N={count}: largest shard envelope {largest_shard} B (limit "
            f"{MAX_SHARD_ENVELOPE_BYTES}), largest tails file {largest_tails} B; merged "
            f"envelope {merged_size} B (bound {bound}, limit {MAX_ENVELOPE_BYTES}); merged "
            f"report = unsharded byte for byte: {'yes' if same else 'NO'}; shards "
            f"{shard_seconds:.0f} s, merge + verify {merge_seconds:.1f} s"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
