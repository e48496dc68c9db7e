"""`publish` names its own options in its errors and refuses before delivering anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from runner.cli import main
from runner.publish.spool import Spool

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
