"""``attested-replay witness serve`` as a process on loopback: cosigning over HTTP, the 409
answer's form, state kept across kill -9, and the monitoring endpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from attestation.transparency.checkpoint import COSIGNATURE_V1_ALGORITHM, VerifierKey
from attestation.transparency.cosignature import require_cosignatures
from runner.witness.store import origin_hash
from tests.publish.conftest import free_port
from tests.witness.logs import Log

REPO = Path(__file__).resolve().parents[2]
NAME = "witness.test/w1"


def witness_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", "witness", *args]


class Running:
    """A ``witness serve`` process following ``log_key`` (by default a fresh test log's)."""

    def __init__(self, state: Path, log: Log, name: str = NAME, log_key: str | None = None) -> None:
        self.state = state
        self.log = log
        self.name = name
        self.log_key = log_key or log.signer.verifier_key.encode()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        #: The witness's verifier key as `witness serve` printed it.
        self.key_text = ""
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            witness_command(
                "serve",
                "--name",
                self.name,
                "--state-dir",
                str(self.state),
                "--log",
                self.log_key,
                "--port",
                str(self.port),
            ),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        assert first.startswith(f"witness {self.name}+")
        self.key_text = first.split()[1]
        assert self.process.stdout.readline() == f"listening on {self.url}\n"

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=10)  # waits, and closes its stdout

    def add(self, body: bytes) -> requests.Response:
        return requests.post(f"{self.url}/add-checkpoint", data=body, timeout=10)


def make_key(state: Path, name: str = NAME) -> VerifierKey:
    """``witness key``: the witness's key made in ``state``, and its verifier key."""
    made = subprocess.run(
        witness_command("key", "--name", name, "--state-dir", str(state)),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    key = VerifierKey.parse(made.stdout.strip(), algorithm=COSIGNATURE_V1_ALGORITHM)
    assert key.name == name
    assert (state / "witness-key.pem").stat().st_mode & 0o777 == 0o600
    return key


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[Running]:
    state = tmp_path / "witness"
    key = make_key(state)
    running = Running(state, Log())
    running.key = key  # type: ignore[attr-defined]
    running.start()
    yield running
    if running.process is not None and running.process.poll() is None:
        running.kill()


def test_cosigns_over_http_and_keeps_its_state_across_kill_9(witness: Running) -> None:
    log = witness.log
    key: VerifierKey = witness.key  # type: ignore[attr-defined]
    log.grow(3)
    answer = witness.add(log.request(0))
    assert answer.status_code == 200
    require_cosignatures(log.note() + answer.text, [key], 1)
    monitored = requests.get(f"{witness.url}/{origin_hash(log.origin)}/checkpoint", timeout=10)
    assert monitored.text == log.note() + answer.text

    witness.kill()
    witness.start()
    stale = witness.add(log.request(0))
    assert (stale.status_code, stale.text) == (409, "3\n")
    assert stale.headers["Content-Type"].startswith("text/x.tlog.size")
    # After the crash, another history of the size it cosigned is still refused.
    fork = Log()
    fork.signer, fork.origin = log.signer, log.origin
    fork.grow(3, label="other")
    conflicting = witness.add(fork.request(3))
    assert (conflicting.status_code, conflicting.text) == (
        422,
        "another root for size 3, which this witness cosigned\n",
    )
    log.grow(2)
    assert witness.add(log.request(3)).status_code == 200


def test_a_replayed_old_checkpoint_is_refused_over_http(witness: Running) -> None:
    """The operator replays a checkpoint the witness cosigned before (a smaller tree): from
    the size it cosigned since, it is no extension; from its own size, not its latest."""
    log = witness.log
    log.grow(3)
    old_note = log.note()
    assert witness.add(log.request(0)).status_code == 200
    log.grow(4)
    assert witness.add(log.request(3)).status_code == 200
    for old_size, answer in (
        (7, (400, "old size 7 exceeds the checkpoint size 3\n")),
        (3, (409, "7\n")),
        (0, (409, "7\n")),
    ):
        replay = witness.add(f"old {old_size}\n\n{old_note}".encode())
        assert (replay.status_code, replay.text) == answer
    monitored = requests.get(f"{witness.url}/{origin_hash(log.origin)}/checkpoint", timeout=10)
    assert monitored.text.startswith(f"{log.origin}\n7\n")  # still the latest it cosigned


def test_refusals_and_bounds_over_http(witness: Running) -> None:
    log = witness.log
    log.grow(1)
    assert witness.add(b"old 0\n").status_code == 400
    assert requests.get(f"{witness.url}/{'0' * 64}/checkpoint", timeout=10).status_code == 404
    assert requests.get(f"{witness.url}/other", timeout=10).status_code == 404
    big = requests.post(f"{witness.url}/add-checkpoint", data=b"x" * (64 * 1024 + 1), timeout=10)
    assert big.status_code == 413
    assert witness.add(log.request(0)).status_code == 200


def test_serve_refuses_a_bad_log_key_and_a_missing_witness_key(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bad = subprocess.run(
        witness_command("serve", "--name", NAME, "--state-dir", str(tmp_path), "--log", "x+y"),
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 9
    assert "--log: 'x+y': verifier key must be <name>+<hex key id>+<base64 key>" in bad.stderr
    key = Log().signer.verifier_key.encode()
    missing = subprocess.run(
        witness_command("serve", "--name", NAME, "--state-dir", str(tmp_path), "--log", key),
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert missing.returncode == 9
    assert f"witness key {tmp_path / 'witness-key.pem'} does not exist" in missing.stderr
