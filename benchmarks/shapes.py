"""Corpus shapes for the benchmarks: today's flat canonical lines and the shape users have.

The realistic shape: nested inputs (objects in objects, arrays of objects), non-ASCII text
(accents, CJK, Cyrillic, Arabic, Hebrew, emoji, with \\u escapes on some lines), floats of
every kind a writer produces (full precision, rounded, integral ``12.0``, small per-token
prices like ``2.5e-06``), integers, ``null`` and booleans, keys in random order and the
default ``json.dumps`` spacing — nothing canonical. Deterministic for a seed.
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
    case = {
        "case_id": case_id,
        "label": label,
        "split": rng.choice(("dev", "holdout", "adversarial")),
        "group": f"g-{rng.randint(0, 999)}",
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
