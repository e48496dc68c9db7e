"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from attestation.simulated_amd import SimulatedAmd

ASSETS = Path(__file__).parent / "assets"

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def assets() -> Path:
    """The directory of checked-in test vectors (see tests/assets/README.md)."""
    return ASSETS


@pytest.fixture(scope="session")
def simulated_amd() -> SimulatedAmd:
    """One simulated AMD PKI per session: three RSA-4096 keys take about a second to generate."""
    return SimulatedAmd.generate()
