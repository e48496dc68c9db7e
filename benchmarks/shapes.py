"""Corpus shapes for the benchmarks: today's flat canonical lines and the shape users have.

The realistic shape: nested inputs (objects in objects, arrays of objects), non-ASCII text
(accents, CJK, Cyrillic, Arabic, Hebrew, emoji, with \\u escapes on some lines), floats of
every kind a writer produces (full precision, rounded, integral ``12.0``, small per-token
prices like ``2.5e-06``), integers, ``null`` and booleans, keys in random order and the
default ``json.dumps`` spacing — nothing canonical. Every case has a split and a group, each
group in one split, so ``attested-replay corpus check`` accepts the corpus (the evaluation
pack's frozen-set rules). Deterministic for a seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Final

WORDS: Final = (
    "invoice", "refund", "shipping", "password", "upgrade", "Zahlung", "Überweisung", "café",
    "naïve", "déjà", "付款", "退款", "配送", "パスワード", "請求書", "оплата", "возврат",
    "الدفع", "פיצוי", "🙂", "📦", "💳", "ok", "urgent", "FYI", "tab\there", 'say "hi"',
    "C:\\path", "50%", "¿qué?",
)  # fmt: skip
TOPICS: Final = (b"invoice", b"login", b"refund", b"shipping", b"password", b"upgrade")
LABELS: Final = ("flag", "clear")
SPLITS: Final = ("dev", "holdout", "adversarial")


def _number(rng: random.Random) -> float:
    kind = rng.random()
    if kind < 0.30:
        return rng.randint(-5000, 5000)
    if kind < 0.65:
        return rng.uniform(-1e4, 1e4)  # full precision: 15-17 digits
    if kind < 0.85:
        return round(rng.uniform(0, 1000), 2)
    if kind < 0.95:
        return float(rng.randint(0, 500))  # integral: "12.0"
    return rng.randint(1, 400) * 2.5e-7  # per-token prices


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _shuffled(rng: random.Random, value: object) -> object:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: _shuffled(rng, inner) for key, inner in items}
    if isinstance(value, list):
        return [_shuffled(rng, inner) for inner in value]
    return value


def realistic_case(rng: random.Random, case_id: str) -> tuple[bytes, str]:
    """One ``cases.jsonl`` line of the realistic shape and its label."""
    label = LABELS[rng.random() < 0.6]
    group = rng.randint(0, 999)
    case = {
        "case_id": case_id,
        "label": label,
        # The frozen-set rules (``corpus check``): a group never spans splits.
        "split": SPLITS[group % len(SPLITS)],
        "group": f"g-{group}",
        "input": {
            "text": _sentence(rng, rng.randint(3, 12)),
            "meta": {
                "lang": rng.choice(("de", "fr", "zh", "ja", "ru", "ar", "he", "en")),
                "score": _number(rng),
                "tags": [_sentence(rng, 1) for _ in range(rng.randint(0, 3))],
                "flags": {"vip": rng.random() < 0.2, "region": None},
            },
            "history": [
                {"t": rng.randint(1_600_000_000, 1_700_000_000), "amount": _number(rng)}
                for _ in range(rng.randint(0, 3))
            ],
        },
    }
    text = json.dumps(_shuffled(rng, case), ensure_ascii=rng.random() < 0.3)
    return text.encode("utf-8") + b"\n", label


def case_ids(count: int) -> list[str]:
    """Opaque, ascending ids."""
    return [f"c-{number:08d}" for number in range(count)]


def write_realistic_cases(path: Path, count: int, seed: int = 14) -> list[str]:
    """``count`` realistic cases in ascending id order; returns their labels in order."""
    rng = random.Random(seed)
    labels: list[str] = []
    with path.open("wb") as out:
        batch: list[bytes] = []
        for case_id in case_ids(count):
            line, label = realistic_case(rng, case_id)
            labels.append(label)
            batch.append(line)
            if len(batch) == 10_000:
                out.write(b"".join(batch))
                batch = []
        out.write(b"".join(batch))
    return labels


def write_flat_cases(path: Path, count: int, *, canonical: bool = True) -> None:
    """Today's benchmark shape: flat string inputs, canonical (or with spaces)."""
    separator = b'", "' if not canonical else b'","'
    with path.open("wb") as out:
        batch: list[bytes] = []
        for number in range(count):
            topic = TOPICS[number % len(TOPICS)]
            label = b"flag" if (number * 7919) % 5 < 2 else b"clear"
            batch.append(
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
            if len(batch) == 10_000:
                out.write(b"".join(batch))
                batch = []
        out.write(b"".join(batch))


PREDICTIONS_OFF_LABEL: Final = ("unsure", "needs review", "clear\n", "flag ", "不确定", "🤷")


def _run_entry(rng: random.Random, case_id: str, label: str, hit_rate: float) -> dict[str, object]:
    """One case result as an evaluation harness writes it: measured latencies (full-precision
    floats, some integral ``812.0``, some integers), computed costs (token counts times
    per-token prices: long floats, some tiny ``2.5e-06``), the odd off-label or non-ASCII
    answer, errors with a null prediction and unrecorded costs or latencies."""
    roll = rng.random()
    if roll < hit_rate:
        prediction: str | None = label
    elif roll < hit_rate + 0.02:
        prediction = rng.choice(PREDICTIONS_OFF_LABEL)
    else:
        prediction = LABELS[label == LABELS[0]]
    kind = rng.random()
    latency: float | int | None
    if kind < 0.6:
        latency = rng.uniform(80, 4000)
    elif kind < 0.8:
        latency = float(rng.randint(80, 4000))
    elif kind < 0.99:
        latency = rng.randint(80, 4000)
    else:
        latency = None
    tokens = rng.randint(20, 3000)
    cost: float | None
    if rng.random() < 0.97:
        cost = tokens * 2.5e-06 if rng.random() < 0.3 else tokens * 3e-06 + 1.5e-05
    else:
        cost = None
    entry: dict[str, object] = {"case_id": case_id, "prediction": prediction}
    if rng.random() < 0.01:
        entry["prediction"] = None
        entry["error"] = rng.choice(("timeout after 30 s", "HTTP 529: überlastet", "rate limited"))
        cost = None
    entry["latency_ms"] = latency
    entry["cost_usd"] = cost
    return entry


def write_realistic_corpus(directory: Path, count: int, seed: int = 14) -> None:
    """A whole corpus of the realistic shape: ``cases.jsonl`` as :func:`write_realistic_cases`,
    ``plan.json`` and ``marks.json`` indented, and ``runs.jsonl`` with two arms of two runs
    each, one record per line in the pack's template, keys in a writer's order (``cases``
    last), ``json.dumps`` spacing and its ``\\u`` escapes. Cases in every run are in
    ``case_id`` order, as ``attested-replay corpus normalize`` writes them."""
    from attestation.contracts import sha256_digest
    from attestation.encoding.canonical import canonicalize
    from runner.corpus.checksum import compute_checksum

    directory.mkdir(parents=True, exist_ok=True)
    labels = write_realistic_cases(directory / "cases.jsonl", count, seed)
    checksum = compute_checksum(directory)
    marks = {
        "evaluation_ref": "realistic-shape",
        "committed_by": "human",
        "committed_at": "2026-01-15",
        "immutable": True,
        "marks": [
            {"id": "M1", "metric": "net_gain_points", "arm": "A1", "baseline": "A0",
             "threshold": 5, "rule": "A1 beats A0 by 5 net points in both runs."},
            {"id": "M2", "metric": "recall_at_least", "arm": "A1", "threshold": 80.5,
             "rule": "A1's recall is at least 80.5 points."},
            {"id": "M3", "metric": "cost_per_case_at_most", "arm": "A1", "threshold": 0.01,
             "rule": "A1 costs at most a cent per case."},
        ],
    }  # fmt: skip
    plan = {
        "question": "Does the candidate prompt flag risky messages better?",
        "decision": "Adopt A1 if every mark is met.",
        "arms": [
            {"arm_id": "A0", "role": "baseline", "change": "current prompt"},
            {"arm_id": "A1", "role": "candidate", "change": "prompt with examples"},
        ],
        "set_ref": checksum,
        "metrics": ["accuracy_points", "recall_points", "twin_fp_points", "net_points",
                    "errors", "cost_per_case_usd", "p95_latency_ms"],
        "runs_per_arm": 2,
        "scoring": {"method": "exact_match", "judge_use": "none"},
        "spread_limit_points": 5,
        "cost_accounting": "tokens times list price, USD",
        "positive_label": "flag",
    }  # fmt: skip
    (directory / "marks.json").write_text(json.dumps(marks, indent=2), encoding="utf-8")
    (directory / "plan.json").write_text(json.dumps(plan, indent=2), encoding="utf-8")
    marks_ref = sha256_digest(canonicalize(marks))
    rng = random.Random(seed + 1)
    ids = case_ids(count)
    with (directory / "runs.jsonl").open("wb") as out:
        for arm_id, hit_rate in (("A0", 0.78), ("A1", 0.9)):
            for run_index in (1, 2):
                head = {
                    "arm_id": arm_id,
                    "run_index": run_index,
                    "set_ref": checksum,
                    "marks_ref": marks_ref,
                    "usage": {"source": "harness token counter", "input_tokens": 41 * count,
                              "output_tokens": 3 * count},
                }  # fmt: skip
                text = json.dumps(head)
                out.write(text[:-1].encode() + b', "cases": [')
                for start in range(0, count, 10_000):
                    entries = (
                        json.dumps(_run_entry(rng, case_id, label, hit_rate))
                        for case_id, label in zip(
                            ids[start : start + 10_000], labels[start : start + 10_000], strict=True
                        )
                    )
                    out.write((", " if start else "").encode() + ", ".join(entries).encode())
                out.write(b"]}\n")
