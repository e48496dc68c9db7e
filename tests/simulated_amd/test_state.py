"""The simulated AMD's state directory: stable, private, race-safe, never silently replaced."""

from __future__ import annotations

import dataclasses
import stat
import threading
from pathlib import Path

import pytest

from attestation.abi.product import ProductLine
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd.state import store as store_simulated_amd
from runner.errors import InputError, UsageError
from runner.evidence.simulated import (
    load_or_create_simulated_amd,
    simulated_amd_dir,
    simulated_root_fingerprint,
)
from runner.statedir import default_state_dir


def test_default_state_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTESTED_REPLAY_STATE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("ATTESTED_REPLAY_STATE_DIR")
    assert default_state_dir() == tmp_path / "xdg" / "attested-replay"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".cache" / "attested-replay"
    assert simulated_amd_dir() == tmp_path / "home" / ".cache" / "attested-replay" / "simulated-amd"


def test_created_once_then_loaded(simulated_amd: SimulatedAmd, tmp_path: Path) -> None:
    calls: list[int] = []

    def factory() -> SimulatedAmd:
        calls.append(1)
        return simulated_amd

    first = load_or_create_simulated_amd(tmp_path, factory=factory)
    second = load_or_create_simulated_amd(tmp_path, factory=factory)
    assert calls == [1]
    assert first.root_fingerprint == second.root_fingerprint == simulated_amd.root_fingerprint
    assert simulated_root_fingerprint(tmp_path) == simulated_amd.root_fingerprint
    assert (
        first.issue_vcek(product_line=ProductLine.GENOA).public_key()
        == second.issue_vcek(product_line=ProductLine.GENOA).public_key()
    )


def test_private_files_are_owner_only(simulated_amd: SimulatedAmd, tmp_path: Path) -> None:
    load_or_create_simulated_amd(tmp_path, factory=lambda: simulated_amd)
    directory = tmp_path / "simulated-amd"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}
    assert modes == {
        "format": 0o644,
        "ark.pem": 0o644,
        "ask.pem": 0o644,
        "asvk.pem": 0o644,
        "ark.key.pem": 0o600,
        "ask.key.pem": 0o600,
        "asvk.key.pem": 0o600,
        "vek-seed.hex": 0o600,
    }
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_the_env_var_chooses_the_state_dir(
    simulated_amd: SimulatedAmd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTESTED_REPLAY_STATE_DIR", str(tmp_path))
    load_or_create_simulated_amd(factory=lambda: simulated_amd)
    assert (tmp_path / "simulated-amd" / "ark.pem").read_text() == simulated_amd.ark_pem


def test_concurrent_creators_agree_on_one_root(simulated_amd: SimulatedAmd, tmp_path: Path) -> None:
    # Two distinct hierarchies (different VCEK seeds) race to create the same directory.
    candidates = [
        simulated_amd,
        dataclasses.replace(simulated_amd, vek_seed=b"\x07" * 32),
    ]
    both_checked = threading.Barrier(2)
    results: dict[int, SimulatedAmd] = {}
    errors: list[BaseException] = []

    def create(index: int) -> None:
        def factory() -> SimulatedAmd:
            both_checked.wait(timeout=10)  # both saw "no state yet"
            return candidates[index]

        try:
            results[index] = load_or_create_simulated_amd(tmp_path, factory=factory)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    on_disk = (tmp_path / "simulated-amd" / "vek-seed.hex").read_text()
    assert results[0].vek_seed.hex() == results[1].vek_seed.hex() == on_disk
    assert on_disk in {c.vek_seed.hex() for c in candidates}
    assert [p.name for p in tmp_path.iterdir()] == ["simulated-amd"]  # no staging left behind


def test_store_refuses_to_overwrite(simulated_amd: SimulatedAmd, tmp_path: Path) -> None:
    directory = tmp_path / "simulated-amd"
    assert store_simulated_amd(simulated_amd, directory) is True
    other = dataclasses.replace(simulated_amd, vek_seed=b"\x01" * 32)
    assert store_simulated_amd(other, directory) is False
    assert (directory / "vek-seed.hex").read_text() == simulated_amd.vek_seed.hex()
    assert [p.name for p in tmp_path.iterdir()] == ["simulated-amd"]


def _never() -> SimulatedAmd:
    raise AssertionError("a corrupt state must not be replaced by a new root")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "ask.pem").write_text("garbage"), r"'ask\.pem' is not a PEM certificate"),
        (lambda d: (d / "vek-seed.hex").write_text("xyz"), r"'vek-seed\.hex' is not hex"),
        (lambda d: (d / "ark.key.pem").unlink(), r"ark\.key\.pem is missing"),
        (lambda d: (d / "format").write_bytes(b"\xff"), r"format is unreadable"),
    ],
)
def test_corrupt_state_is_an_error_naming_the_file(
    simulated_amd: SimulatedAmd, tmp_path: Path, damage: object, message: str
) -> None:
    directory = tmp_path / "simulated-amd"
    store_simulated_amd(simulated_amd, directory)
    damage(directory)  # type: ignore[operator]
    with pytest.raises(InputError, match=message) as raised:
        load_or_create_simulated_amd(tmp_path, factory=_never)
    assert type(raised.value) is InputError
    assert str(directory) in str(raised.value)
    assert (directory / "ark.pem").read_text() == simulated_amd.ark_pem  # root left in place


def test_a_state_dir_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot create the simulated PKI state in"):
        load_or_create_simulated_amd(blocker)
