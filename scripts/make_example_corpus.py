"""Generate the bundled SYNTHETIC example corpus (deterministic for a given seed and size).

    python scripts/make_example_corpus.py [--out DIR] [--cases 3000] [--seed 8537]

(default DIR: runner/examples/corpus)

Two arms (A0 baseline, A1 candidate), two runs each, labels ``flag``/``clear``. A1's second
run has a few errors and unrecorded costs, so the committed marks come out met, missed and
unknown. Nothing here is real data; the numbers only exercise the scorer.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from pathlib import Path

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import canonicalize
from attestation.tenant.fsutil import atomic_write
from runner.corpus.checksum import compute_checksum

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "runner" / "examples" / "corpus"
TOPICS = ("invoice", "login", "refund", "shipping", "password", "upgrade", "report", "contract")


def make_cases(rng: random.Random, count: int, seed: int) -> list[dict[str, object]]:
    cases: list[dict[str, object]] = []
    #: A group's split is drawn for its first case: a group never spans splits (the frozen
    #: set's rule that near-duplicates share a group and a split; `corpus check` enforces it).
    group_splits: dict[str, str] = {}
    for number in range(count):
        # Opaque ids: a hash of seed and position, never the label.
        case_id = "case-" + hashlib.sha256(f"{seed}:{number}".encode()).hexdigest()[:12]
        label = "flag" if rng.random() < 0.4 else "clear"
        topic = rng.choice(TOPICS)
        group = f"{topic}-{number // 4:04d}"
        split = group_splits.setdefault(group, "adversarial" if rng.random() < 0.1 else "holdout")
        cases.append(
            {
                "case_id": case_id,
                "group": group,
                "input": f"synthetic {topic} message {number} (amount {rng.randint(1, 9999)})",
                "label": label,
                "split": split,
            }
        )
    cases.sort(key=lambda case: str(case["case_id"]))
    return cases


def make_run(
    rng: random.Random,
    cases: list[dict[str, object]],
    *,
    arm_id: str,
    run_index: int,
    hit_rates: tuple[float, float],
    cost: float,
    troubled: bool,
) -> dict[str, object]:
    results: list[dict[str, object]] = []
    for case in cases:
        label = case["label"]
        rate = hit_rates[0] if label == "flag" else hit_rates[1]
        right = rng.random() < rate
        prediction = label if right else ("clear" if label == "flag" else "flag")
        entry: dict[str, object] = {
            "case_id": case["case_id"],
            "prediction": prediction,
            "cost_usd": cost,
            "latency_ms": rng.randint(120, 900) if arm_id == "A0" else rng.randint(300, 2400),
        }
        if troubled and rng.random() < 0.01:
            entry["prediction"] = None
            entry["error"] = "timeout after 30 s"
            entry["cost_usd"] = None
        results.append(entry)
    return {
        "arm_id": arm_id,
        "run_index": run_index,
        "cases": results,
        "usage": {
            "source": "synthetic generator",
            "input_tokens": None,
            "output_tokens": None,
            "reason": "synthetic example: no model was called",
        },
    }


def generate(out: Path, count: int, seed: int) -> str:
    rng = random.Random(seed)
    cases = make_cases(rng, count, seed)
    atomic_write(out / "cases.jsonl", b"".join(canonicalize(case) + b"\n" for case in cases))
    checksum = compute_checksum(out)
    marks = {
        "evaluation_ref": "example-eval-v1",
        "committed_by": "human",
        "committed_at": "2026-01-15",
        "immutable": True,
        "marks": [
            {
                "id": "M1",
                "metric": "net_gain_points",
                "arm": "A1",
                "baseline": "A0",
                "threshold": 10,
                "rule": "A1's net points beat A0's by at least 10 in both runs.",
            },
            {
                "id": "M2",
                "metric": "twin_fp_not_higher",
                "arm": "A1",
                "baseline": "A0",
                "threshold": None,
                "rule": "A1's twin false positives are no higher than A0's.",
            },
            {
                "id": "M3",
                "metric": "recall_at_least",
                "arm": "A1",
                "threshold": 95,
                "rule": "A1's recall is at least 95 points in both runs.",
            },
            {
                "id": "M4",
                "metric": "spread_points_below",
                "arm": "A1",
                "threshold": 5,
                "rule": "A1's net points differ by less than 5 between its runs.",
            },
            {
                "id": "M5",
                "metric": "cost_per_case_at_most",
                "arm": "A1",
                "threshold": 0.02,
                "rule": "A1 costs at most 0.02 dollars per case in both runs.",
            },
        ],
    }
    marks_bytes = canonicalize(marks)
    marks_ref = sha256_digest(marks_bytes)
    plan = {
        "question": "Does the candidate prompt flag risky messages better than the baseline?",
        "decision": "Adopt A1 as the default classifier if every mark is met.",
        "arms": [
            {"arm_id": "A0", "role": "baseline", "change": "current prompt"},
            {"arm_id": "A1", "role": "candidate", "change": "prompt with worked examples"},
        ],
        "set_ref": checksum,
        "metrics": [
            "accuracy_points",
            "recall_points",
            "twin_fp_points",
            "net_points",
            "errors",
            "cost_per_case_usd",
            "p95_latency_ms",
        ],
        "runs_per_arm": 2,
        "scoring": {"method": "exact_match", "judge_use": "none"},
        "spread_limit_points": 5,
        "cost_accounting": "recorded per case by the synthetic generator, USD",
        "positive_label": "flag",
    }
    runs = []
    for arm_id, rates, cost in (("A0", (0.70, 0.85), 0.002), ("A1", (0.92, 0.93), 0.0105)):
        for run_index in (1, 2):
            run = make_run(
                rng,
                cases,
                arm_id=arm_id,
                run_index=run_index,
                hit_rates=rates,
                cost=cost,
                troubled=arm_id == "A1" and run_index == 2,
            )
            run["set_ref"] = checksum
            run["marks_ref"] = marks_ref
            runs.append(canonicalize(run) + b"\n")
    atomic_write(out / "runs.jsonl", b"".join(runs))
    atomic_write(out / "marks.json", marks_bytes + b"\n")
    atomic_write(out / "plan.json", canonicalize(plan) + b"\n")
    return checksum


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=8537)
    args = parser.parse_args(argv)
    checksum = generate(args.out, args.cases, args.seed)
    sys.stdout.write(f"{args.out}: {args.cases} cases, {checksum}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
