"""Scoring arithmetic: exact money, rounding, p95, nulls, marks' three values."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from attestation.scoring.marks import evaluate_mark
from attestation.scoring.metrics import RunMetrics, RunTally
from attestation.scoring.models import PassMark
from attestation.scoring.numbers import points, round_fraction


def tally(*rows: tuple[str, str | None, bool, str | None], abstain: str | None = None) -> RunTally:
    result = RunTally("flag", abstain)
    for label, prediction, error, cost in rows:
        result.add(
            label,
            prediction,
            has_error=error,
            cost_usd=None if cost is None else Decimal(cost),
            latency_ms=Decimal(10),
        )
    return result


def test_money_is_exact_decimal() -> None:
    # As floats 0.1 + 0.2 is 0.30000000000000004; as decimals it is 0.3.
    run = tally(("flag", "flag", False, "0.1"), ("clear", "clear", False, "0.2")).finish("A", 1)
    assert run.cost_known_subtotal_usd == Decimal("0.3")
    assert run.cost_per_case_usd == Decimal("0.15")
    assert run.report_metrics()[7] == {"name": "cost_per_case_usd", "value": 0.15}


def test_cost_per_case_rounds_to_nano_dollars_half_even() -> None:
    run = tally(*[("flag", "flag", False, "0.01")] * 2, ("flag", "flag", False, "0")).finish("A", 1)
    assert run.cost_per_case_usd == Decimal("0.006666667")


def test_unknown_cost_makes_cost_per_case_null_with_subtotal() -> None:
    run = tally(("flag", "flag", False, "0.5"), ("clear", None, False, None)).finish("A", 1)
    assert run.cost_per_case_usd is None
    assert run.cost_known_subtotal_usd == Decimal("0.5")
    assert run.cost_unknown_cases == 1


def test_errors_and_nulls_are_wrong() -> None:
    run = tally(
        ("flag", "flag", True, "0"),  # right answer, but the call errored
        ("flag", None, False, "0"),  # no answer
        ("flag", "flag", False, "0"),
        ("clear", "flag", True, "0"),  # an errored positive is not a false positive
    ).finish("A", 1)
    assert run.errors == 3
    assert run.recall_points == Decimal("33.333")
    assert run.twin_fp_points == Decimal("0.000")
    assert run.accuracy_points == Decimal("25.000")
    assert run.net_points == Decimal("33.333")


def test_abstention_needs_the_plan_label() -> None:
    rows = (("flag", "review", False, "0"), ("clear", "clear", False, "0"))
    assert tally(*rows).finish("A", 1).abstention_points is None
    run = tally(*rows, abstain="review").finish("A", 1)
    assert run.abstention_points == Decimal("50.000")
    assert run.recall_points == Decimal("0.000")  # an abstention is not a right answer


def test_points_round_half_to_even_exactly() -> None:
    assert points(1, 3) == Decimal("33.333")
    assert points(2, 3) == Decimal("66.667")
    assert points(1, 8) == Decimal("12.500")
    assert points(1, 16) == Decimal("6.250")  # 6.25 exactly
    assert round_fraction(Fraction(1, 16000), 3) == Decimal("0.000")  # 0.0000625 -> 0.000
    assert round_fraction(Fraction(5, 10000), 3) == Decimal("0.000")  # tie to even
    assert round_fraction(Fraction(15, 10000), 3) == Decimal("0.002")  # tie to even
    assert points(0, 0) is None


def p95(latencies: list[Decimal]) -> Decimal | None:
    """The p95 a run of these latencies reports (a whole run, folded without a tail size)."""
    run = RunTally("flag", None)
    for latency in latencies:
        run.add("flag", "flag", has_error=False, cost_usd=Decimal(0), latency_ms=latency)
    return run.finish("A", 1).p95_latency_ms


def test_p95_is_nearest_rank() -> None:
    values = [Decimal(v) for v in range(1, 21)]
    assert p95(values) == Decimal(19)  # ceil(0.95 * 20) = 19
    assert p95([*values, Decimal(21)]) == Decimal(20)  # ceil(0.95 * 21) = 20
    assert p95([Decimal(7)]) == Decimal(7)
    assert p95(list(reversed(values))) == Decimal(19)


def test_p95_null_when_a_latency_is_unknown() -> None:
    run = RunTally("flag", None)
    run.add("flag", "flag", has_error=False, cost_usd=Decimal(0), latency_ms=None)
    run.add("flag", "flag", has_error=False, cost_usd=Decimal(0), latency_ms=Decimal(5))
    finished = run.finish("A", 1)
    assert finished.p95_latency_ms is None
    assert finished.latency_unknown_cases == 1


def _run(arm: str, index: int, **values: object) -> RunMetrics:
    base: dict[str, object] = {
        "arm_id": arm,
        "run_index": index,
        "cases": 10,
        "accuracy_points": Decimal(90),
        "recall_points": Decimal(90),
        "twin_fp_points": Decimal(10),
        "net_points": Decimal(80),
        "abstention_points": None,
        "errors": 0,
        "cost_per_case_usd": Decimal("0.01"),
        "cost_known_subtotal_usd": Decimal("0.1"),
        "cost_unknown_cases": 0,
        "p95_latency_ms": Decimal(100),
        "latency_unknown_cases": 0,
    }
    base.update(values)
    return RunMetrics(**base)  # type: ignore[arg-type]  # the test builds fields by name


def mark(metric: str, threshold: str | None, baseline: str | None = None) -> PassMark:
    return PassMark(
        id="M",
        metric=metric,
        arm="A1",
        baseline=baseline,
        threshold=None if threshold is None else Decimal(threshold),
        rule="r",
    )


def test_known_miss_beats_unknown() -> None:
    arms = {
        "A1": {
            1: _run("A1", 1, cost_per_case_usd=Decimal("0.03")),
            2: _run("A1", 2, cost_per_case_usd=None, cost_unknown_cases=2),
        }
    }
    outcome = evaluate_mark(mark("cost_per_case_at_most", "0.02"), arms)
    assert outcome.result == "missed"
    assert outcome.diagnosis == "Run 1: A1 cost_per_case_usd 0.03 fails <= 0.02."


def test_unknown_when_only_null_blocks() -> None:
    arms = {
        "A1": {
            1: _run("A1", 1),
            2: _run("A1", 2, cost_per_case_usd=None, cost_unknown_cases=2),
        }
    }
    outcome = evaluate_mark(mark("cost_per_case_at_most", "0.02"), arms)
    assert outcome.result == "unknown"
    assert outcome.diagnosis is None
    assert "2 case cost(s) unknown, known subtotal 0.1 USD" in outcome.detail


@pytest.mark.parametrize(("gain", "result"), [("10", "met"), ("10.001", "missed")])
def test_net_gain_is_paired_by_run_index(gain: str, result: str) -> None:
    arms = {
        "A0": {1: _run("A0", 1, net_points=Decimal(70)), 2: _run("A0", 2, net_points=Decimal(60))},
        "A1": {1: _run("A1", 1, net_points=Decimal(80)), 2: _run("A1", 2, net_points=Decimal(75))},
    }
    outcome = evaluate_mark(mark("net_gain_points", gain, "A0"), arms)
    assert outcome.result == result
    if result == "missed":
        assert (
            outcome.diagnosis
            == "Run 1: A1 net_points 80.000 minus A0 70.000 is 10.000, below 10.001."
        )


def test_spread_below_is_strict() -> None:
    arms = {
        "A1": {1: _run("A1", 1, net_points=Decimal(80)), 2: _run("A1", 2, net_points=Decimal(75))}
    }
    assert evaluate_mark(mark("spread_points_below", "5"), arms).result == "missed"
    assert evaluate_mark(mark("spread_points_below", "5.001"), arms).result == "met"
