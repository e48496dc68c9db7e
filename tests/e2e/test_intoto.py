"""``attested-replay export in-toto``: a DSSE-signed in-toto Statement v1 for an envelope the
tenant verified; the signature is checked with securesystemslib's DSSE implementation, the
statement against the Statement v1 schema (tests/assets/in-toto) and by the in-toto project's
own validator."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope as DsseEnvelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # no __all__

from attestation.encoding.canonical import canonicalize
from attestation.envelope.merged import MergedEnvelope, parse_any_envelope
from attestation.envelope.model import Envelope
from attestation.tenant.intoto import MERGED_PREDICATE_TYPE, PREDICATE_TYPE, STATEMENT_TYPE
from runner.cli import main as runner_main
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


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ed25519.Ed25519PrivateKey]:
    key = ed25519.Ed25519PrivateKey.generate()
    path = tmp_path_factory.mktemp("key") / "tenant.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path, key


@pytest.fixture(scope="module")
def example_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    archive = tmp_path_factory.mktemp("export") / "corpus.tar.gz"
    assert runner_main(["corpus", "export", str(EXAMPLE_CORPUS), "--out", str(archive)]) == 0
    return archive


def _export_argv(
    run: GenuineRun, key: Path, corpus: Path, *, envelope: Path | None = None
) -> list[str]:
    return [
        "export",
        "in-toto",
        str(envelope or run.envelope),
        "--expected",
        str(run.expected),
        "--result",
        str(run.result),
        "--corpus",
        str(corpus),
        "--signing-key",
        str(key),
    ]


def _keyid(public: PublicKeyTypes) -> str:
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def _verified_statement(data: bytes, public: PublicKeyTypes) -> dict[str, Any]:
    """The statement in a DSSE envelope, after securesystemslib verified its signature."""
    envelope = DsseEnvelope.from_dict(json.loads(data))
    key = SSlibKey.from_crypto(public, keyid=_keyid(public))
    assert list(envelope.verify([key], 1)) == [key.keyid]
    assert envelope.payload_type == "application/vnd.in-toto+json"
    statement: dict[str, Any] = json.loads(envelope.payload)
    return statement


def test_cli_output_is_a_signed_in_toto_statement_a_library_verifies(
    genuine_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key_path, key = signing_key
    out = tmp_path / "run.intoto.jsonl"
    argv = _export_argv(genuine_run, key_path, example_export)
    assert runner_main([*argv, "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} (signed by key {_keyid(key.public_key())})\n"
    data = out.read_bytes()
    assert data == canonicalize(json.loads(data)) + b"\n"
    document = _verified_statement(data, key.public_key())
    _validate(document)

    # Subjects: the files a consumer holds, by the SHA-256 of their exact bytes.
    assert document["subject"] == [
        {
            "name": genuine_run.result.name,
            "digest": {"sha256": hashlib.sha256(genuine_run.result.read_bytes()).hexdigest()},
            "mediaType": "application/json",
        },
        {
            "name": "corpus.tar.gz",
            "digest": {"sha256": hashlib.sha256(example_export.read_bytes()).hexdigest()},
            "mediaType": "application/vnd.attested-replay.corpus-export.v1.tar+gzip",
        },
    ]
    verification = document["predicate"]["verification"]
    assert verification["verdict"] == "verified"
    assert verification["expectedValues"] == {
        "digest": {"sha256": hashlib.sha256(genuine_run.expected.read_bytes()).hexdigest()}
    }
    assert document["predicate"]["binding"] == genuine_run.envelope_json["binding"]

    # Another key's signature does not verify; a changed payload does not either.
    other = ed25519.Ed25519PrivateKey.generate().public_key()
    with pytest.raises(VerificationError):
        DsseEnvelope.from_dict(json.loads(data)).verify(
            [SSlibKey.from_crypto(other, keyid=_keyid(key.public_key()))], 1
        )
    forged = json.loads(data)
    forged["payload"] = base64.b64encode(json.dumps({**document, "subject": []}).encode()).decode()
    with pytest.raises(VerificationError):
        _verified_statement(json.dumps(forged).encode(), key.public_key())


def test_an_ecdsa_key_and_a_plain_corpus_archive(
    genuine_run: GenuineRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    key_path = tmp_path / "p256.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w:gz") as tar:
        for name in ("cases.jsonl", "marks.json", "plan.json", "runs.jsonl"):
            tar.add(EXAMPLE_CORPUS / name, arcname=name)
    assert runner_main(_export_argv(genuine_run, key_path, plain)) == 0
    document = _verified_statement(capsys.readouterr().out.encode(), key.public_key())
    assert document["subject"][1] == {
        "name": "plain.tar.gz",
        "digest": {"sha256": hashlib.sha256(plain.read_bytes()).hexdigest()},
        "mediaType": "application/gzip",
    }


def _tampered(run: GenuineRun, tmp_path: Path, change: Any) -> Path:
    document = json.loads(run.envelope.read_bytes())
    change(document)
    path = tmp_path / "tampered.json"
    path.write_bytes(json.dumps(document).encode())
    return path


def _swap_run(document: dict[str, Any]) -> None:
    document["runId"] = document["binding"]["runId"] = "run-e2e-2"


def _garble_report(document: dict[str, Any]) -> None:
    report = base64.b64decode(document["evidence"]["report"])
    document["evidence"]["report"] = base64.b64encode(
        report[:-1] + bytes([report[-1] ^ 1])
    ).decode()


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        (_swap_run, "binding, exit 7"),
        (_garble_report, "malformed, exit 1"),
    ],
    ids=["another-runs-binding", "garbled-report"],
)
def test_an_envelope_that_does_not_verify_is_refused(  # noqa: PLR0917 - fixtures
    genuine_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Any,
    failure: str,
) -> None:
    envelope = _tampered(genuine_run, tmp_path, change)
    out = tmp_path / "out.jsonl"
    argv = _export_argv(genuine_run, signing_key[0], example_export, envelope=envelope)
    assert runner_main([*argv, "--out", str(out)]) == 4
    err = capsys.readouterr().err
    assert f"error: ENVELOPE {envelope} does not verify against --expected " in err
    assert f"; nothing written ({failure}): " in err, err[:600]
    assert not out.exists()


def test_files_that_are_not_what_the_envelope_binds_are_refused(
    genuine_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _export_argv(genuine_run, signing_key[0], example_export)
    result = tmp_path / "result.json"
    result.write_bytes(genuine_run.result.read_bytes() + b" ")
    assert runner_main([*argv, "--result", str(result)]) == 1
    assert f"--result {result}: result.json is not the result the envelope binds" in (
        capsys.readouterr().err
    )
    other = tmp_path / "other"
    shutil.copytree(EXAMPLE_CORPUS, other)
    lines = (other / "cases.jsonl").read_bytes().splitlines(keepends=True)
    (other / "cases.jsonl").write_bytes(b"".join(lines[:-1]))
    archive = tmp_path / "other.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in ("cases.jsonl", "marks.json", "plan.json", "runs.jsonl"):
            tar.add(other / name, arcname=name)
    assert runner_main([*argv, "--corpus", str(archive)]) == 1
    assert f"--corpus {archive}: holds the corpus sha256:" in capsys.readouterr().err
    not_a_key = tmp_path / "key.pem"
    not_a_key.write_text("not a key")
    assert runner_main([*argv, "--signing-key", str(not_a_key)]) == 9
    assert "not an unencrypted PEM private key" in capsys.readouterr().err


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
    statement: dict[str, Any], change: Any, path: str
) -> None:
    document = json.loads(json.dumps(statement))
    change(document)
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert list(refused.value.absolute_path)[:1] == [path]


def test_a_malformed_envelope_is_refused(
    genuine_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    envelope = tmp_path / "envelope.json"
    envelope.write_text('{"kind": "AttestationEnvelope"}')
    argv = _export_argv(genuine_run, signing_key[0], example_export, envelope=envelope)
    assert runner_main(argv) == 1
    assert f"ENVELOPE {envelope}: not a valid envelope" in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    argv = _export_argv(genuine_run, signing_key[0], example_export, envelope=missing)
    assert runner_main(argv) == 9


@pytest.fixture(scope="module")
def statement(
    genuine_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("statement") / "run.intoto.jsonl"
    argv = _export_argv(genuine_run, signing_key[0], example_export)
    assert runner_main([*argv, "--out", str(out)]) == 0
    return _verified_statement(out.read_bytes(), signing_key[1].public_key())


def test_the_predicate_carries_the_envelope_and_its_binding(
    genuine_run: GenuineRun, statement: dict[str, Any]
) -> None:
    envelope_bytes = genuine_run.envelope.read_bytes()
    assert statement["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE
    predicate = statement["predicate"]
    assert predicate["envelope"]["digest"] == {"sha256": hashlib.sha256(envelope_bytes).hexdigest()}
    assert predicate["binding"] == genuine_run.envelope_json["binding"]
    assert (predicate["runId"], predicate["tenant"], predicate["platform"]) == (
        "run-e2e-1",
        "acme",
        "simulated",
    )
    assert predicate["measurement"] == genuine_run.envelope_json["measurement"]
    assert predicate["reportData"] == genuine_run.envelope_json["reportData"]


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


@pytest.fixture(scope="module")
def merged_run(
    shard_files: list[Path], genuine_run: GenuineRun, tmp_path_factory: pytest.TempPathFactory
) -> GenuineRun:
    """The shards merged by `attested-replay merge`, and the tenant's expected values."""
    out = tmp_path_factory.mktemp("merged")
    envelope = out / "merged.json"
    argv = ["merge", *map(str, shard_files), "--out", str(envelope), "--trust-simulated-root"]
    argv += ["--state-dir", str(genuine_run.state_dir)]
    assert runner_main(argv) == 0
    expected = out / "expected.json"
    argv = ["expected", "--run-id", "run-e2e-s", "--corpus", str(EXAMPLE_CORPUS), "--tenant"]
    argv += ["acme", "--this-workload", "--simulated-root", genuine_run.root_fingerprint]
    assert runner_main([*argv, "--out", str(expected)]) == 0
    return GenuineRun(
        envelope=envelope,
        result=out / "merged.json.result.json",
        expected=expected,
        envelope_json=json.loads(envelope.read_bytes()),
        state_dir=genuine_run.state_dir,
        root_fingerprint=genuine_run.root_fingerprint,
    )


