"""The publication service with two witnesses, every part a real process on loopback:
checkpoints gather cosignatures, `tenant fetch --witness-threshold 2` accepts them, a witness
killed with -9 stops neither publishing nor its own state, and a fetch that lacks the required
cosignatures exits 7 naming the witness."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from attestation.transparency.checkpoint import VerifierKey, tenant_log_origin
from attestation.transparency.cosignature import require_cosignatures, verify_cosignatures
from runner.cli import main as runner_main
from runner.publish.client import publish_envelope, receipt_json
from runner.service.log.checkpoint import CheckpointSigner
from tests import hostile_server as hs
from tests.publish.conftest import LOG_NAME, Deployment, ServeProcess, make_envelope
from tests.witness.logs import Log
from tests.witness.test_independent import run_gocheck
from tests.witness.test_service import Running, make_key

TAMPERING = 7


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Deployment, list[Running], list[VerifierKey]]]:
    with Deployment(tmp_path) as deployment:
        signer = CheckpointSigner.load_or_create(
            LOG_NAME, tmp_path / "state" / "log-signing-key.pem", create=True
        )
        witnesses: list[Running] = []
        keys: list[VerifierKey] = []
        try:
            for n in (1, 2):
                state = tmp_path / f"witness-{n}"
                keys.append(make_key(state, f"witness.test/w{n}"))
                running = Running(
                    state, Log(), name=f"witness.test/w{n}", log_key=signer.verifier_key.encode()
                )
                running.start()
                witnesses.append(running)
            yield deployment, witnesses, keys
        finally:
            for running in witnesses:
                if running.process is not None and running.process.poll() is None:
                    running.kill()


def publish(server: ServeProcess, deployment: Deployment, *run_ids: str) -> None:
    for run_id in run_ids:
        outcome = publish_envelope(
            server.url,
            make_envelope("acme", run_id),
            tenant="acme",
            run_id=run_id,
            token=deployment.operator,
        )
        assert outcome.status == "created"


def cosigned(
    server: ServeProcess, deployment: Deployment, size: int, keys: list[VerifierKey]
) -> str:
    """Wait for the service's cosigned checkpoint of ``size`` with cosignatures by ``keys``."""
    deadline = time.monotonic() + 20
    while True:
        answer = requests.get(
            f"{server.url}/v1/tenants/acme/log/checkpoint/cosigned",
            headers={"Authorization": f"Bearer {deployment.reader}"},
            timeout=5,
        )
        if answer.status_code == 200 and answer.text.split("\n")[1] == str(size):
            found = {c.witness.name for c in verify_cosignatures(answer.text, keys)}
            if found == {key.name for key in keys}:
                return answer.text
        assert time.monotonic() < deadline, f"not cosigned at size {size}: {answer.text}"
        time.sleep(0.1)


def fetch(tmp_path: Path, server: ServeProcess, deployment: Deployment, *extra: str) -> int:
    token = tmp_path / "reader.token"
    token.write_text(deployment.reader + "\n")
    key = (tmp_path / "state" / "log-key.pub").read_text().strip()
    return runner_main(
        [
            "tenant", "fetch", "--server", server.url, "--token-file", str(token),
            "--tenant", "acme", "--out", str(tmp_path / "store"), "--log-key", key, *extra,
        ]
    )  # fmt: skip


