"""The bundled example corpus is exactly what its generator writes (provenance check)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.replay.conftest import EXAMPLE_CORPUS, REPO


def test_generator_reproduces_the_bundled_corpus(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_example_corpus", REPO / "scripts" / "make_example_corpus.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(tmp_path, 3000, 8537)
    for name in ("cases.jsonl", "runs.jsonl", "marks.json", "plan.json"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE_CORPUS / name).read_bytes(), name
    assert (
        sum((EXAMPLE_CORPUS / name).stat().st_size for name in ("cases.jsonl", "runs.jsonl"))
        < 2_000_000
    )
