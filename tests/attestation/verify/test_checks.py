"""VerificationResult: the verdict is the first failing check's class, and it fails closed."""

from __future__ import annotations

from attestation.errors import BindingError, FailureClass
from attestation.verify.checks import Check, VerificationResult

PASS = Check.passed("a", FailureClass.MALFORMED, "ok")


def test_all_passed_is_verified() -> None:
    result = VerificationResult.from_checks([PASS])
    assert result.ok
    assert result.failure_class is None
    assert result.exit_code == 0
    assert result.to_json_dict() == {
        "verified": True,
        "simulated": False,
        "exitCode": 0,
        "failureClass": None,
        "checks": [{"name": "a", "class": "malformed", "ok": True, "detail": "ok"}],
        "report": None,
    }


def test_first_failure_in_check_order_decides_the_exit_code() -> None:
    checks = [
        PASS,
        Check.failed("w", FailureClass.WORKLOAD_IDENTITY, "x"),
        Check.failed("p", FailureClass.PLATFORM_POLICY, "y"),
        Check.from_error("b", BindingError("binding wrong")),
    ]
    result = VerificationResult.from_checks(checks)
    assert not result.ok
    assert result.failure_class is FailureClass.WORKLOAD_IDENTITY
    assert result.exit_code == 6
    assert [c.name for c in result.failed_checks] == ["w", "p", "b"]
    assert result.failed_checks[2].failure_class is FailureClass.BINDING
    assert result.failed_checks[2].detail == "binding wrong"


def test_no_checks_or_unrun_checks_never_verify() -> None:
    assert VerificationResult.from_checks([]).exit_code == 9
    skipped = Check.not_run("s", FailureClass.BAD_SIGNATURE, "why")
    assert skipped.detail == "not run: why"
    result = VerificationResult.from_checks([PASS, skipped])
    assert not result.ok
    assert result.exit_code == 9
