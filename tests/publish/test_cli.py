"""`attested-replay token create` and `serve` wiring."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from runner.cli import main
from runner.service.log.storage import Role, SqliteStorage
from runner.service.serve import ServiceConfig, open_service
from runner.service.tokens import authenticate, hash_token


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
    record = authenticate(storage, token)
    assert record is not None
    assert (record.tenant, record.role, record.revoked_at) == ("acme", Role.TENANT, None)
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


def test_token_list_and_revoke_by_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    database = tmp_path / "publish.sqlite3"
    base = ["--db", str(database)]
    assert main(["token", "create", "--tenant", "acme", "--role", "operator", *base]) == 0
    token = capsys.readouterr().out.strip()
    assert main(["token", "list", *base]) == 0
    listed = capsys.readouterr().out.splitlines()
    token_id = hash_token(token)[:12]
    assert listed[0].split() == ["id", "tenant", "role", "created", "revoked"]
    assert listed[1].split()[:3] == [token_id, "acme", "operator"]
    assert listed[1].split()[4] == "-"
    assert main(["token", "revoke", "--id", token_id[:6], *base]) == 9
    assert "give at least 12 hex digits" in capsys.readouterr().err
    assert main(["token", "revoke", "--id", token_id, *base]) == 0
    assert capsys.readouterr().out == f"revoked {token_id} (acme, operator)\n"
    assert authenticate(SqliteStorage(database), token) is None
    assert main(["token", "list", *base]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[4] != "-"
    assert main(["token", "revoke", "--id", token_id, *base]) == 9  # nothing left to revoke
    assert main(["token", "list", "--db", str(tmp_path / "typo" / "x.sqlite3")]) == 9
    assert "directory" in capsys.readouterr().err


def test_serve_on_a_busy_port_fails_before_creating_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["serve", "--state-dir", str(tmp_path / "new"), "--port", str(port)]
        assert main(argv) == 9
    assert f"--port {port}: address 127.0.0.1:{port} is in use" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
