"""``corpus new``: a small, valid corpus to start from, every field filled in.

Eight cases (two labels, two splits, four groups), a baseline and a candidate arm with two
runs each, and three pass marks that come out met, missed and unknown, so that the first
replay shows every kind of verdict. ``set_ref`` and ``marks_ref`` are computed, as
``corpus check`` prints them. ``plan.json`` and ``marks.json`` are indented for editing;
docs/replay.md explains every field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from attestation.contracts import sha256_digest
from attestation.encoding.canonical import canonicalize
from runner.corpus.checksum import CASES_FILE, compute_checksum
from runner.corpus.evaluation_files import MARKS_FILE, PLAN_FILE, RUNS_FILE

POSITIVE: Final = "flag"
NEGATIVE: Final = "clear"
#: (case_id, label, input, split, group)
_CASES: Final = (
    ("case-01", POSITIVE, "reset my password now or lose access", "dev", "password"),
    ("case-02", NEGATIVE, "your password was changed as you asked", "dev", "password"),
    ("case-03", POSITIVE, "confirm your bank login at this link", "dev", "login"),
    ("case-04", NEGATIVE, "you logged in from a new laptop", "dev", "login"),
    ("case-05", POSITIVE, "claim the prize by paying a small fee", "holdout", "prize"),
    ("case-06", NEGATIVE, "the raffle results are on the notice board", "holdout", "prize"),
    ("case-07", POSITIVE, "your parcel is held: pay customs here", "holdout", "parcel"),
    ("case-08", NEGATIVE, "your parcel was delivered to reception", "holdout", "parcel"),
)
#: (arm_id, run_index) -> the prediction for each case, in case order (None: the call failed)
_PREDICTIONS: Final = {
    ("A0", 1): (POSITIVE, NEGATIVE, NEGATIVE, NEGATIVE, POSITIVE, POSITIVE, NEGATIVE, NEGATIVE),
    ("A0", 2): (POSITIVE, NEGATIVE, NEGATIVE, NEGATIVE, POSITIVE, NEGATIVE, None, NEGATIVE),
    ("A1", 1): (POSITIVE, NEGATIVE, POSITIVE, NEGATIVE, POSITIVE, NEGATIVE, POSITIVE, NEGATIVE),
    ("A1", 2): (POSITIVE, NEGATIVE, POSITIVE, NEGATIVE, POSITIVE, POSITIVE, POSITIVE, NEGATIVE),
}


def _plan(set_ref: str) -> dict[str, Any]:
    return {
        "question": "Does the candidate prompt flag scam messages better than the current one?",
        "decision": "Adopt the candidate prompt if every pass mark is met.",
        "arms": [
            {"arm_id": "A0", "role": "baseline", "change": "the current prompt"},
            {"arm_id": "A1", "role": "candidate", "change": "the prompt with worked examples"},
        ],
        "set_ref": set_ref,
        "metrics": ["accuracy_points", "recall_points", "twin_fp_points", "net_points"],
        "runs_per_arm": 2,
        "scoring": {"method": "exact_match", "judge_use": "none"},
        "spread_limit_points": 10,
        "cost_accounting": "provider usage per call, USD, priced on the day of the run",
        "positive_label": POSITIVE,
    }


def _marks() -> dict[str, Any]:
    return {
        "evaluation_ref": "starter-eval-v1",
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
                "metric": "accuracy_at_least",
                "arm": "A1",
                "threshold": 100,
                "rule": "A1 answers every case right in both runs.",
            },
            {
                "id": "M3",
                "metric": "cost_per_case_at_most",
                "arm": "A0",
                "threshold": 0.01,
                "rule": "A0 costs at most one cent per case in both runs.",
            },
        ],
    }


def _run(arm_id: str, run_index: int, set_ref: str, marks_ref: str) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for position, (case_id, _label, _input, _split, _group) in enumerate(_CASES):
        prediction = _PREDICTIONS[arm_id, run_index][position]
        entry: dict[str, Any] = {
            "case_id": case_id,
            "prediction": prediction,
            # A failed call has no known cost: cost per case is then unknown (mark M3).
            "cost_usd": None if prediction is None else 0.002,
            "latency_ms": 400 + 37 * position + 11 * run_index,
        }
        if prediction is None:
            entry["error"] = "timeout after 30 s"
        cases.append(entry)
    return {
        "arm_id": arm_id,
        "run_index": run_index,
        "set_ref": set_ref,
        "marks_ref": marks_ref,
        "usage": {"source": "provider usage report", "input_tokens": 5200, "output_tokens": 90},
        "cases": cases,
    }


def _line(value: object) -> bytes:
    return canonicalize(value) + b"\n"


def _document(value: object) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_starter_corpus(directory: Path) -> str:
    """Write the starter corpus into ``directory`` (an empty directory); its checksum."""
    cases = [
        {"case_id": case_id, "label": label, "input": text, "split": split, "group": group}
        for case_id, label, text, split, group in _CASES
    ]
    (directory / CASES_FILE).write_bytes(b"".join(_line(case) for case in cases))
    set_ref = compute_checksum(directory)
    marks = _marks()
    marks_ref = sha256_digest(canonicalize(marks))
    (directory / PLAN_FILE).write_bytes(_document(_plan(set_ref)))
    (directory / MARKS_FILE).write_bytes(_document(marks))
    runs = [_run(arm, index, set_ref, marks_ref) for arm, index in sorted(_PREDICTIONS)]
    (directory / RUNS_FILE).write_bytes(b"".join(_line(run) for run in runs))
    return set_ref
