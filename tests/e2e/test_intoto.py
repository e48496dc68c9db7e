"""``attested-replay export in-toto``: an in-toto Statement v1 for an envelope, validated against
the Statement v1 schema (tests/assets/in-toto) and by the in-toto project's own validator."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement

from attestation.encoding.canonical import canonicalize
from attestation.envelope.merged import merge_envelopes, merged_envelope_bytes
from attestation.envelope.model import Envelope
from runner.cli import main as runner_main
from tenant.intoto import (
    MERGED_PREDICATE_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    statement_bytes,
    statement_for,
)
from tests.e2e.conftest import EXAMPLE_CORPUS, GenuineRun

SCHEMA = json.loads(
    (
        Path(__file__).resolve().parents[1] / "assets" / "in-toto" / "statement-v1.schema.json"
    ).read_text(encoding="utf-8")
)


def _validate(document: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    parsed = json_format.Parse(json.dumps(document), statement_pb2.Statement())
    Statement.copy_from_pb(parsed).validate()


def test_cli_output_is_a_valid_in_toto_statement_v1(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.intoto.json"
    assert runner_main(["export", "in-toto", str(genuine_run.envelope), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    data = out.read_bytes()
    document = json.loads(data)

    _validate(document)
    assert data == canonicalize(document) + b"\n"
    assert runner_main(["export", "in-toto", str(genuine_run.envelope)]) == 0
    assert capsys.readouterr().out.encode() == data


def test_subjects_are_the_bound_result_and_corpus_digests(genuine_run: GenuineRun) -> None:
    envelope_bytes = genuine_run.envelope.read_bytes()
    binding = genuine_run.envelope_json["binding"]
    assert isinstance(binding, dict)
    document = statement_for(envelope_bytes)

    assert document["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert document["predicateType"] == PREDICATE_TYPE
    assert document["subject"] == [
        {
            "name": "result",
            "digest": {"sha256": binding["resultDigest"].removeprefix("sha256:")},
            "mediaType": "application/json",
        },
        {"name": "corpus", "digest": {"sha256": binding["corpusChecksum"].removeprefix("sha256:")}},
    ]
    # The result subject is the digest of the canonical result the envelope carries.
    result = genuine_run.envelope_json["result"]
    assert (
        hashlib.sha256(canonicalize(result)).hexdigest()
        == document["subject"][0]["digest"]["sha256"]
    )
    predicate = document["predicate"]
    assert predicate["envelope"]["digest"] == {"sha256": hashlib.sha256(envelope_bytes).hexdigest()}
    assert predicate["binding"] == binding
    assert (predicate["runId"], predicate["tenant"], predicate["platform"]) == (
        "run-e2e-1",
        "acme",
        "simulated",
    )
    assert predicate["measurement"] == genuine_run.envelope_json["measurement"]
    assert predicate["reportData"] == genuine_run.envelope_json["reportData"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda d: d.update(_type="https://in-toto.io/Statement/v0.9"), "_type"),
        (lambda d: d.update(subject=[]), "subject"),
        (lambda d: d["subject"][0].update(digest={}), "subject"),
        (lambda d: d["subject"][1]["digest"].update(sha256="ABC"), "subject"),
        (lambda d: d.update(predicateType="not a uri"), "predicateType"),
    ],
)
def test_the_schema_refuses_what_the_specification_refuses(
    genuine_run: GenuineRun, change: Any, path: str
) -> None:
    document = statement_for(genuine_run.envelope.read_bytes())
    change(document)
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert list(refused.value.absolute_path)[:1] == [path]


def test_a_malformed_envelope_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = tmp_path / "envelope.json"
    envelope.write_text('{"kind": "AttestationEnvelope"}')
    assert runner_main(["export", "in-toto", str(envelope)]) == 1
    assert f"ENVELOPE {envelope}: not a valid envelope" in capsys.readouterr().err
    assert runner_main(["export", "in-toto", str(tmp_path / "missing.json")]) == 9


def test_statement_bytes_end_with_one_newline(genuine_run: GenuineRun) -> None:
    data = statement_bytes(genuine_run.envelope.read_bytes())
    assert data.endswith(b"}\n")
    assert data.count(b"\n") == 1


@pytest.fixture(scope="module")
def shard_files(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> list[Path]:
    """Shards 0 and 1 of 2 of one simulated run of the example corpus."""
    out = tmp_path_factory.mktemp("shards")
    files = []
    for index in range(2):
        envelope = out / f"shard-{index}.json"
        argv = ["run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "run-e2e-s", "--tenant"]
        argv += ["acme", "--evidence", "simulated", "--state-dir", str(state_dir)]
        argv += ["--shard-index", str(index), "--shard-count", "2", "--out", str(envelope)]
        assert runner_main(argv) == 0
        files.append(envelope)
    return files


def test_a_merged_envelope_has_the_merged_result_and_the_corpus_as_subjects(
    shard_files: list[Path], genuine_run: GenuineRun, tmp_path: Path
) -> None:
    shards = [Envelope.model_validate_json(path.read_bytes()) for path in shard_files]
    data = merged_envelope_bytes(merge_envelopes(shards))
    merged = json.loads(data)
    envelope = tmp_path / "merged.json"
    envelope.write_bytes(data)
    out = tmp_path / "merged.intoto.json"
    assert runner_main(["export", "in-toto", str(envelope), "--out", str(out)]) == 0
    document = json.loads(out.read_bytes())

    _validate(document)
    assert document["predicateType"] == MERGED_PREDICATE_TYPE
    # The merged report is the unsharded run's: the same result subject, the same corpus.
    assert document["subject"] == statement_for(genuine_run.envelope.read_bytes())["subject"]
    assert document["subject"][0]["digest"]["sha256"] == (
        hashlib.sha256(canonicalize(merged["result"])).hexdigest()
    )
    predicate = document["predicate"]
    assert predicate["envelope"] == {
        "digest": {"sha256": hashlib.sha256(data).hexdigest()},
        "mediaType": "application/vnd.attested-replay.merged-envelope.v1+json",
    }
    assert (predicate["runId"], predicate["tenant"], predicate["shardCount"]) == (
        "run-e2e-s",
        "acme",
        2,
    )
    assert (predicate["platform"], predicate["measurement"], predicate["hostData"]) == (
        "simulated",
        shards[0].measurement,
        shards[0].host_data,
    )
    assert predicate["header"] == {
        key: value for key, value in merged.items() if key not in ("result", "shards")
    }
    assert predicate["shards"] == [
        {
            "index": index,
            "reportData": shard.report_data,
            "reportDataEncoding": shard.evidence.report_data_encoding,
            "resultDigest": shard.binding.result_digest,
        }
        for index, shard in enumerate(shards)
    ]


def test_a_shard_envelope_is_refused_naming_the_merged_envelope(
    shard_files: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert runner_main(["export", "in-toto", str(shard_files[1])]) == 1
    assert capsys.readouterr().err.endswith(
        f"error: ENVELOPE {shard_files[1]}: no statement for a shard envelope: it is shard 1 of "
        "2 of run 'run-e2e-s', which binds only that shard's partial result: export the run's "
        "merged envelope (attested-replay merge or collect) instead\n"
    )


def test_a_merged_envelope_whose_shards_are_not_one_run_is_refused(
    shard_files: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = [Envelope.model_validate_json(path.read_bytes()) for path in shard_files]
    merged = merge_envelopes(shards).model_copy(update={"shards": (shards[0], shards[0])})
    envelope = tmp_path / "merged.json"
    envelope.write_bytes(merged.canonical_bytes())
    assert runner_main(["export", "in-toto", str(envelope)]) == 1
    assert capsys.readouterr().err.endswith(
        f"error: ENVELOPE {envelope}: not one sharded run: shard 0 of 2 appears more than once: "
        "no verifier accepts it\n"
    )
