"""One parse for digests and scoring (issue 17, numbers): the digests a tenant pins determine
the result. Every number is the double its text denotes; scoring reads that double."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attestation.encoding.canonical import canonicalize
from attestation.scoring.numbers import scored_value
from runner.corpus.errors import CorpusError
from runner.corpus.numbers import NumberRangeError, parse_float, parse_int
from runner.pipeline.replay import ReplayOutcome, compute_checksum, replay_corpus

Render = Callable[[float], str]

CASES = [
    {"case_id": "case-01", "label": "flag", "input": {"amount": 12.5, "n": 3}},
    {"case_id": "case-02", "label": "clear", "input": {"amount": 0.25, "n": -1}},
    {"case_id": "case-03", "label": "flag", "input": {"amount": 1e-07, "n": 0}},
    {"case_id": "case-04", "label": "clear", "input": {"amount": 100.0, "n": 7}},
]
PREDICTIONS = {
    ("A0", 1): ["flag", "flag", "clear", "clear"],
    ("A0", 2): ["flag", "clear", "clear", "clear"],
    ("A1", 1): ["flag", "clear", "flag", "clear"],
    ("A1", 2): ["flag", "clear", "clear", "clear"],
}


def plan(spread_limit: float) -> dict[str, Any]:
    return {
        "question": "q",
        "decision": "d",
        "arms": [
            {"arm_id": "A0", "role": "baseline", "change": "none"},
            {"arm_id": "A1", "role": "candidate", "change": "new prompt"},
        ],
        "set_ref": "",
        "metrics": ["recall_points", "net_points"],
        "runs_per_arm": 2,
        "scoring": {"method": "exact_match", "judge_use": "none"},
        "spread_limit_points": spread_limit,
        "cost_accounting": "recorded",
        "positive_label": "flag",
    }


def marks(recall: float, latency: float, spread: float, cost: float) -> dict[str, Any]:
    def mark(mark_id: str, metric: str, threshold: float) -> dict[str, Any]:
        return {"id": mark_id, "metric": metric, "arm": "A1", "threshold": threshold, "rule": "r"}

    return {
        "evaluation_ref": "numbers",
        "committed_by": "human",
        "committed_at": "2026-01-01",
        "immutable": True,
        "marks": [
            mark("M1", "recall_at_least", recall),
            mark("M2", "p95_latency_at_most", latency),
            mark("M3", "spread_points_below", spread),
            mark("M4", "cost_per_case_at_most", cost),
        ],
    }


def dump(value: object, number: Render) -> str:
    """JSON text of ``value`` with every number written by ``number``."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float):
        return number(value)
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(k)}: {dump(v, number)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(dump(item, number) for item in value) + "]"
    raise TypeError(type(value))


DEFAULTS: dict[str, float] = {
    "recall": 50,
    "latency_mark": 100,
    "spread": 50,
    "cost_mark": 0.02,
    "spread_limit": 5,
    "latency": 100,
    "cost": 0.01,
}


def write_corpus(
    directory: Path,
    *,
    number: Render = repr,
    values: dict[str, float] | None = None,
    **overrides: float,
) -> Path:
    """A valid corpus whose numbers are ``DEFAULTS`` | ``values`` | ``overrides``, each
    written by ``number``."""
    values = DEFAULTS | (values or {}) | overrides
    recall, latency_mark, spread, cost_mark = (
        values["recall"],
        values["latency_mark"],
        values["spread"],
        values["cost_mark"],
    )
    spread_limit, latency, cost = values["spread_limit"], values["latency"], values["cost"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cases.jsonl").write_text("".join(dump(c, number) + "\n" for c in CASES))
    (directory / "plan.json").write_text(dump(plan(spread_limit), number))
    marks_text = dump(marks(recall, latency_mark, spread, cost_mark), number)
    (directory / "marks.json").write_text(marks_text)
    checksum = compute_checksum(directory)
    marks_ref = "sha256:" + hashlib.sha256(canonicalize(json.loads(marks_text))).hexdigest()
    lines = []
    for (arm_id, run_index), predictions in sorted(PREDICTIONS.items()):
        record = {
            "arm_id": arm_id,
            "run_index": run_index,
            "set_ref": checksum,
            "marks_ref": marks_ref,
            "usage": {"source": "test"},
            "cases": [
                {
                    "case_id": case["case_id"],
                    "prediction": prediction,
                    "cost_usd": cost,
                    "latency_ms": latency,
                }
                for case, prediction in zip(CASES, predictions, strict=True)
            ],
        }
        lines.append(dump(record, number) + "\n")
    (directory / "runs.jsonl").write_text("".join(lines))
    return directory


def mark_results(outcome: ReplayOutcome) -> dict[str, str]:
    marks_list = outcome.result["marks"]
    assert isinstance(marks_list, list)
    return {str(m["id"]): str(m["result"]) for m in marks_list if isinstance(m, dict)}


# --- the three reproductions of the issue: the tampered text no longer changes anything ---


def test_more_digits_in_a_threshold_change_neither_digests_nor_verdict(tmp_path: Path) -> None:
    honest = replay_corpus(write_corpus(tmp_path / "honest"))
    assert mark_results(honest)["M1"] == "met"  # A1 recall is exactly 50
    assert mark_results(honest)["M2"] == "met"  # every latency is exactly 100

    def tampered(value: float) -> str:
        return "50.000000000000000001" if value == 50 else repr(value)

    variant = replay_corpus(write_corpus(tmp_path / "tampered", number=tampered))
    assert (variant.corpus_checksum, variant.evaluation_digest) == (
        honest.corpus_checksum,
        honest.evaluation_digest,
    )
    assert variant.result_digest == honest.result_digest
    assert mark_results(variant)["M1"] == "met"


def test_more_digits_in_a_latency_change_neither_digests_nor_verdict(tmp_path: Path) -> None:
    honest = replay_corpus(write_corpus(tmp_path / "honest"))

    def tampered(value: float) -> str:
        return "100.00000000000000001" if value == 100 else repr(value)

    variant = replay_corpus(write_corpus(tmp_path / "tampered", number=tampered))
    assert variant.evaluation_digest == honest.evaluation_digest
    assert variant.result_digest == honest.result_digest
    assert mark_results(variant)["M2"] == "met"


def test_a_spread_limit_of_1e_400_is_zero_for_digest_and_stability(tmp_path: Path) -> None:
    zero = replay_corpus(write_corpus(tmp_path / "zero", spread_limit=0))

    def tiny(value: float) -> str:
        return "1e-400" if value == 0 and isinstance(value, int) else repr(value)

    # Only the spread limit is written as 1e-400 (the inputs hold integer zeros too, but as
    # the key "n"; both sides parse to the double 0 either way).
    variant = replay_corpus(write_corpus(tmp_path / "tiny", spread_limit=0, number=tiny))
    assert variant.evaluation_digest == zero.evaluation_digest
    assert variant.result_digest == zero.result_digest
    arms = variant.result["arms"]
    assert isinstance(arms, list)
    assert [arm["stable"] for arm in arms if isinstance(arm, dict)] == [False, False]


def test_the_strict_spread_comparison_is_decided_on_the_hashed_double(tmp_path: Path) -> None:
    # A1's net points are 50.0 and 0.0: the spread is exactly 50, not below a threshold of 50.
    honest = replay_corpus(write_corpus(tmp_path / "honest", spread=50))
    assert mark_results(honest)["M3"] == "missed"

    def tampered(value: float) -> str:
        return "50.0000000000000000000001" if value == 50 else repr(value)

    variant = replay_corpus(write_corpus(tmp_path / "tampered", spread=50, number=tampered))
    assert variant.evaluation_digest == honest.evaluation_digest
    assert mark_results(variant)["M3"] == "missed"
    assert variant.result_digest == honest.result_digest


# --- the property: equal (corpus checksum, evaluation digest) => equal result digest ---


def variants(value: float) -> list[str]:
    """Texts a writer might use for ``value``: every one but the last denotes the same double
    (the last adds a digit no double keeps or is an underflowing zero)."""
    text = repr(value)
    out = [text, f"{value:.17e}", f"{float(value)!r}"]
    if value == 0:
        out += ["-0", "-0.0", "0e5", "0.000", "1e-400", "-1E-400"]
    else:
        out += [f"{float(value):.17g}", text.upper()]
    if "." in text and "e" not in text:
        out += [text + "000", text + "0000000000000000000001"]
    if float(value).is_integer() and 0 < abs(value) < 1e15:
        out += [f"{int(value)}.0", f"{int(value)}e0", f"{int(value)}00e-2"]
    return out


NUMBERS = st.sampled_from([0, 0.002, 0.01, 0.02, 5, 25, 50, 100, 1e-07, 2.5e-06, 0.1, 99.5])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    values=st.fixed_dictionaries(
        {
            "recall": NUMBERS,
            "latency_mark": NUMBERS,
            "spread": NUMBERS,
            "cost_mark": NUMBERS,
            "spread_limit": NUMBERS,
            "latency": NUMBERS,
            "cost": NUMBERS,
        }
    ),
    picks=st.lists(st.integers(0, 50), min_size=64, max_size=64),
)
def test_equal_digests_imply_equal_results(
    tmp_path_factory: pytest.TempPathFactory, values: dict[str, float], picks: list[int]
) -> None:
    base_dir = tmp_path_factory.mktemp("base")
    base = replay_corpus(write_corpus(base_dir, values=values))
    order = iter(picks * 8)

    def textual_variant(value: float) -> str:
        options = variants(value)
        return options[next(order) % len(options)]

    variant_dir = tmp_path_factory.mktemp("variant")
    try:
        variant = replay_corpus(write_corpus(variant_dir, number=textual_variant, values=values))
    except CorpusError:
        return  # refused: also allowed by the property
    if (variant.corpus_checksum, variant.evaluation_digest) == (
        base.corpus_checksum,
        base.evaluation_digest,
    ):
        assert variant.result_digest == base.result_digest
        assert variant.result == base.result


def test_every_variant_of_a_number_is_its_double_for_digest_and_score() -> None:
    for value in (0, 0.002, 25, 1e-07, 123.456, 2.5e-06):
        for text in variants(value)[:-1] if value else variants(value):
            parsed = json.loads(text, parse_float=parse_float, parse_int=parse_int)
            if float(parsed) != float(value):
                continue  # a digit the double keeps: a different number, different digests
            assert canonicalize(parsed) == canonicalize(value)
            assert scored_value(parsed) == scored_value(value)


# --- the rule itself ---


def test_scored_value_is_the_decimal_rfc_8785_writes() -> None:
    assert scored_value(0.002) == Decimal("0.002")
    assert scored_value(0.1 + 0.2) == Decimal("0.30000000000000004")
    assert scored_value(1e-07) == Decimal("1E-7")
    assert scored_value(100.0) == Decimal(100)
    assert scored_value(2**53 - 1) == Decimal(2**53 - 1)
    negative_zero = scored_value(-0.0)
    assert negative_zero == 0
    assert not negative_zero.is_signed()
    assert scored_value(float("50.000000000000000001")) == Decimal(50)


def test_numbers_without_a_double_are_refused() -> None:
    with pytest.raises(NumberRangeError, match=r"integer 9007199254740992 is outside"):
        parse_int("9007199254740992")
    assert parse_int("-9007199254740991") == -(2**53 - 1)
    with pytest.raises(NumberRangeError, match=r"number 1e400 is beyond the range of a double"):
        parse_float("1e400")
    assert parse_float("1e-400") == 0
    assert math.copysign(1, parse_float("-0.0")) == -1  # the sign goes when canonicalized


def test_a_number_beyond_double_range_names_file_and_line(tmp_path: Path) -> None:
    directory = write_corpus(tmp_path / "c")
    text = (directory / "runs.jsonl").read_text().splitlines()
    text[2] = text[2].replace('"latency_ms": 100', '"latency_ms": 1e400', 1)
    (directory / "runs.jsonl").write_text("\n".join(text) + "\n")
    with pytest.raises(CorpusError, match=r"^runs\.jsonl:3: number 1e400 is beyond the range"):
        replay_corpus(directory)
    marks_path = directory / "marks.json"
    marks_path.write_text(marks_path.read_text().replace('"threshold": 50', '"threshold": -1e999'))
    with pytest.raises(CorpusError, match=r"^marks\.json: number -1e999 is beyond the range"):
        replay_corpus(directory)
