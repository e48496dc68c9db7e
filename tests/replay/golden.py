"""Golden values for the bundled example corpus (runner/examples/corpus).

Provenance: the corpus is written by `python scripts/make_example_corpus.py` (3000 cases,
seed 8537; see runner/examples/README.md); the digests are those of `replay_corpus` on it with
scorer "attested-replay exact-match v1" and the evaluation digest v2 (run cases hashed in
blocks of 256 as RFC 6962 trees), equal to the independent reference of
tests/replay/test_run_records.py. A change to the corpus, the canonical form, the digest's
definition or the report format changes them on purpose.
"""

from __future__ import annotations

EXAMPLE_CHECKSUM = "sha256:fc3c6e0b6c2a2b393dd0f8d028b90e336179bcf77983748ecbf1fa2506a53262"
EXAMPLE_EVALUATION_DIGEST = (
    "sha256:ed7d33030cb2823141ce9b6583dc77e8dd6875a15370c57956697d592b85e590"
)
EXAMPLE_RESULT_DIGEST = "sha256:e28511155972519283969e43eae96648d5d8e40c2e03a3cca6ac5554773ae0bf"
