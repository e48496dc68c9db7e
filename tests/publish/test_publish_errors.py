"""`publish` names its own options in its errors and refuses before delivering anything."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from attestation.contracts import MAX_ENVELOPE_BYTES
from runner.cli import main
from runner.publish.spool import Spool
from tests.publish.conftest import make_merged_envelope, sha256_name

TARGET = "https://publish.example"


def test_a_token_is_asked_for_by_publishs_own_flag(
    tmp_path: Path, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = tmp_path / "envelope.json"
    envelope.write_bytes(envelope_for("acme", "run-1"))
    argv = ["publish", str(envelope), "--target", TARGET, "--tenant", "acme"]
    assert main([*argv, "--spool-dir", str(tmp_path)]) == 9
    assert capsys.readouterr().err.endswith(
        f"error: --target {TARGET}: publishing there needs a token: pass --token-file FILE\n"
    )
    assert Spool(tmp_path).items() == []


def test_flush_without_a_token_is_refused_before_any_delivery(
    tmp_path: Path, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    spool = Spool(tmp_path / "spool")
    spool.add(envelope_for("acme", "run-1"), tenant="acme", run_id="run-1", target=TARGET)
    spool.add(envelope_for("acme", "run-2", 2), tenant="acme", run_id="run-2", target="dir://x")
    assert main(["publish", "--flush", "--spool-dir", str(tmp_path / "spool")]) == 9
    assert capsys.readouterr().err.endswith(
        f"error: --flush: delivering to {TARGET} needs a token: pass --token-file FILE\n"
    )
    assert len(spool.items()) == 2  # nothing delivered, nothing dropped


def test_an_envelope_file_over_the_limit_is_refused_naming_envelope_before_any_delivery(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = tmp_path / "huge.json"
    envelope.write_bytes(b" " * (MAX_ENVELOPE_BYTES + 1))
    token_file = tmp_path / "token"
    token_file.write_text("arp_" + "x" * 43)
    spool = tmp_path / "spool"
    argv = ["publish", str(envelope), "--target", TARGET, "--tenant", "acme"]
    for extra in ([], ["--run-id", "run-1"]):  # checked even when no run ID is read from it
        argv_run = [*argv, *extra, "--token-file", str(token_file), "--spool-dir", str(spool)]
        assert main(argv_run) == 1
        assert capsys.readouterr().err.endswith(
            f"error: ENVELOPE {envelope}: over the {MAX_ENVELOPE_BYTES}-byte envelope limit "
            "(nothing published or spooled)\n"
        )
        assert Spool(spool).items() == []


def test_a_file_that_is_no_envelope_is_named_as_envelope(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = tmp_path / "envelope.json"
    envelope.write_bytes(b'{"kind": "Other"}')
    argv = ["publish", str(envelope), "--target", f"dir://{tmp_path / 'out'}", "--tenant", "acme"]
    assert main([*argv, "--spool-dir", str(tmp_path / "spool")]) == 1
    assert f"error: ENVELOPE {envelope} is not a valid attestation envelope: " in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


def test_a_merged_envelope_publishes_under_its_headers_run_id_without_run_id(
    tmp_path: Path, envelope_for: Callable[..., bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    shards = [envelope_for("acme", "run-m", n, shard=(n, 2)) for n in range(2)]
    data = make_merged_envelope("acme", "run-m", shards)
    envelope = tmp_path / "merged.json"
    envelope.write_bytes(data)
    out = tmp_path / "published"
    argv = ["publish", str(envelope), "--target", f"dir://{out}", "--tenant", "acme"]
    assert main([*argv, "--spool-dir", str(tmp_path / "spool")]) == 0
    digest = sha256_name(data)
    assert json.loads(capsys.readouterr().out)["digest"] == digest
    assert (out / "acme" / "runs" / "run-m").read_text() == digest + "\n"
