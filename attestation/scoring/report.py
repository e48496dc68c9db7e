"""The evaluation report (the pack's evaluation-report template plus documented extras)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import JsonValue

from attestation.scoring.marks import arm_spread, evaluate_mark
from attestation.scoring.metrics import RunMetrics
from attestation.scoring.models import PassMarks, Plan
from attestation.scoring.numbers import json_number

SCORER: Final = "attested-replay exact-match v1"

LIMITS: Final = (
    "Scores are exact matches against the corpus labels; explanations are not graded.",
    "Errors and null predictions are scored as wrong; nothing is excluded.",
    "The report proves which computation ran over this corpus, not that the labels are true.",
    "Costs and latencies are as recorded in the run records; unknown values stay null.",
)


def build_report(
    *,
    plan: Plan,
    marks: PassMarks,
    runs: Mapping[str, Mapping[int, RunMetrics]],
    corpus_checksum: str,
    evaluation_digest: str,
    case_count: int,
) -> dict[str, JsonValue]:
    """A deterministic JSON object: fixed key sets, plan order for arms, mark order as committed."""
    arms: list[JsonValue] = []
    for arm in plan.arms:
        arm_runs = runs[arm.arm_id]
        spread = arm_spread(arm_runs)
        arms.append(
            {
                "arm_id": arm.arm_id,
                # An unknown spread cannot show stability, so it counts as unstable.
                "stable": spread is not None and spread <= plan.spread_limit_points,
                "spread_points": json_number(spread),
                "runs": [
                    {"run_index": index, "metrics": arm_runs[index].report_metrics()}
                    for index in sorted(arm_runs)
                ],
            }
        )
    mark_reports: list[JsonValue] = [evaluate_mark(mark, runs).report() for mark in marks.marks]
    return {
        "evaluation_ref": marks.evaluation_ref,
        "marks": mark_reports,
        "arms": arms,
        "limits": list(LIMITS),
        "scorer": SCORER,
        "positive_label": plan.positive_label,
        "set_checksum": corpus_checksum,
        "evaluation_digest": evaluation_digest,
        "case_count": case_count,
    }
