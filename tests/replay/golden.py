"""Golden values for the bundled example corpus (runner/examples/corpus).

Provenance: the corpus is written by `python scripts/make_example_corpus.py` (3000 cases,
seed 8537; see runner/examples/README.md); the digests are those of `replay_corpus` on it with
scorer "attested-replay exact-match v1" and the evaluation digest v2 (run cases hashed in
blocks of 256 as RFC 6962 trees), equal to the independent reference of
tests/replay/test_run_records.py. A change to the corpus, the canonical form, the digest's
definition or the report format changes them on purpose.
"""

from __future__ import annotations

EXAMPLE_CHECKSUM = "sha256:9e74e8c33fb1c42ff74c4f307f85d954f6617f9c8e5fb27cdc99e6642c2d1ca7"
EXAMPLE_EVALUATION_DIGEST = (
    "sha256:44d961278acb47d35af2efbaba3e64f8cce1bdf1fe97173359a6f3844194aed7"
)
EXAMPLE_RESULT_DIGEST = "sha256:1a9626fced7735a4495776b3caea0a31aaeb410b4e82bade18f115447c08b29e"
