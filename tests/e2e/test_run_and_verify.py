"""attested-replay run -> verify-attested-run --envelope, and every way to tamper with it."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attestation.cli import main as verify_main
from attestation.envelope.binding import result_digest
from runner.cli import main as runner_main
from tests.e2e.conftest import EXAMPLE_CORPUS, GenuineRun

Mutation = Callable[[dict[str, Any]], None]


def _verify(envelope: Path, expected: Path, *extra: str) -> int:
    return verify_main(["--envelope", str(envelope), "--expected", str(expected), *extra])


def _write(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


def test_genuine_envelope_verifies(
    genuine_run: GenuineRun, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _verify(genuine_run.envelope, genuine_run.expected, "--json") == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["verified"] is True
    assert verdict["exitCode"] == 0
    assert verdict["failureClass"] is None
    names = [check["name"] for check in verdict["checks"]]
    assert names.index("report.signature") < names.index("binding.report-data")
    assert names.index("binding.report-data") < names.index("expectation.run-id")
    assert all(check["ok"] is True for check in verdict["checks"])


def test_envelope_convenience_fields_describe_the_run(genuine_run: GenuineRun) -> None:
    envelope = genuine_run.envelope_json
    binding = envelope["binding"]
    assert isinstance(binding, dict)
    assert envelope["platform"] == "simulated"
    assert envelope["runId"] == binding["runId"] == "run-e2e-1"
    assert binding["resultDigest"] == result_digest(envelope["result"])
    result_file = json.loads(genuine_run.result.read_bytes())
    assert result_file == envelope["result"]


def _set_binding(key: str, value: str) -> Mutation:
    def mutate(envelope: dict[str, Any]) -> None:
        envelope["binding"][key] = value

    return mutate


def _alter_result(envelope: dict[str, Any]) -> None:
    envelope["result"]["limits"] = [*envelope["result"]["limits"], "added after the run"]


def _alter_measurement(envelope: dict[str, Any]) -> None:
    envelope["measurement"] = "ab" * 48


def _alter_top_level_run_id(envelope: dict[str, Any]) -> None:
    envelope["runId"] = "run-e2e-2"


def _claim_real_hardware(envelope: dict[str, Any]) -> None:
    envelope["platform"] = "sev-snp"


_DATA = "binding.report-data"
_FIELDS = "binding.envelope-fields"
_RESULT = "binding.result-digest"
#: Each tampering, and exactly the binding checks it must fail.
BINDING_TAMPERING: dict[str, tuple[Mutation, list[str]]] = {
    "binding-run-id": (_set_binding("runId", "run-e2e-2"), [_DATA, _FIELDS]),
    "binding-corpus-checksum": (_set_binding("corpusChecksum", "sha256:" + "0" * 64), [_DATA]),
    "binding-result-digest": (_set_binding("resultDigest", "sha256:" + "1" * 64), [_DATA, _RESULT]),
    "result-body": (_alter_result, [_RESULT]),
    "measurement-field": (_alter_measurement, [_FIELDS]),
    "top-level-run-id": (_alter_top_level_run_id, [_FIELDS]),
    "platform-claims-hardware": (_claim_real_hardware, [_FIELDS]),
}


@pytest.mark.parametrize(
    ("mutation", "failing"), BINDING_TAMPERING.values(), ids=BINDING_TAMPERING.keys()
)
def test_tampered_envelope_fails_with_binding_class(
    genuine_run: GenuineRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mutation: Mutation,
    failing: list[str],
) -> None:
    tampered = copy.deepcopy(genuine_run.envelope_json)
    mutation(tampered)
    assert (
        _verify(_write(tmp_path / "tampered.json", tampered), genuine_run.expected, "--json") == 7
    )
    verdict = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in verdict["checks"] if c["ok"] is False] == failing
    assert all(c["ok"] is None for c in verdict["checks"] if c["name"].startswith("expectation."))


def test_report_moved_from_another_envelope_fails_with_binding_class(
    genuine_run: GenuineRun, state_dir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.json"
    args = ["run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "run-e2e-other", "--tenant", "acme"]
    assert (
        runner_main(
            [*args, "--evidence", "simulated", "--state-dir", str(state_dir), "--out", str(other)]
        )
        == 0
    )
    moved = copy.deepcopy(genuine_run.envelope_json)
    moved["evidence"] = json.loads(other.read_bytes())["evidence"]
    assert _verify(_write(tmp_path / "moved.json", moved), genuine_run.expected) == 7


def test_replay_of_another_corpus_than_expected_fails_with_expectation_class(
    genuine_run: GenuineRun, tmp_path: Path
) -> None:
    expected = json.loads(genuine_run.expected.read_bytes())
    expected["corpusChecksum"] = "sha256:" + "2" * 64
    assert _verify(genuine_run.envelope, _write(tmp_path / "expected.json", expected)) == 8


@pytest.mark.parametrize(
    ("key", "value"),
    [("runId", "run-e2e-9"), ("tenant", "globex"), ("resultDigest", "sha256:" + "3" * 64)],
    ids=["run-id", "tenant", "result-digest"],
)
def test_other_expectations_fail_with_expectation_class(
    genuine_run: GenuineRun, tmp_path: Path, key: str, value: str
) -> None:
    expected = json.loads(genuine_run.expected.read_bytes())
    expected[key] = value
    assert _verify(genuine_run.envelope, _write(tmp_path / "expected.json", expected)) == 8


def test_simulated_evidence_without_pinned_root_is_an_untrusted_chain(
    genuine_run: GenuineRun, tmp_path: Path
) -> None:
    expected = json.loads(genuine_run.expected.read_bytes())
    del expected["simulatedRoots"]
    assert _verify(genuine_run.envelope, _write(tmp_path / "expected.json", expected)) == 2


def test_workload_identity_policy_applies_in_envelope_mode(
    genuine_run: GenuineRun, tmp_path: Path
) -> None:
    expected = json.loads(genuine_run.expected.read_bytes())
    expected["measurements"] = ["cd" * 48]
    assert _verify(genuine_run.envelope, _write(tmp_path / "expected.json", expected)) == 6
    expected["measurements"] = [genuine_run.envelope_json["measurement"]]
    assert _verify(genuine_run.envelope, _write(tmp_path / "expected2.json", expected)) == 0


@pytest.mark.parametrize(
    "content",
    [b"", b"{not json", b'{"apiVersion": "attested-replay.dev/v2"}', b"[]"],
    ids=["empty", "garbage", "wrong-version", "not-an-object"],
)
def test_malformed_envelope_exits_1(
    genuine_run: GenuineRun, tmp_path: Path, content: bytes
) -> None:
    envelope = tmp_path / "bad.json"
    envelope.write_bytes(content)
    assert _verify(envelope, genuine_run.expected) == 1


def test_truncated_report_in_envelope_exits_1(genuine_run: GenuineRun, tmp_path: Path) -> None:
    tampered = copy.deepcopy(genuine_run.envelope_json)
    raw = base64.b64decode(tampered["evidence"]["report"])  # type: ignore[index]
    tampered["evidence"]["report"] = base64.b64encode(raw[:-1]).decode()  # type: ignore[index]
    assert _verify(_write(tmp_path / "short.json", tampered), genuine_run.expected) == 1


def test_missing_files_exit_9(genuine_run: GenuineRun, tmp_path: Path) -> None:
    assert _verify(tmp_path / "absent.json", genuine_run.expected) == 9
    assert _verify(genuine_run.envelope, tmp_path / "absent.json") == 9


def test_unknown_key_in_expected_values_is_malformed(
    genuine_run: GenuineRun, tmp_path: Path
) -> None:
    expected = json.loads(genuine_run.expected.read_bytes())
    expected["alowDebug"] = True
    assert _verify(genuine_run.envelope, _write(tmp_path / "expected.json", expected)) == 1


def test_checksum_mismatch_refuses_to_run_and_writes_nothing(
    state_dir: Path, tmp_path: Path
) -> None:
    envelope = tmp_path / "envelope.json"
    code = runner_main(
        [
            "run",
            "--corpus",
            str(EXAMPLE_CORPUS),
            "--run-id",
            "r1",
            "--tenant",
            "acme",
            "--evidence",
            "simulated",
            "--state-dir",
            str(state_dir),
            "--expect-checksum",
            "sha256:" + "0" * 64,
            "--out",
            str(envelope),
        ]
    )
    assert code == 2
    assert list(tmp_path.iterdir()) == []
