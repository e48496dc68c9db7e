"""Errors become numbers in one place, in the words of the command's family: a command of the
verification family (`tenant reproduce`) never lets an error read as one of its verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from attestation.tenant import errors as tenant_errors
from runner import errors
from runner.cli import main
from runner.exit_codes import Family, exit_code_for

EXAMPLE_CORPUS = Path(__file__).parents[2] / "runner" / "examples" / "corpus"


@pytest.mark.parametrize(
    ("error", "everywhere", "verification"),
    [
        (errors.ChecksumMismatchError("x"), 2, 1),
        (errors.InputError("x"), 1, 1),
        (tenant_errors.TenantInputError("x"), 1, 1),
        (errors.EvidenceError("x"), 3, 9),
        (errors.VerificationFailedError("x", verifier_exit_code=4), 4, 9),
        (errors.SubmitError("x"), 5, 9),
        (errors.PublishError("x"), 6, 9),
        (tenant_errors.TamperingError("x"), 7, 9),
        (errors.SourceUnavailableError("x"), 8, 9),
        (errors.UsageError("x"), 9, 9),
        (tenant_errors.FetchWorkerError("x"), 9, 9),
        (tenant_errors.VerificationWorkerError("x"), 9, 9),
        (RuntimeError("x"), 9, 9),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_one_mapping_and_the_verification_family(
    error: Exception, everywhere: int, verification: int
) -> None:
    assert exit_code_for(error) == everywhere
    assert exit_code_for(error, Family.REPLAY) == everywhere
    assert exit_code_for(error, Family.VERIFICATION) == verification


def test_reproduce_never_turns_an_error_into_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error the reproduction raises is not 'expectation' (8) or 'binding' (7)."""
    envelope = tmp_path / "envelope.json"
    envelope.write_text("{}")

    def unreachable(*_args: object) -> None:
        raise errors.SourceUnavailableError("corpus source unreachable")

    monkeypatch.setattr("runner.commands.reproduce.reproduce", unreachable)
    argv = ["tenant", "reproduce", "--envelope", str(envelope), "--corpus", str(EXAMPLE_CORPUS)]
    assert main(argv) == 9
    assert capsys.readouterr().err == "error: corpus source unreachable\n"

    def mismatched(*_args: object) -> None:
        raise errors.ChecksumMismatchError("the corpus checksum differs")

    monkeypatch.setattr("runner.commands.reproduce.reproduce", mismatched)
    assert main(argv) == 1  # malformed in the verifier's table (2 would be untrusted-chain)


def test_the_family_of_a_nested_command_is_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    """`tenant` is a publication command group, `tenant reproduce` a verification command."""
    assert main(["tenant", "reproduce", "--help"]) == 0
    assert "exit codes (verification)" in capsys.readouterr().out
    assert main(["tenant", "fetch", "--help"]) == 0
    assert "exit codes (publication)" in capsys.readouterr().out
