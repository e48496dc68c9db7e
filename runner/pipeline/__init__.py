"""The main job as a library object: ``run(RunRequest) -> RunResult``.

Only the main job's pieces live here: corpus source and download (:mod:`.corpus_source`),
replay and scoring (:mod:`.replay`), envelope assembly (:mod:`.envelope`), the self-check with
the tenant's verifier (:mod:`.verification`) and the sequence itself (:mod:`.run`).
"""

from runner.pipeline.run import RunRequest, RunResult, run

__all__ = ["RunRequest", "RunResult", "run"]
