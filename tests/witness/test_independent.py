"""The log's checkpoints, the witnesses' cosignatures and the log's proofs, checked by
implementations the project did not write: golang.org/x/mod/sumdb/note,
github.com/transparency-dev/formats (checkpoint, cosignature/v1) and
github.com/transparency-dev/merkle, in the test tool ``tests/witness/gocheck`` built with the
machine's Go toolchain (cached outside the repository). Without Go the tests skip, except in
CI, where they fail."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.tenant.fetch import FetchReport, fetch_tenant
from attestation.transparency.checkpoint import VerifierKey, tenant_log_origin
from runner.publish.client import publish_envelope
from runner.witness.cosigner import Cosigner
from runner.witness.server import Witness
from runner.witness.store import WitnessStore
from tests.publish.conftest import LOG_NAME, Deployment, make_envelope, running_in_ci
from tests.witness.logs import Log

SOURCE = Path(__file__).resolve().parent / "gocheck"
BUILD_TIMEOUT_SECONDS = 900


def gocheck() -> Path:
    go = shutil.which("go")
    if go is None:
        message = "Go is not installed: the independent checks build tests/witness/gocheck"
        if running_in_ci(os.environ):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((SOURCE / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    binary = cache / "attested-replay" / f"gocheck-{digest.hexdigest()[:16]}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        built = subprocess.run(
            [go, "build", "-trimpath", "-o", str(binary), "."],
            cwd=SOURCE,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
        if built.returncode != 0:
            pytest.fail(f"go build of gocheck failed: {built.stderr.strip()}", pytrace=False)
    return binary


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def run_gocheck(request: dict[str, object]) -> str:
    done = subprocess.run(
        [str(gocheck())],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip()


def witnessed(tmp_path: Path) -> tuple[Log, list[Witness], dict[str, object]]:
    log = Log()
    keys = {log.signer.verifier_key.name: log.signer.verifier_key}
    witnesses = [
        Witness(
            Cosigner(f"witness.test/w{n}", Ed25519PrivateKey.generate()),
            WitnessStore(tmp_path / f"w{n}.sqlite3"),
            keys,
        )
        for n in (1, 2)
    ]
    log.grow(5)
    for witness in witnesses:
        witness.add_checkpoint(log.request(0))
    old_root = log.tree.root(5)
    log.grow(6)
    lines = "".join(witness.add_checkpoint(log.request(5)) for witness in witnesses)
    request: dict[str, object] = {
        "logKey": log.signer.verifier_key.encode(),
        "witnessKeys": [w.cosigner.verifier_key.encode() for w in witnesses],
        "origin": log.origin,
        "note": log.note() + lines,
        "oldSize": 5,
        "oldRoot": b64(old_root),
        "consistency": [b64(node) for node in log.tree.consistency_proof(5, 11)],
        "leaf": b64(b"entry-7"),
        "leafIndex": 7,
        "inclusionProof": [b64(node) for node in log.tree.inclusion_proof(7, 11)],
    }
    return log, witnesses, request


def test_an_independent_implementation_accepts_checkpoints_cosignatures_and_proofs(
    tmp_path: Path,
) -> None:
    _log, _witnesses, request = witnessed(tmp_path)
    assert run_gocheck(request) == "ok"


def test_it_refuses_what_ours_refuses(tmp_path: Path) -> None:
    log, _witnesses, request = witnessed(tmp_path)
    note = str(request["note"])
    last = note.rstrip("\n").rsplit(" ", 1)
    blob = bytearray(base64.b64decode(last[1]))
    blob[-1] ^= 1
    forged = f"{last[0]} {b64(bytes(blob))}\n"
    assert run_gocheck({**request, "note": forged}).startswith("checkpoint:")
    assert run_gocheck({**request, "leafIndex": 6}).startswith("inclusion of leaf 6:")
    other = Log()
    other.grow(5, label="other")
    wrong_old = {**request, "oldRoot": b64(other.tree.root(5))}
    assert run_gocheck(wrong_old).startswith("consistency 5 -> 11:")
    keys = request["witnessKeys"]
    assert isinstance(keys, list)
    unsigned = {**request, "witnessKeys": [*keys, _third_key()]}
    assert run_gocheck(unsigned) == "no verified cosignature by witness.test/w3"
    assert log.tree.size == 11


def _third_key() -> str:
    return Cosigner("witness.test/w3", Ed25519PrivateKey.generate()).verifier_key.encode()


def test_an_independent_implementation_proves_entries_from_the_served_tiles(
    tmp_path: Path,
) -> None:
    """golang.org/x/mod/sumdb/tlog reads the service's tlog-tiles (checkpoint, hash tiles of
    levels 0 and 1, full and partial, an entry bundle) and proves entries with them alone, as
    our own `tenant fetch` does from a kept tree across both levels."""
    binary = gocheck()
    with Deployment(tmp_path) as deployment:
        server = deployment.serve()
        key = (tmp_path / "state" / "log-key.pub").read_text().strip()

        def fetch() -> FetchReport:
            return fetch_tenant(
                server=server.url,
                token=deployment.reader,
                tenant="acme",
                out_dir=tmp_path / "store",
                log_key=VerifierKey.parse(key),
            )

        for number in range(300):  # a full tile, a partial one, and a level-1 hash
            run_id = f"run-{number}"
            publish_envelope(
                server.url,
                make_envelope("acme", run_id),
                tenant="acme",
                run_id=run_id,
                token=deployment.operator,
            )
            if number == 256:  # our own tenant fetch keeps a tree of 257 = 256 + 1
                assert fetch().size == 257
        # It proves the next 43 entries from the level-1 hash tile (the subtree of 256),
        # the partial level-0 tile (leaf 256) and the entry bundle of entries 256..299.
        grown = fetch()
        assert (grown.previous_size, grown.size, len(grown.new_envelopes)) == (257, 300, 43)
        request = {
            "logKey": key,
            "origin": tenant_log_origin(LOG_NAME, "acme"),
            "tilesURL": f"{server.url}/v1/tenants/acme/tlog",
            "token": deployment.reader,
        }
        for index in (0, 255, 256, 299):
            done = subprocess.run(
                [str(binary)],
                input=json.dumps({**request, "tileIndex": index}),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.stdout.strip() == "ok", (index, done.stdout)
        beyond = subprocess.run(
            [str(binary)],
            input=json.dumps({**request, "tileIndex": 300}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert beyond.stdout.startswith("proof from tiles:")
