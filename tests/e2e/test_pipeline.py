"""The main job through its library object: ``run(RunRequest) -> RunResult``, no argparse."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from attestation import ExpectedValues, sha256_digest, verify_envelope
from runner.errors import ChecksumMismatchError, UsageError
from runner.evidence.simulated import load_or_create_simulated_amd
from runner.pipeline import RunRequest, run
from runner.pod_output import (
    FRAME_PREFIX,
    TerminationMessage,
    frame_envelope,
    framed_payloads,
    unframe_envelope,
)
from runner.workload import current_workload
from tests.e2e.conftest import EXAMPLE_CORPUS


def _request(state_dir: Path, out: Path, **changes: object) -> RunRequest:
    fields: dict[str, object] = {
        "corpus": str(EXAMPLE_CORPUS),
        "run_id": "lib-run-1",
        "tenant": "acme",
        "evidence": "simulated",
        "out": out,
        "state_dir": state_dir,
    }
    fields.update(changes)
    return RunRequest.model_validate(fields)


def test_run_returns_a_typed_result_that_the_tenant_verifier_accepts(
    state_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "envelope.json"
    termination = tmp_path / "termination-log"
    result = run(_request(state_dir, out, termination_log=termination, nonce="n-1"))

    assert result.envelope_path == out
    assert out.read_bytes() == result.envelope_bytes
    assert result.envelope_digest == sha256_digest(result.envelope_bytes)
    assert result.result_path == tmp_path / "envelope.json.result.json"
    assert json.loads(result.result_path.read_bytes()) == result.outcome.result
    assert result.provider == "simulated"
    assert result.verification.ok
    assert result.publication is None
    binding = result.envelope.binding
    assert (binding.run_id, binding.tenant, binding.nonce) == ("lib-run-1", "acme", "n-1")
    assert binding.corpus_checksum == result.outcome.corpus_checksum
    assert binding.result_digest == result.outcome.result_digest
    assert binding.workload == current_workload()
    assert result.envelope.platform == "simulated"

    assert result.termination == TerminationMessage(
        run_id="lib-run-1",
        envelope=result.envelope_digest,
        result=result.outcome.result_digest,
        corpus_checksum=result.outcome.corpus_checksum,
    )
    assert TerminationMessage.parse(termination.read_text()) == result.termination

    root = load_or_create_simulated_amd(state_dir).root_fingerprint
    expected = ExpectedValues(
        run_id="lib-run-1",
        corpus_checksum=result.outcome.corpus_checksum,
        evaluation_digest=result.outcome.evaluation_digest,
        tenant="acme",
        result_digest=result.outcome.result_digest,
        simulated_roots=(root,),
    )
    verdict = verify_envelope(result.envelope_bytes, expected, now=datetime.now(UTC))
    assert verdict.ok, verdict.summary()
    assert verdict.exit_code == 0


def test_the_frame_round_trips_the_envelope(state_dir: Path, tmp_path: Path) -> None:
    result = run(_request(state_dir, tmp_path / "envelope.json", omit_result=True))
    line = frame_envelope(result.envelope_bytes)
    assert line.startswith(FRAME_PREFIX)
    log = f"replaying\n{line}\ndone\n"
    (payload,) = framed_payloads(log)
    assert unframe_envelope(payload) == result.envelope_bytes
    assert result.envelope.result is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("run_id", "bad id!", "String should match pattern"),
        ("tenant", "ACME", "String should match pattern"),
        ("expect_checksum", "abc", "String should match pattern"),
        ("evidence", "tpm", "Input should be 'simulated', 'coco-aa'"),
        ("colour", "blue", "Extra inputs are not permitted"),
    ],
)
def test_a_request_is_validated_on_construction(
    tmp_path: Path, field: str, value: str, message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as raised:
        _request(tmp_path, tmp_path / "envelope.json", **{field: value})
    assert raised.value.errors()[0]["loc"] == (field,)


def test_run_refuses_before_any_work(state_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "envelope.json"
    with pytest.raises(UsageError, match="is the envelope's own path"):
        run(_request(state_dir, out, result_out=out))
    with pytest.raises(ChecksumMismatchError, match="refusing to replay"):
        run(_request(state_dir, out, expect_checksum="sha256:" + "0" * 64))
    assert list(tmp_path.iterdir()) == []


def test_a_run_validates_its_chain_once_and_reports_its_platform(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attestation.endorsement import chain as chain_module

    calls: list[str] = []
    real_verify_chain = chain_module.verify_chain

    def counting(*args: Any, **kwargs: Any) -> chain_module.VerifiedChain:
        calls.append("chain")
        return real_verify_chain(*args, **kwargs)

    monkeypatch.setattr("attestation.verify.verifier.verify_chain", counting)
    monkeypatch.setattr("attestation.envelope.verification.verify_chain", counting)
    result = run(_request(state_dir, tmp_path / "envelope.json"))
    assert calls == ["chain"]  # the evidence's check and the envelope's self-check share it
    assert result.verification.ok
    assert result.verification.platform == "simulated" == result.envelope.platform
    assert result.verification.chain is not None
    root = load_or_create_simulated_amd(state_dir).ark_certificate
    assert result.verification.chain.ark == root
