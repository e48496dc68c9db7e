"""Fixtures for the evidence tests: one simulated AMD signer per session."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from attestation.simulated_amd import SimulatedAmd
from runner.evidence.simulated import load_or_create_simulated_amd


@pytest.fixture(scope="session")
def sim_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state_dir = tmp_path_factory.mktemp("sim-state")
    load_or_create_simulated_amd(state_dir)
    return state_dir


@pytest.fixture(scope="session")
def sim_amd(sim_state_dir: Path) -> SimulatedAmd:
    return load_or_create_simulated_amd(sim_state_dir)


@pytest.fixture
def binding() -> bytes:
    """Stands in for the RFC 8785 bytes of an envelope binding."""
    return b'{"corpusChecksum":"sha256:' + hashlib.sha256(b"corpus").hexdigest().encode() + b'"}'
