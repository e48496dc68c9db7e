"""The PostgreSQL half of the suite cannot silently vanish in CI, and services.sh must be sourced."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.publish.conftest import PG_DSN_VARIABLE, running_in_ci

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_TEST = "tests/publish/test_service.py::test_authentication_and_roles[postgres]"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        ("", False),
        ("0", False),
        ("false", False),
        ("FALSE", False),
        ("no", False),
        ("true", True),
        ("True", True),
        ("1", True),
        ("yes", True),
    ],
)
def test_ci_detection(value: str | None, expected: bool) -> None:
    environ = {} if value is None else {"CI": value}
    assert running_in_ci(environ) is expected


def run_postgres_test(ci: str | None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in {PG_DSN_VARIABLE, "CI"}}
    if ci is not None:
        environ["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", POSTGRES_TEST],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )


def test_postgres_tests_fail_in_ci_without_a_dsn() -> None:
    result = run_postgres_test("true")
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout  # the fixture fails, so pytest reports an error
    assert "skipped" not in result.stdout
    assert f"CI is set but {PG_DSN_VARIABLE} is unset: .ci/services.sh did not run" in (
        result.stdout
    )


def test_postgres_tests_skip_with_the_reason_outside_ci() -> None:
    result = run_postgres_test(None)
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
    assert f"{PG_DSN_VARIABLE} is unset (run `. .ci/services.sh`" in result.stdout


def test_services_script_refuses_to_be_executed_instead_of_sourced() -> None:
    result = subprocess.run(
        ["bash", ".ci/services.sh"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert result.stderr == (
        "services.sh: source it (. .ci/services.sh) so that the DSN reaches the tests\n"
    )
    assert result.stdout == ""
