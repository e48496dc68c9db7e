"""The replay's check that a committed plan and marks can be scored, before any scoring."""

from __future__ import annotations

from attestation.evaluation.marks import mark_definition_error
from attestation.evaluation.metrics import METRIC_NAMES
from runner.corpus.errors import CorpusError
from runner.corpus.evaluation import MARKS_FILE, PLAN_FILE, Evaluation


def check_evaluation(evaluation: Evaluation) -> None:
    """Refuse a plan naming metrics the scorer does not compute, or marks it cannot evaluate.

    Raises:
        CorpusError: naming the file and the field.
    """
    plan = evaluation.plan
    known_metrics = set(METRIC_NAMES)
    for index, name in enumerate(plan.metrics):
        if name not in known_metrics:
            raise CorpusError(
                PLAN_FILE,
                f"field 'metrics.{index}': unknown metric {name!r} "
                f"(known: {', '.join(METRIC_NAMES)})",
            )
    arm_ids = frozenset(arm.arm_id for arm in plan.arms)
    for mark in evaluation.marks.marks:
        problem = mark_definition_error(mark, arm_ids)
        if problem is not None:
            raise CorpusError(MARKS_FILE, f"mark {mark.id!r}: {problem}")
