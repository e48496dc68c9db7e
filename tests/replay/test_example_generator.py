"""The bundled example corpus is exactly what its generator writes (provenance check)."""

from __future__ import annotations

import importlib.util
import tomllib
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


def test_the_example_corpus_ships_as_package_data() -> None:
    # `attested-replay demo` reads the corpus from the installed package, and a non-editable
    # install (the README's `pip install .`) carries only the files these patterns select.
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    assert "runner*" in setuptools["packages"]["find"]["include"]
    package = REPO / "runner"
    shipped = {
        path
        for pattern in setuptools["package-data"]["runner"]
        for path in package.glob(pattern)
        if path.is_file()
    }
    corpus = {
        EXAMPLE_CORPUS / name for name in ("cases.jsonl", "runs.jsonl", "marks.json", "plan.json")
    }
    assert corpus <= shipped