def test_a_witnessed_log_end_to_end(
    tmp_path: Path,
    setup: tuple[Deployment, list[Running], list[VerifierKey]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployment, witnesses, keys = setup
    options = [item for w in witnesses for item in ("--witness", f"{w.url} {w.key_text}")]
    server = deployment.serve(*options)
    publish(server, deployment, "run-1", "run-2", "run-3")
    note = cosigned(server, deployment, 3, keys)
    # What the service serves, read by the independent implementation too.
    independent: dict[str, object] = {
        "logKey": (tmp_path / "state" / "log-key.pub").read_text().strip(),
        "witnessKeys": [key.encode() for key in keys],
        "origin": tenant_log_origin(LOG_NAME, "acme"),
        "note": note,
    }
    assert run_gocheck(independent) == "ok"
    pins = [item for key in keys for item in ("--witness-key", key.encode())]
    assert fetch(tmp_path, server, deployment, *pins, "--witness-threshold", "2") == 0
    assert "verified log of 3 entries (was 0)" in capsys.readouterr().out
    assert (tmp_path / "store" / "witnesses.json").is_file()

    # A witness killed with -9: publishing goes on, the other witness still cosigns.
    witnesses[1].kill()
    publish(server, deployment, "run-4", "run-5")
    cosigned(server, deployment, 5, keys[:1])
    # The pinned witnesses (witnesses.json) are required without the options.
    assert fetch(tmp_path, server, deployment) == TAMPERING
    assert (
        "checkpoint has 1 valid witness cosignature(s), 2 required; none from: witness.test/w2"
        in capsys.readouterr().err
    )
    # Restarted with its state, it cosigns the extension of what it cosigned before.
    witnesses[1].start()
    publish(server, deployment, "run-6")
    cosigned(server, deployment, 6, keys)
    assert fetch(tmp_path, server, deployment) == 0
    assert "verified log of 6 entries (was 3)" in capsys.readouterr().out


def test_a_service_without_cosigned_checkpoints_fails_a_witnessed_fetch(
    tmp_path: Path,
    setup: tuple[Deployment, list[Running], list[VerifierKey]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployment, _witnesses, keys = setup
    server = deployment.serve()  # configured with no witness
    publish(server, deployment, "run-1")
    assert fetch(tmp_path, server, deployment, "--witness-key", keys[0].encode()) == TAMPERING
    assert (
        "the service has no checkpoint cosigned by witnesses (1 required; none from: "
        "witness.test/w1)" in capsys.readouterr().err
    )


def test_a_split_view_is_refused_by_the_witness_and_caught_by_tenant_fetch(
    tmp_path: Path,
    setup: tuple[Deployment, list[Running], list[VerifierKey]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The operator runs a second store with the same log key and shows it to one tenant
    fetcher: both views are signed by the log, but the witness cosigns only the one it saw
    first, so a fetcher that requires the witness is never shown the other (exit 7)."""
    deployment, witnesses, keys = setup
    option = ("--witness", f"{witnesses[0].url} {witnesses[0].key_text}")
    honest = deployment.serve(*option)
    publish(honest, deployment, "run-1", "run-2")
    cosigned(honest, deployment, 2, keys[:1])

    fork_root = tmp_path / "fork"
    fork_root.mkdir()
    with Deployment(fork_root) as fork:
        (fork_root / "state").mkdir()
        key_file = "log-signing-key.pem"
        (fork_root / "state" / key_file).write_bytes((tmp_path / "state" / key_file).read_bytes())
        (fork_root / "state" / key_file).chmod(0o600)
        forked = fork.serve(*option)
        publish(forked, fork, "run-1", "run-9")  # the same size, another history
        answer = requests.get(f"{forked.url}/v1/tenants/acme/log/checkpoint", timeout=5)
        assert answer.status_code == 401  # a token is needed; the fork's own tenant token:
        plain = requests.get(
            f"{forked.url}/v1/tenants/acme/log/checkpoint",
            headers={"Authorization": f"Bearer {fork.reader}"},
            timeout=5,
        )
        assert plain.text.split("\n")[1] == "2"  # signed by the genuine log key
        deadline = time.monotonic() + 20
        while "witness_refused" not in forked.output():  # the fork's submission was refused
            assert time.monotonic() < deadline, forked.output()
            time.sleep(0.1)
        assert "another root for size 2, which this witness cosigned" in forked.output()
        refused = requests.get(
            f"{forked.url}/v1/tenants/acme/log/checkpoint/cosigned",
            headers={"Authorization": f"Bearer {fork.reader}"},
            timeout=5,
        )
        assert refused.status_code == 404  # the witness refused to cosign the other root
        token = tmp_path / "fork-reader.token"
        token.write_text(fork.reader + "\n")
        log_key = (tmp_path / "state" / "log-key.pub").read_text().strip()
        code = runner_main(
            [
                "tenant", "fetch", "--server", forked.url, "--token-file", str(token),
                "--tenant", "acme", "--out", str(tmp_path / "fork-store"),
                "--log-key", log_key, "--witness-key", keys[0].encode(),
            ]
        )  # fmt: skip
        assert code == TAMPERING
        assert "no checkpoint cosigned by witnesses" in capsys.readouterr().err
    # The honest view still gathers the witness's cosignature and passes.
    assert fetch(tmp_path, honest, deployment, "--witness-key", keys[0].encode()) == 0


def test_a_receipt_carries_the_cosigned_checkpoint_that_holds_its_entry(
    tmp_path: Path,
    setup: tuple[Deployment, list[Running], list[VerifierKey]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Cosignatures come after publication: a new entry's receipt has none, and once the
    witnesses cosigned a tree that holds the entry, publishing it again (the publisher's
    retry) gives a receipt with that checkpoint and the entry's proof under it. A tenant
    given it as --checkpoint checks the pinned witnesses' lines it carries."""
    deployment, witnesses, keys = setup
    options = [item for w in witnesses for item in ("--witness", f"{w.url} {w.key_text}")]
    server = deployment.serve(*options)
    first = publish_envelope(
        server.url,
        make_envelope("acme", "run-1"),
        tenant="acme",
        run_id="run-1",
        token=deployment.operator,
    )
    assert (first.log_index, first.cosigned) == (0, None)
    publish(server, deployment, "run-2", "run-3")
    note = cosigned(server, deployment, 3, keys)

    again = publish_envelope(
        server.url,
        make_envelope("acme", "run-2"),
        tenant="acme",
        run_id="run-2",
        token=deployment.operator,
    )
    assert again.status == "already-present"
    assert again.cosigned is not None
    assert (again.log_index, again.cosigned.tree_size) == (1, 3)
    assert again.cosigned.checkpoint == note
    require_cosignatures(again.cosigned.checkpoint, keys, 2)
    printed = json.loads(receipt_json(again))["cosigned"]
    assert printed == {
        "treeSize": 3,
        "checkpoint": note,
        "inclusionProof": list(again.cosigned.inclusion_proof),
    }

    given = tmp_path / "receipt.checkpoint"
    given.write_text(again.cosigned.checkpoint)
    pins = [item for key in keys for item in ("--witness-key", key.encode())]
    assert fetch(tmp_path, server, deployment, *pins, "--checkpoint", str(given)) == 0
    assert "verified log of 3 entries (was 3)" in capsys.readouterr().out
    # A cosignature line of a pinned witness that does not verify: tampering.
    lines = note.rstrip("\n").split("\n")
    blob = bytearray(base64.b64decode(lines[-1].rsplit(" ", 1)[1]))
    blob[-1] ^= 1
    lines[-1] = f"{lines[-1].rsplit(' ', 1)[0]} {base64.b64encode(bytes(blob)).decode()}"
    given.write_text("\n".join(lines) + "\n")
    assert fetch(tmp_path, server, deployment, "--checkpoint", str(given)) == TAMPERING
    assert (
        f"checkpoint {given}: cosignature by witness 'witness.test/w2' does not verify"
        in capsys.readouterr().err
    )


def test_witnesses_that_are_down_or_hang_never_hold_up_publishing(
    tmp_path: Path,
    setup: tuple[Deployment, list[Running], list[VerifierKey]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One witness refuses connections (killed with -9), another accepts them and never
    answers: every publication is answered at once all the same, and the first witness's
    cosignature arrives once it is back."""
    deployment, witnesses, keys = setup
    for running in witnesses:
        running.kill()
    with hs.HostileServer(hs.silent) as hanging:
        server = deployment.serve(
            "--witness",
            f"{witnesses[0].url} {witnesses[0].key_text}",
            "--witness",
            f"{hanging.url} {witnesses[1].key_text}",
        )
        for number in range(1, 6):
            started = time.monotonic()
            publish(server, deployment, f"run-{number}")
            assert time.monotonic() - started < 2.0  # the witnesses' 5 s/10 s timeouts not met
        deadline = time.monotonic() + 20
        while "witness_unreachable" not in server.output():
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.1)
        missing = requests.get(
            f"{server.url}/v1/tenants/acme/log/checkpoint/cosigned",
            headers={"Authorization": f"Bearer {deployment.reader}"},
            timeout=5,
        )
        assert (missing.status_code, missing.json()["reason"]) == (404, "not-cosigned")
        assert fetch(tmp_path, server, deployment) == 0  # a tenant pinning no witness
        assert "verified log of 5 entries (was 0)" in capsys.readouterr().out
        witnesses[0].start()
        cosigned(server, deployment, 5, keys[:1])
