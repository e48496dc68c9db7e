"""`attested-replay token create` and `serve` wiring."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.cli import main
from runner.publish.service import ServiceConfig, open_service
from runner.publish.storage import Role, SqliteStorage
from runner.publish.tokens import authenticate


def test_token_create_prints_a_token_stored_only_as_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "publish.sqlite3"
    assert (
        main(["token", "create", "--tenant", "acme", "--role", "tenant", "--db", str(database)])
        == 0
    )
    token = capsys.readouterr().out.strip()
    assert token.startswith("arp_")
    assert len(token) == 4 + 43  # 32 random bytes, URL-safe base64 without padding
    storage = SqliteStorage(database)
    assert authenticate(storage, token) == ("acme", Role.TENANT)
    assert authenticate(storage, token + "x") is None
    assert token.encode() not in database.read_bytes()
    assert (
        main(
            [
                "token",
                "create",
                "--tenant",
                "Not_A_Label",
                "--role",
                "tenant",
                "--db",
                str(database),
            ]
        )
        == 9
    )
    assert (
        main(["token", "create", "--tenant", "acme", "--role", "admin", "--db", str(database)]) == 9
    )


def test_service_state_is_created_once(tmp_path: Path) -> None:
    config = ServiceConfig(state_dir=tmp_path / "state", log_name="publish.example")
    _storage, signer = open_service(config)
    assert (tmp_path / "state" / "log-signing-key.pem").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "state" / "log-key.pub").read_text() == signer.verifier_key.encode() + "\n"
    assert (tmp_path / "state" / "publish.sqlite3").is_file()
    _again, same = open_service(config)
    assert same.verifier_key == signer.verifier_key


def test_serve_refuses_a_missing_given_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "serve",
        "--state-dir",
        str(tmp_path),
        "--log-signing-key",
        str(tmp_path / "absent.pem"),
    ]
    assert main(argv) == 9
    assert f"error: --log-signing-key {tmp_path / 'absent.pem'}: no such file" in (
        capsys.readouterr().err
    )
