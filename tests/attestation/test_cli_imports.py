"""A one-shot ``verify-attested-run`` process imports only what its mode uses.

Each verification is a fresh process, so every module it imports is paid for once per
envelope (docs/performance.md). A plain SEV-SNP envelope needs neither a merged envelope's
machinery (the shards' partials, marks and tails), nor the az-snp-vtpm checks, nor the tenant's
tools; ``--help`` needs no verifier at all. Each test runs the CLI in a fresh interpreter and
reads its ``sys.modules`` at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attestation import cli
from attestation.simulated_amd import SimulatedAmd
from tests.attestation.envelope.test_envelope_verify import (
    CORPUS,
    EVALUATION,
    RUN_ID,
    sim_envelope,
)

REPO = Path(__file__).resolve().parents[2]
#: Runs ``attestation.cli.main`` on argv, then prints the exit code and the sorted module
#: names as one JSON line (after the verdict, which goes to stdout first).
_PROBE = (
    "import json, sys\n"
    "from attestation.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print(json.dumps([code, sorted(sys.modules)]))\n"
)
#: What a plain envelope's verification must not import (exact module names).
NOT_FOR_A_PLAIN_ENVELOPE = (
    "attestation.envelope.merged",
    "attestation.envelope.merged_verification",
    "attestation.scoring",
    "attestation.scoring.shards",
    "attestation.scoring.partial",
    "attestation.scoring.marks",
    "attestation.scoring.metrics",
    "attestation.scoring.tails",
    "attestation.verify.az_vtpm",
    "attestation.abi.tpm",
    "attestation.abi.hcl",
    "attestation.transparency.merkle",
    "attestation.tenant",
    "attestation.tenant.contract",
    "attestation.simulated_amd",
    "runner",
    "difflib",
)
#: What the verification needs (so the probe is known to have verified, not stopped early).
FOR_A_PLAIN_ENVELOPE = (
    "attestation.envelope.verification",
    "attestation.endorsement.chain",
    "attestation.verify.verifier",
)


def run_probe(*argv: str) -> tuple[int, list[str]]:
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        cwd=REPO,  # the checkout is the first entry of sys.path ("-c")
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    code, modules = json.loads(done.stdout.splitlines()[-1])
    return code, modules


@pytest.fixture
def plain_envelope(simulated_amd: SimulatedAmd, tmp_path: Path) -> list[str]:
    envelope = tmp_path / "envelope.json"
    envelope.write_text(json.dumps(sim_envelope(simulated_amd)))
    expected = tmp_path / "expected.json"
    expected.write_text(
        json.dumps(
            {
                "runId": RUN_ID,
                "corpusChecksum": CORPUS,
                "evaluationDigest": EVALUATION,
                "simulatedRoots": [simulated_amd.root_fingerprint],
            }
        )
    )
    return ["--envelope", str(envelope), "--expected", str(expected)]


def test_a_plain_envelope_loads_no_merged_vtpm_or_tenant_module(
    plain_envelope: list[str],
) -> None:
    code, modules = run_probe(*plain_envelope)
    assert code == 0  # VERIFIED
    loaded = set(modules)
    assert [name for name in NOT_FOR_A_PLAIN_ENVELOPE if name in loaded] == []
    assert [name for name in FOR_A_PLAIN_ENVELOPE if name not in loaded] == []


def test_help_loads_no_verifier() -> None:
    code, modules = run_probe("--help")
    assert code == 0
    verifier = sorted(
        name
        for name in modules
        if name.startswith(
            ("attestation.verify", "attestation.envelope", "attestation.endorsement")
        )
        or name in {"attestation.contracts", "pydantic", "cryptography.x509"}
    )
    assert verifier == []


def test_the_environment_is_restored_after_a_verification(
    plain_envelope: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI turns pydantic's plugins off only while it verifies (attestation/cli.py)."""
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    assert cli.main(plain_envelope) == 0
    assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "some-plugin")
    assert cli.main(plain_envelope) == 0
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "some-plugin"
