"""The replay's check that a committed plan and marks can be scored, before any scoring."""

from __future__ import annotations

from attestation.scoring.marks import scoring_problem
from runner.corpus.errors import CorpusError
from runner.corpus.evaluation_files import MARKS_FILE, PLAN_FILE, Evaluation


def check_evaluation(evaluation: Evaluation) -> None:
    """Refuse a plan naming metrics the scorer does not compute, or marks it cannot evaluate.

    Raises:
        CorpusError: naming the file and the field.
    """
    problem = scoring_problem(evaluation.plan, evaluation.marks)
    if problem is not None:
        which, message = problem
        raise CorpusError(PLAN_FILE if which == "plan" else MARKS_FILE, message)