def test_a_merged_envelope_has_the_merged_result_and_the_corpus_as_subjects(  # noqa: PLR0917 - fixtures
    merged_run: GenuineRun,
    genuine_run: GenuineRun,
    statement: dict[str, Any],
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runner_main(_export_argv(merged_run, signing_key[0], example_export)) == 0
    document = _verified_statement(capsys.readouterr().out.encode(), signing_key[1].public_key())
    _validate(document)
    data = merged_run.envelope.read_bytes()
    merged = merged_run.envelope_json
    shards = [Envelope.model_validate(shard) for shard in merged["shards"]]  # type: ignore[attr-defined]
    assert document["predicateType"] == MERGED_PREDICATE_TYPE
    # The merged report is the unsharded run's: the same result bytes, the same corpus.
    assert merged_run.result.read_bytes() == genuine_run.result.read_bytes()
    assert [s["digest"] for s in document["subject"]] == [s["digest"] for s in statement["subject"]]
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


def test_a_merged_envelope_with_a_forged_header_is_refused(
    merged_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = dict(merged_run.envelope_json)
    document.pop("result", None)
    document["resultDigest"] = "sha256:" + "ab" * 32
    forged = tmp_path / "forged.json"
    forged.write_bytes(canonicalize(document))
    argv = _export_argv(merged_run, signing_key[0], example_export, envelope=forged)
    assert runner_main(argv) == 4
    assert "nothing written (binding, exit 7): " in capsys.readouterr().err


def test_a_shard_envelope_is_refused_naming_the_merged_envelope(
    shard_files: list[Path],
    genuine_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _export_argv(genuine_run, signing_key[0], example_export, envelope=shard_files[1])
    assert runner_main(argv) == 1
    assert capsys.readouterr().err.endswith(
        f"error: ENVELOPE {shard_files[1]}: no statement for a shard envelope: it is shard 1 of "
        "2 of run 'run-e2e-s', which binds only that shard's partial result: export the run's "
        "merged envelope (attested-replay merge or collect) instead\n"
    )


def test_a_merged_envelope_whose_shards_are_not_one_run_is_refused(  # noqa: PLR0917 - fixtures
    shard_files: list[Path],
    merged_run: GenuineRun,
    signing_key: tuple[Path, ed25519.Ed25519PrivateKey],
    example_export: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shards = [Envelope.model_validate_json(path.read_bytes()) for path in shard_files]
    built = parse_any_envelope(merged_run.envelope.read_bytes())
    assert isinstance(built, MergedEnvelope)
    merged = built.model_copy(update={"shards": (shards[0], shards[0])})
    envelope = tmp_path / "merged.json"
    envelope.write_bytes(merged.canonical_bytes())
    argv = _export_argv(merged_run, signing_key[0], example_export, envelope=envelope)
    assert runner_main(argv) == 1
    assert capsys.readouterr().err.endswith(
        f"error: ENVELOPE {envelope}: not one sharded run: shard 0 of 2 appears more than once: "
        "no verifier accepts it\n"
    )
