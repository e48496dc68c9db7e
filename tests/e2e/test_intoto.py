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
from runner.cli import main as runner_main
from tenant.intoto import PREDICATE_TYPE, STATEMENT_TYPE, statement_bytes, statement_for
from tests.e2e.conftest import GenuineRun

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
