"""Options a new user mistypes (issue 31): each refused with a range that holds, exit 9,
before any work; and `token create` finds serve's database through --state-dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from attestation.cli import main as verify_main
from runner.cli import main

RUN = ["run", "--corpus", ".", "--run-id", "r", "--tenant", "t", "--out", "o.json"]


RUN = ["run", "--corpus", ".", "--run-id", "r", "--tenant", "t", "--out", "o.json"]
RUN += ["--evidence", "coco-aa"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--port", "99999"], "--port: '99999' is not a TCP port (1 to 65535)"),
        (["serve", "--port", "-1"], "--port: '-1' is not a TCP port (1 to 65535)"),
        (["serve", "--port", "0"], "--port: '0' is not a TCP port (1 to 65535)"),
        (
            ["serve", "--header-timeout", "0"],
            "--header-timeout: '0' is not a number of seconds more than 0 and at most 3600",
        ),
        (
            ["serve", "--body-timeout", "nan"],
            "--body-timeout: 'nan' is not a number of seconds more than 0 and at most 3600",
        ),
        (
            [*RUN, "--agent-wait", "inf"],
            "--agent-wait: 'inf' is not a number of seconds from 0 to 3600",
        ),
        (
            [*RUN, "--agent-timeout", "0"],
            "--agent-timeout: '0' is not a number of seconds more than 0 and at most 3600",
        ),
    ],
    ids=lambda value: value[1] if isinstance(value, list) else None,
)
def test_out_of_range_options_are_refused_with_their_range(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 9
    assert capsys.readouterr().err == f"error: {message}\n"


def test_the_verifier_names_its_wait_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main(["--report", "r", "--endorsement", "e", "--input-timeout", "0"]) == 9
    assert "0 is not a number of seconds more than 0 and at most 3600" in capsys.readouterr().err


def test_token_create_takes_the_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "server"
    state.mkdir()
    assert (
        main(["token", "create", "--tenant", "acme", "--role", "tenant", "--state-dir", str(state)])
        == 0
    )
    assert len(capsys.readouterr().out.strip()) > 20
    assert (state / "publish.sqlite3").is_file()
    assert main(["token", "list", "--state-dir", str(state)]) == 0
    assert " acme  tenant " in capsys.readouterr().out
    assert (
        main(
            [
                "token",
                "create",
                "--tenant",
                "acme",
                "--role",
                "tenant",
                "--state-dir",
                str(tmp_path / "none"),
            ]
        )
        == 9
    )
    assert "--state-dir" in capsys.readouterr().err
