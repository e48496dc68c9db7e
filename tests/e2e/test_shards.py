"""run --shard-index/--shard-count -> merge -> verify-attested-run, and every way to tamper.

A missing, duplicated, foreign, misplaced or altered shard is a binding failure (7); a shard
count other than the tenant pinned is an expectation failure (8); the merged report is byte
for byte the unsharded run's, so the tenant's expected values work for both.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.cli import main as verify_main
from attestation.contracts import (
    MAX_SHARD_ENVELOPE_BYTES,
    RUN_OPENINGS_JSON_BYTES,
    TAIL_OPENING_JSON_BYTES,
    merged_envelope_bound,
    sha256_digest,
)
from runner.cli import main as runner_main
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import SqliteStorage
from tests.e2e.conftest import EXAMPLE_CORPUS, GenuineRun
from tests.publish.conftest import running_service

RUN_ID = "run-e2e-1"  # the genuine run's: the same expected values serve both
Mutation = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class ShardedRun:
    shards: list[Path]
    merged: Path
    result: Path
    merged_json: dict[str, Any]


def run_shard(
    out: Path, state_dir: Path, index: int | None, count: int, run_id: str = RUN_ID
) -> Path:
    envelope = out / f"shard-{run_id}-{index}-of-{count}.json"
    argv = [
        "run",
        "--corpus",
        str(EXAMPLE_CORPUS),
        "--run-id",
        run_id,
        "--tenant",
        "acme",
        "--evidence",
        "simulated",
        "--state-dir",
        str(state_dir),
        "--out",
        str(envelope),
        "--shard-count",
        str(count),
    ]
    if index is not None:
        argv += ["--shard-index", str(index)]
    assert runner_main(argv) == 0
    return envelope


def merge(out: Path, state_dir: Path, shards: list[Path], *extra: str) -> int:
    return runner_main(
        [
            "merge",
            *map(str, shards),
            "--out",
            str(out),
            "--trust-simulated-root",
            "--state-dir",
            str(state_dir),
            *extra,
        ]
    )


@pytest.fixture(scope="session")
def sharded(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> ShardedRun:
    out = tmp_path_factory.mktemp("shards")
    shards = [run_shard(out, state_dir, index, 3) for index in range(3)]
    merged = out / "merged.json"
    # in any order: merge lists them by index
    assert merge(merged, state_dir, [shards[2], shards[0], shards[1]]) == 0
    return ShardedRun(
        shards, merged, out / "merged.json.result.json", json.loads(merged.read_bytes())
    )


def verify(envelope: Path, expected: Path, *extra: str) -> int:
    return verify_main(["--envelope", str(envelope), "--expected", str(expected), *extra])


def test_merged_report_is_the_unsharded_report(
    sharded: ShardedRun, genuine_run: GenuineRun
) -> None:
    assert sharded.result.read_bytes() == genuine_run.result.read_bytes()
    unsharded = genuine_run.envelope_json
    assert sharded.merged_json["resultDigest"] == unsharded["binding"]["resultDigest"]  # type: ignore[index]
    assert sharded.merged_json["result"] == unsharded["result"]


def test_the_merged_envelope_is_within_its_bound(sharded: ShardedRun) -> None:
    """Shard envelopes within the per-shard bound, the merged envelope within the bound
    the early refusal computes (its openings: one per run and shard)."""
    for shard in sharded.shards:
        assert len(shard.read_bytes()) <= MAX_SHARD_ENVELOPE_BYTES
    runs = len(sharded.merged_json["tailOpenings"])
    assert runs == 4  # the example plan: 2 arms x 2 runs, every latency known
    assert len(sharded.merged.read_bytes()) <= merged_envelope_bound(3, runs)[0]
    openings = json.dumps(sharded.merged_json["tailOpenings"], separators=(",", ":"))
    assert len(openings) <= runs * (RUN_OPENINGS_JSON_BYTES + 3 * TAIL_OPENING_JSON_BYTES)


def test_the_tenant_verifies_the_merged_envelope_with_its_usual_expected_values(
    sharded: ShardedRun, genuine_run: GenuineRun, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = json.loads(genuine_run.expected.read_bytes())
    expected["resultDigest"] = sharded.merged_json["resultDigest"]
    path = sharded.merged.with_name("expected-digest.json")
    path.write_text(json.dumps(expected))
    capsys.readouterr()
    assert verify(sharded.merged, path, "--json") == 0
    verdict = json.loads(capsys.readouterr().out)
    names = [check["name"] for check in verdict["checks"]]
    assert names[0] == "envelope.parse"
    assert "shards[2].report.signature" in names
    assert names.index("shards[2].report.signature") < names.index("shards[0].binding.report-data")
    expectations = names.index("expectation.run-id")
    assert names[expectations - 2 : expectations] == ["merged.shards", "merged.result"]
    assert names[-2:] == ["expectation.nonce", "expectation.shard"]
    assert all(check["ok"] is True for check in verdict["checks"])
    assert verify(sharded.merged, path) == 0
    # Each shard's identity checks are named shards[i].workload.*: the verdict still says
    # what the tenant did not pin, once.
    assert capsys.readouterr().out == (
        "VERIFIED (SIMULATED — not AMD hardware) (report version 5, Milan, vcek); "
        "MEASUREMENT and HOST_DATA not checked (not pinned)\n"
    )


def test_a_shard_alone_is_not_the_run(sharded: ShardedRun, genuine_run: GenuineRun) -> None:
    assert verify(sharded.shards[1], genuine_run.expected) == 8


@pytest.mark.parametrize(("count", "code"), [(3, 0), (1, 8), (4, 8)])
def test_the_tenant_can_pin_the_shard_count(
    sharded: ShardedRun, genuine_run: GenuineRun, tmp_path: Path, count: int, code: int
) -> None:
    expected = json.loads(genuine_run.expected.read_bytes())
    expected["shardCount"] = count
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(expected))
    assert verify(sharded.merged, path) == code
    if count != 3:
        assert verify(genuine_run.envelope, path) == (0 if count == 1 else 8)


def test_the_index_comes_from_the_indexed_job_environment(
    tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    envelope = run_shard(tmp_path, state_dir, None, 2)
    binding = json.loads(envelope.read_bytes())["binding"]
    assert binding["shard"] == {"index": 1, "count": 2}


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--shard-count", "2"], None, "--shard-count needs --shard-index"),
        (["--shard-count", "2"], "01", "$JOB_COMPLETION_INDEX '01' is not a shard index"),
        (["--shard-count", "2"], "-1", "is not a shard index"),
        (["--shard-count", "2", "--shard-index", "2"], None, "--shard-index 2 is not below"),
        (["--shard-index", "0"], None, "--shard-index and --shard-count go together"),
        (
            ["--shard-count", "257", "--shard-index", "0"],
            None,
            "--shard-count 257: at most 37 shards can be merged",
        ),
        (
            ["--shard-count", "38", "--shard-index", "0"],
            None,
            (
                "--shard-count 38: at most 37 shards can be merged: the merged envelope of 38 "
                "shards of a plan of up to 50 runs may reach 16826550 bytes and 75038 JSON "
                "values, over the envelope limits (16777216 bytes, 100000 values)"
            ),
        ),
        (["--shard-count", "0", "--shard-index", "0"], None, "a replay has at least 1 shard"),
    ],
)
def test_bad_shard_options_are_usage_errors(  # noqa: PLR0917 (pytest fixtures and parameters)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: str | None,
    message: str,
) -> None:
    if env is None:
        monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    else:
        monkeypatch.setenv("JOB_COMPLETION_INDEX", env)
    base = ["run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "r", "--tenant", "acme"]
    base += ["--evidence", "simulated", "--out", str(tmp_path / "e.json")]
    assert runner_main([*base, *argv]) == 9
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # refused before any work: nothing written


# -- tampering with the merged envelope ---------------------------------------------------


def tampered(sharded: ShardedRun, tmp_path: Path, mutate: Mutation) -> Path:
    document = copy.deepcopy(sharded.merged_json)
    mutate(document)
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="session")
def other_shards(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> dict[str, Any]:
    """Genuine shards that do not belong: another run's shard 1 of 3, this run's 1 of 2."""
    out = tmp_path_factory.mktemp("other")
    return {
        "foreign": json.loads(run_shard(out, state_dir, 1, 3, run_id="run-e2e-2").read_bytes()),
        "other-split": json.loads(run_shard(out, state_dir, 1, 2).read_bytes()),
    }


def _drop_last(document: dict[str, Any]) -> None:
    document["shards"].pop()


def _duplicate(document: dict[str, Any]) -> None:
    document["shards"][2] = document["shards"][1]


def _swap(document: dict[str, Any]) -> None:
    shards = document["shards"]
    shards[1], shards[2] = shards[2], shards[1]


def _alter_partial(document: dict[str, Any]) -> None:
    document["shards"][1]["result"]["runs"][0]["correct"] -= 1


def _alter_merged_result(document: dict[str, Any]) -> None:
    document["result"]["case_count"] += 1


def _alter_result_digest(document: dict[str, Any]) -> None:
    document["resultDigest"] = "sha256:" + "0" * 64


def _alter_count(document: dict[str, Any]) -> None:
    document["shardCount"] = 2


def _alter_header(document: dict[str, Any]) -> None:
    document["runId"] = "run-e2e-2"


def _alter_p95(document: dict[str, Any]) -> None:
    """A p95 one ulp above the proven one (the shards' openings then fail at their counts)."""
    run = document["tailOpenings"][0]
    run["p95"] = f"{int(run['p95'], 16) + 1:016x}"


def _alter_opening_count(document: dict[str, Any]) -> None:
    document["tailOpenings"][0]["shards"][1]["atLeast"] -= 1


def _alter_opening_proof(document: dict[str, Any]) -> None:
    opening = document["tailOpenings"][0]["shards"][2]
    proof = bytearray(base64.b64decode(opening["proof"]))
    proof[0] ^= 1  # a value of the opened block: no longer the block the shard attested
    opening["proof"] = base64.b64encode(proof).decode()


def _drop_opening(document: dict[str, Any]) -> None:
    document["tailOpenings"].pop()


def _swap_openings(document: dict[str, Any]) -> None:
    openings = document["tailOpenings"]
    openings[0], openings[1] = openings[1], openings[0]


def _swap_shard_openings(document: dict[str, Any]) -> None:
    shards = document["tailOpenings"][0]["shards"]
    shards[0], shards[1] = shards[1], shards[0]


@pytest.mark.parametrize(
    ("mutate", "failed", "detail"),
    [
        (_drop_last, "merged.shards", "shard 2 of 3 is missing"),
        (_duplicate, "merged.shards", "shard 1 of 3 appears more than once"),
        (_swap, "merged.shards", "not listed in index order: [0, 2, 1]"),
        (_alter_partial, "shards[1].binding.result-digest", "the result was changed"),
        (_alter_merged_result, "merged.result", "the merged result was changed"),
        (_alter_result_digest, "merged.result", "the envelope says sha256:000"),
        (_alter_count, "merged.shards", "shards[0] is shard 0 of 3, the merged envelope has 2"),
        (_alter_header, "merged.shards", "binds run_id run-e2e-1, the merged envelope says"),
        # the p95 of every run rests on the openings of the shards' attested tail roots
        (_alter_p95, "merged.result", "run A0/1: shard "),
        (_alter_opening_count, "merged.result", "run A0/1: "),
        (
            _alter_opening_proof,
            "merged.result",
            "run A0/1: shard 2's tail opening: block 1 is not under the shard's attested tail root",
        ),
        (_drop_opening, "merged.result", "the tail openings are for runs"),
        (_swap_openings, "merged.result", "the tail openings are for runs [('A0', 2), ('A0', 1)"),
        (_swap_shard_openings, "merged.result", "run A0/1: shard 0's tail opening"),
    ],
)
def test_tampering_is_a_binding_failure(  # noqa: PLR0917 (pytest fixtures and parameters)
    sharded: ShardedRun,
    genuine_run: GenuineRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mutate: Mutation,
    failed: str,
    detail: str,
) -> None:
    path = tampered(sharded, tmp_path, mutate)
    capsys.readouterr()
    assert verify(path, genuine_run.expected, "--json") == 7
    verdict = json.loads(capsys.readouterr().out)
    first = next(check for check in verdict["checks"] if check["ok"] is False)
    assert first["name"] == failed
    assert detail in first["detail"]


@pytest.mark.parametrize(
    ("which", "detail"),
    [
        ("foreign", "binds run_id run-e2e-2, the merged envelope says run-e2e-1"),
        ("other-split", "shards[1] is shard 1 of 2, the merged envelope has 3 shards"),
    ],
)
def test_a_genuine_shard_from_elsewhere_is_a_binding_failure(  # noqa: PLR0917 (pytest fixtures and parameters)
    sharded: ShardedRun,
    genuine_run: GenuineRun,
    other_shards: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    which: str,
    detail: str,
) -> None:
    def replace(document: dict[str, Any]) -> None:
        document["shards"][1] = other_shards[which]

    path = tampered(sharded, tmp_path, replace)
    capsys.readouterr()
    assert verify(path, genuine_run.expected, "--json") == 7
    verdict = json.loads(capsys.readouterr().out)
    first = next(check for check in verdict["checks"] if check["ok"] is False)
    assert (first["name"], detail in first["detail"]) == ("merged.shards", True)


def test_merge_refuses_an_incomplete_set(
    sharded: ShardedRun, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "merged.json"
    assert merge(out, state_dir, sharded.shards[:2]) == 1
    assert "shard 2 of 3 is missing" in capsys.readouterr().err
    assert merge(out, state_dir, [*sharded.shards, sharded.shards[0]]) == 1
    assert "shard 0 of 3 appears more than once" in capsys.readouterr().err
    assert not out.exists()


def _copied(shards: list[Path], directory: Path) -> list[Path]:
    """The shard envelopes and their tails files, copied into ``directory``."""
    directory.mkdir()
    copies = []
    for shard in shards:
        for path in (shard, shard.with_name(shard.name + ".tails.json")):
            (directory / path.name).write_bytes(path.read_bytes())
        copies.append(directory / shard.name)
    return copies


def _tails_document(shard: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(shard.with_name(shard.name + ".tails.json").read_bytes())
    return document


def _write_tails(shard: Path, document: dict[str, Any]) -> None:
    shard.with_name(shard.name + ".tails.json").write_text(json.dumps(document))


def test_merge_refuses_a_tails_file_that_is_not_its_shards(
    sharded: ShardedRun, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = _copied(sharded.shards, tmp_path / "copy")
    out = tmp_path / "merged.json"
    document = _tails_document(shards[1])
    tail = bytearray(base64.b64decode(document["runs"][0]["latency_tail"]))
    tail[7] ^= 1  # the largest latency of run A0/1, one ulp off
    document["runs"][0]["latency_tail"] = base64.b64encode(tail).decode()
    _write_tails(shards[1], document)
    capsys.readouterr()
    assert merge(out, state_dir, shards) == 1
    assert capsys.readouterr().err == (
        f"error: the shard envelopes do not merge: {shards[1]} tails: run A0/1: the tail is "
        "not the one shard 1 of 3 attested (its Merkle root differs)\n"
    )
    # shard 2's tails beside shard 1's envelope
    _write_tails(shards[1], _tails_document(shards[2]))
    assert merge(out, state_dir, shards) == 1
    assert capsys.readouterr().err == (
        f"error: the shard envelopes do not merge: {shards[1]} tails: the tails of shard 2 of 3, "
        "not of shard 1 of 3\n"
    )
    shards[1].with_name(shards[1].name + ".tails.json").unlink()
    assert merge(out, state_dir, shards) == 9
    assert "tails.json: missing: the tails file `run --shard-count` wrote" in (
        capsys.readouterr().err
    )
    assert not out.exists()


def test_merge_refuses_a_whole_run(
    genuine_run: GenuineRun, state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert merge(tmp_path / "m.json", state_dir, [genuine_run.envelope]) == 1
    assert "the envelope of a whole run, not of a shard" in capsys.readouterr().err


def test_a_shard_whose_report_was_changed_fails_as_an_envelope_would(
    sharded: ShardedRun, genuine_run: GenuineRun, tmp_path: Path
) -> None:
    def flip_signature_byte(document: dict[str, Any]) -> None:
        report = bytearray(base64.b64decode(document["shards"][2]["evidence"]["report"]))
        report[0x2A0] ^= 1  # inside the signature
        document["shards"][2]["evidence"]["report"] = base64.b64encode(report).decode()

    assert verify(tampered(sharded, tmp_path, flip_signature_byte), genuine_run.expected) == 3


def test_docs_name_every_check_of_a_merged_envelope(
    sharded: ShardedRun, genuine_run: GenuineRun, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = (Path(__file__).parents[2] / "docs" / "verification.md").read_text()
    capsys.readouterr()
    assert verify(sharded.merged, genuine_run.expected, "--json") == 0
    names = {
        check["name"].split(".", 1)[1] if check["name"].startswith("shards[") else check["name"]
        for check in json.loads(capsys.readouterr().out)["checks"]
    }
    assert {"merged.shards", "merged.result", "binding.report-data"} <= names
    assert sorted(name for name in names if f"`{name}`" not in docs) == []


# -- published and fetched like any other envelope -------------------------------------------


def test_shards_and_their_merge_are_published_fetched_and_verified(
    sharded: ShardedRun,
    genuine_run: GenuineRun,
    other_shards: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage = SqliteStorage(tmp_path / "publication.sqlite3")
    storage.initialize()
    signer = CheckpointSigner("publish.test", Ed25519PrivateKey.generate())
    operator, reader = tmp_path / "operator.token", tmp_path / "tenant.token"
    store = tmp_path / "acme-store"
    with running_service(storage, signer) as service:
        operator.write_text(service.token("acme") + "\n")
        reader.write_text(service.token("acme", "tenant") + "\n")

        def publish(envelope: Path) -> int:
            capsys.readouterr()
            return runner_main(
                [
                    "publish",
                    str(envelope),
                    "--target",
                    service.url,
                    "--tenant",
                    "acme",
                    "--token-file",
                    str(operator),
                    "--spool-dir",
                    str(tmp_path / "spool"),
                ]
            )

        # the pods publish their shards, the operator the merged envelope (run ID from it)
        for envelope in [*sharded.shards, sharded.merged]:
            assert publish(envelope) == 0, capsys.readouterr().err
        # a second envelope for shard 1 of the run (a genuine one, of another split) is refused:
        # it contradicts the run's shard set before it could replace shard 1
        other = tmp_path / "other-split.json"
        other.write_text(json.dumps(other_shards["other-split"]))
        assert publish(other) == 6
        error = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("error: "))
        assert (
            "envelope upload answered HTTP 409: run 'run-e2e-1' has a merged envelope of 3 "
            f"shards ({sha256_digest(sharded.merged.read_bytes())}) logged; this envelope is "
            "shard 1 of 2; it was not logged"
        ) in error
        assert storage.run_shards("acme", RUN_ID) == [0, 1, 2]

        fetch = [
            "tenant",
            "fetch",
            "--server",
            service.url,
            "--token-file",
            str(reader),
            "--tenant",
            "acme",
            "--out",
            str(store),
            "--log-key",
            signer.verifier_key.encode(),
        ]
        assert runner_main(fetch) == 0, capsys.readouterr().err

    index = json.loads((store / "index.json").read_text())
    digests = [sha256_digest(path.read_bytes()) for path in [*sharded.shards, sharded.merged]]
    assert [(entry["digest"], entry["shard"]) for _, entry in sorted(index.items())] == [
        (digests[0], 0),
        (digests[1], 1),
        (digests[2], 2),
        (digests[3], None),
    ]
    fetched = {digest: store / "envelopes" / f"sha256-{digest[7:]}.json" for digest in digests}
    # the merged envelope verifies as the run, every shard envelope alone does not
    assert verify(fetched[digests[3]], genuine_run.expected) == 0
    assert fetched[digests[3]].read_bytes() == sharded.merged.read_bytes()
    for digest in digests[:3]:
        assert verify(fetched[digest], genuine_run.expected) == 8
