"""Golden values for the bundled example corpus (runner/examples/corpus).

Provenance: the corpus is written by `python scripts/make_example_corpus.py` (3000 cases,
seed 8537; see runner/examples/README.md); the digests are those of `replay_corpus` on it with
scorer "attested-replay exact-match v1". A change to the corpus, the canonical form or the
report format changes them on purpose.
"""

from __future__ import annotations

EXAMPLE_CHECKSUM = "sha256:499e2f3c0ed9d665d0dcdca85f7602fabd1be0dd44dd9f84347b3f93ed9e61fc"
EXAMPLE_EVALUATION_DIGEST = (
    "sha256:13a3bdfd2af1f0f87d262e020547f5c7d977e6575897eea6eae14ec5e2b54414"
)
EXAMPLE_RESULT_DIGEST = "sha256:361bb64c474d0054d2ea2ebaafc6f7fd22ca9cbf5686be88e56b336b2796c3ac"
