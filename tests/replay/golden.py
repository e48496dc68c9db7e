"""Golden values for the bundled example corpus (runner/examples/corpus).

Provenance: the corpus is written by `python scripts/make_example_corpus.py` (3000 cases,
seed 8537; see runner/examples/README.md); the digests are those of `replay_corpus` on it with
scorer "attested-replay exact-match v1" and the evaluation digest v2 (run cases hashed in
blocks of 256 as RFC 6962 trees), equal to the independent reference of
tests/replay/test_run_records.py. A change to the corpus, the canonical form, the digest's
definition or the report format changes them on purpose.
"""

from __future__ import annotations

EXAMPLE_CHECKSUM = "sha256:499e2f3c0ed9d665d0dcdca85f7602fabd1be0dd44dd9f84347b3f93ed9e61fc"
EXAMPLE_EVALUATION_DIGEST = (
    "sha256:3b24ba61eba0e9a22927bdfebac19571fcfa5b4b691078da398660554fe6c099"
)
EXAMPLE_RESULT_DIGEST = "sha256:ecdd5c3575ca122afba2574a38ef4330c87fd9c17c55c43fdd8b5aef20a5d552"
