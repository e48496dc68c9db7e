"""Fixtures for end-to-end runs: one simulated PKI and one genuine simulated run per session."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest

from runner.cli import main as runner_main
from runner.evidence.simulated import load_or_create_simulated_amd

EXAMPLE_CORPUS = Path(str(resources.files("runner") / "examples" / "corpus"))


@dataclass(frozen=True)
class GenuineRun:
    envelope: Path
    result: Path
    expected: Path
    envelope_json: dict[str, object]
    state_dir: Path
    root_fingerprint: str


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("state")
    load_or_create_simulated_amd(directory)  # RSA-4096 key generation, once per session
    return directory


@pytest.fixture(scope="session")
def genuine_run(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> GenuineRun:
    out = tmp_path_factory.mktemp("run")
    envelope = out / "envelope.json"
    code = runner_main(
        [
            "run",
            "--corpus",
            str(EXAMPLE_CORPUS),
            "--run-id",
            "run-e2e-1",
            "--tenant",
            "acme",
            "--evidence",
            "simulated",
            "--state-dir",
            str(state_dir),
            "--out",
            str(envelope),
        ]
    )
    assert code == 0
    root = load_or_create_simulated_amd(state_dir).root_fingerprint
    expected = out / "expected.json"
    code = runner_main(
        [
            "expected",
            "--run-id",
            "run-e2e-1",
            "--corpus",
            str(EXAMPLE_CORPUS),
            "--tenant",
            "acme",
            "--this-workload",
            "--simulated-root",
            root,
            "--out",
            str(expected),
        ]
    )
    assert code == 0
    return GenuineRun(
        envelope=envelope,
        result=out / "envelope.json.result.json",
        expected=expected,
        envelope_json=json.loads(envelope.read_bytes()),
        state_dir=state_dir,
        root_fingerprint=root,
    )
