"""The tenant's default path pins every input the verdict depends on.

The documented ``expected --corpus DIR`` pins the corpus checksum and the evaluation digest
(plan, marks, run records); a hardware file pins the launch MEASUREMENT or is not written;
``tenant reproduce`` hashes every leaf itself. Each test is an operator's attack that the
default path must refuse.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from attestation.cli import main as verify_main
from runner.cli import main as runner_main
from runner.pipeline.replay import corpus_digests
from tests.e2e.conftest import EXAMPLE_CORPUS, GenuineRun

RUN_ID = "run-e2e-1"


def _copy_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    return corpus


def _rewrite_runs(corpus: Path, change: Any) -> None:
    """Apply ``change`` to every run record of runs.jsonl (compact, sorted keys: the format)."""
    path = corpus / "runs.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for index, record in enumerate(records):
        change(index, record)
    path.write_text(
        "".join(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n" for r in records)
    )


def _flip_first_prediction(index: int, record: dict[str, Any]) -> None:
    if index == 0:
        case = record["cases"][0]
        case["prediction"] = "clear" if case["prediction"] == "flag" else "flag"


def _replay(corpus: Path, state_dir: Path, out: Path, *extra: str) -> Path:
    envelope = out / "envelope.json"
    argv = [
        *("run", "--corpus", str(corpus), "--run-id", RUN_ID, "--tenant", "acme"),
        *("--evidence", "simulated", "--state-dir", str(state_dir), "--out", str(envelope)),
        *extra,
    ]
    assert runner_main(argv) == 0
    return envelope


def _documented_expected(tmp_path: Path, state_dir: Path, corpus: Path = EXAMPLE_CORPUS) -> Path:
    """What the tenant writes following the docs: ``expected --corpus`` of its approved corpus
    (simulated evidence here, so its simulated root instead of a MEASUREMENT)."""
    out = tmp_path / "expected.json"
    argv = [
        *("expected", "--run-id", RUN_ID, "--corpus", str(corpus), "--tenant", "acme"),
        *("--trust-local-simulated-root", "--state-dir", str(state_dir), "--out", str(out)),
    ]
    assert runner_main(argv) == 0
    return out


def _verify(capsys: pytest.CaptureFixture[str], envelope: Path, expected: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = verify_main(["--envelope", str(envelope), "--expected", str(expected)])
    return code, capsys.readouterr().out


# -- expected pins the evaluation ----------------------------------------------------------------


def test_expected_corpus_pins_the_checksum_and_the_evaluation_digest(
    tmp_path: Path, state_dir: Path, genuine_run: GenuineRun
) -> None:
    written = json.loads(_documented_expected(tmp_path, state_dir).read_text())
    pins = corpus_digests(EXAMPLE_CORPUS)
    binding = genuine_run.envelope_json["binding"]
    assert isinstance(binding, dict)
    assert written["corpusChecksum"] == pins.corpus_checksum == binding["corpusChecksum"]
    assert written["evaluationDigest"] == pins.evaluation_digest == binding["evaluationDigest"]
    assert written["acceptAnyEvaluation"] is False
    assert written["acceptAnyMeasurement"] is False


def test_expected_from_a_corpus_export_pins_the_same(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "corpus.tar.gz"
    assert runner_main(["corpus", "export", str(EXAMPLE_CORPUS), "--out", str(archive)]) == 0
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    from_dir = json.loads(_documented_expected(tmp_path / "a", state_dir).read_text())
    from_archive = json.loads(_documented_expected(tmp_path / "b", state_dir, archive).read_text())
    assert from_archive == from_dir

    # An archive whose files are not its manifest's is refused, and nothing is written.
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(archive.read_bytes()[:-200])
    out = tmp_path / "x.json"
    capsys.readouterr()
    code = runner_main(
        [
            *("expected", "--run-id", RUN_ID, "--corpus", str(broken)),
            *("--trust-local-simulated-root", "--state-dir", str(state_dir), "--out", str(out)),
        ]
    )
    assert code == 1
    assert capsys.readouterr().err.startswith(f"error: --corpus {broken}: ")
    assert not out.exists()


def test_edited_predictions_fail_against_the_documented_file(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator flips one prediction in runs.jsonl and replays: a genuine envelope over
    another evaluation, refused (8) by the file `expected --corpus DIR` writes."""
    corpus = _copy_corpus(tmp_path)
    _rewrite_runs(corpus, _flip_first_prediction)
    envelope = _replay(corpus, state_dir, tmp_path)
    code, out = _verify(capsys, envelope, _documented_expected(tmp_path, state_dir))
    assert code == 8
    failed = [line.strip() for line in out.splitlines() if line.strip().startswith("FAILED")]
    assert len(failed) == 1
    assert failed[0].startswith("FAILED expectation.evaluation-digest [expectation]: ")
    assert f"the tenant expected {corpus_digests(EXAMPLE_CORPUS).evaluation_digest}" in failed[0]


def test_lowered_marks_fail_against_the_documented_file(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator lowers a pass mark in marks.json and updates every record's marks_ref (a
    consistent corpus a replay accepts): refused (8)."""
    from attestation.contracts import sha256_digest
    from attestation.encoding.canonical import canonicalize

    corpus = _copy_corpus(tmp_path)
    marks = json.loads((corpus / "marks.json").read_text())
    recall = next(mark for mark in marks["marks"] if mark["id"] == "M3")
    recall["threshold"] = 50
    (corpus / "marks.json").write_text(json.dumps(marks, separators=(",", ":"), sort_keys=True))
    marks_ref = sha256_digest(canonicalize(marks))

    def new_marks_ref(_index: int, record: dict[str, Any]) -> None:
        record["marks_ref"] = marks_ref

    _rewrite_runs(corpus, new_marks_ref)
    envelope = _replay(corpus, state_dir, tmp_path)
    code, out = _verify(capsys, envelope, _documented_expected(tmp_path, state_dir))
    assert code == 8
    failed = [line.strip() for line in out.splitlines() if line.strip().startswith("FAILED")]
    assert [line.split(" [")[0] for line in failed] == ["FAILED expectation.evaluation-digest"]


def test_the_genuine_run_verifies_against_the_documented_file(
    tmp_path: Path, state_dir: Path, genuine_run: GenuineRun, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _verify(capsys, genuine_run.envelope, _documented_expected(tmp_path, state_dir))
    assert code == 0


# -- expected refuses what would accept any run ----------------------------------------------------


def test_a_hardware_file_without_measurement_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "expected.json"
    capsys.readouterr()
    code = runner_main(
        ["expected", "--run-id", RUN_ID, "--corpus", str(EXAMPLE_CORPUS), "--out", str(out)]
    )
    assert code == 9
    err = capsys.readouterr().err
    assert err.startswith(
        "error: a hardware expected-values file must pin the launch MEASUREMENT: without it "
        "any guest (Kata's stock image with the genuine HOST_DATA too) passes; compute it with "
        "`attested-replay measure` and give it with --measurement"
    )
    assert "--accept-any-measurement" in err
    assert not out.exists()


def test_a_checksum_alone_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "expected.json"
    checksum = corpus_digests(EXAMPLE_CORPUS).corpus_checksum
    capsys.readouterr()
    code = runner_main(
        [
            *("expected", "--run-id", RUN_ID, "--corpus-checksum", checksum),
            *("--measurement", "ab" * 48, "--out", str(out)),
        ]
    )
    assert code == 9
    assert capsys.readouterr().err == (
        "error: --corpus-checksum pins the cases only: give --evaluation-digest too, or "
        "--corpus DIR|ARCHIVE (pins both, with the plan, marks and run records), or "
        "--accept-any-evaluation to accept any predictions and marks\n"
    )
    assert not out.exists()


def test_several_measurements_and_the_opt_outs_are_written_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "expected.json"
    checksum = corpus_digests(EXAMPLE_CORPUS).corpus_checksum
    argv = [
        *("expected", "--run-id", RUN_ID, "--corpus-checksum", checksum, "--out", str(out)),
        "--accept-any-evaluation",
    ]
    capsys.readouterr()
    assert runner_main([*argv, "--measurement", "AB" * 48, "--measurement", "cd" * 48]) == 0
    written = json.loads(out.read_text())
    assert written["measurements"] == ["ab" * 48, "cd" * 48]
    assert written["acceptAnyEvaluation"] is True
    assert "evaluationDigest" not in written
    printed = capsys.readouterr().out
    assert "not pinned: the evaluation digest (--accept-any-evaluation)" in printed

    assert runner_main([*argv, "--accept-any-measurement"]) == 0
    written = json.loads(out.read_text())
    assert "measurements" not in written
    assert written["acceptAnyMeasurement"] is True
    assert "not pinned: MEASUREMENT (--accept-any-measurement)" in capsys.readouterr().out


def test_evaluation_digest_must_be_the_corpus_own(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "expected.json"
    capsys.readouterr()
    code = runner_main(
        [
            *("expected", "--run-id", RUN_ID, "--corpus", str(EXAMPLE_CORPUS)),
            *("--evaluation-digest", "sha256:" + "0" * 64, "--trust-local-simulated-root"),
            *("--state-dir", str(state_dir), "--out", str(out)),
        ]
    )
    assert code == 1
    assert "is not the evaluation digest of --corpus" in capsys.readouterr().err
    assert not out.exists()


# -- tenant reproduce reads no index from the operator's directory ---------------------------------


@pytest.mark.parametrize("shard_index", [1, 2])
def test_a_stale_runs_index_beside_altered_runs_does_not_reproduce(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str], shard_index: int
) -> None:
    """Shard ``shard_index`` of 3's genuine envelope; the operator's directory holds the genuine
    corpus's runs.index.json beside a runs.jsonl altered outside that shard's blocks. Hashing
    only its own blocks and the index's other leaves would give the genuine evaluation digest;
    reproduce hashes every leaf and refuses (8)."""
    envelope = _replay(
        EXAMPLE_CORPUS, state_dir, tmp_path, "--shard-count", "3", "--shard-index", str(shard_index)
    )
    corpus = _copy_corpus(tmp_path)
    assert runner_main(["corpus", "index", str(corpus)]) == 0  # the index of the genuine runs
    _rewrite_runs(corpus, _flip_first_prediction)  # rank 0: shard 0's block, not this one's
    capsys.readouterr()
    code = runner_main(
        ["tenant", "reproduce", "--envelope", str(envelope), "--corpus", str(corpus), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert (code, report["failureClass"]) == (8, "expectation")
    assert report["reason"].startswith(
        "the evaluation (plan, marks or run records) differs from the one the envelope binds"
    )
    # The same envelope against the genuine directory (with its index) reproduces.
    genuine = tmp_path / "genuine"
    shutil.copytree(EXAMPLE_CORPUS, genuine)
    assert runner_main(["corpus", "index", str(genuine)]) == 0
    capsys.readouterr()
    code = runner_main(
        ["tenant", "reproduce", "--envelope", str(envelope), "--corpus", str(genuine), "--json"]
    )
    assert (code, json.loads(capsys.readouterr().out)["failureClass"]) == (0, None)


def test_a_merged_run_over_edited_predictions_fails_against_the_documented_file(
    tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator shards a replay of a corpus whose predictions it edited and merges the
    three genuine shard envelopes: the merged envelope is refused (8) by the file
    ``expected --corpus DIR`` writes for the approved corpus, and so is each shard (8)."""
    corpus = _copy_corpus(tmp_path)
    _rewrite_runs(corpus, _flip_first_prediction)
    shards = []
    for index in range(3):
        shard_dir = tmp_path / f"shard-{index}"
        shard_dir.mkdir()
        shards.append(
            _replay(corpus, state_dir, shard_dir, "--shard-count", "3", "--shard-index", str(index))
        )
    merged = tmp_path / "merged.json"
    argv = ["merge", *map(str, shards), "--out", str(merged), "--trust-simulated-root"]
    assert runner_main([*argv, "--state-dir", str(state_dir)]) == 0
    expected = _documented_expected(tmp_path, state_dir)
    code, out = _verify(capsys, merged, expected)
    assert code == 8
    failed = [line.strip() for line in out.splitlines() if line.strip().startswith("FAILED")]
    assert [line.split(" [")[0] for line in failed] == ["FAILED expectation.evaluation-digest"]
    for shard in shards:
        code, out = _verify(capsys, shard, expected)
        assert code == 8
        assert "FAILED expectation.evaluation-digest" in out


# -- the stock-guest attack: genuine HOST_DATA, the operator's own MEASUREMENT
# ----------------------


@pytest.fixture(scope="module")
def hardware() -> Any:
    """A PKI the verifier is told is AMD's (a trust store pinning it in AMD's place): its
    reports are "genuine hardware", labelled sev-snp."""
    from attestation.simulated_amd import SimulatedAmd

    return SimulatedAmd.generate()


def _on_hardware(
    hardware: Any,
    genuine_run: GenuineRun,
    *,
    measurement: bytes,
    host_data: bytes,
) -> bytes:
    """The genuine run's envelope (its binding and result) as a report of that hardware with
    this MEASUREMENT and HOST_DATA would carry it: everything else about it is genuine."""
    import base64

    from attestation.abi.product import ProductLine
    from attestation.abi.report import parse_report
    from attestation.envelope.binding import report_data_for
    from attestation.envelope.model import Binding

    document = json.loads(genuine_run.envelope.read_bytes())
    binding = Binding.model_validate(document["binding"])
    encoding = document["evidence"].get("reportDataEncoding", "sha512")
    report = hardware.sign_report(
        report_data=report_data_for(binding, encoding),
        product_line=ProductLine.GENOA,
        measurement=measurement,
        host_data=host_data,
    )
    parsed = parse_report(report)
    document.update(
        reportData=parsed.report_data.hex(),
        measurement=measurement.hex(),
        hostData=host_data.hex(),
        platform="sev-snp",
    )
    document["evidence"].update(
        report=base64.b64encode(report).decode(),
        provider="sev-guest",
        certChain=hardware.endorsement_pem(report),
    )
    return json.dumps(document).encode()


def test_the_stock_guest_attack_fails_on_the_default_path(
    hardware: Any,
    genuine_run: GenuineRun,
) -> None:
    """The operator boots Kata's stock confidential guest (its own MEASUREMENT) with the
    genuine HOST_DATA and no init-data, and obtains a genuine report over a binding it chose.
    A file pinning hostData alone is refused (6); so is the file ``expected`` writes now,
    which pins the tenant's MEASUREMENT; the tenant's own launch with the same binding
    verifies (0): only MEASUREMENT tells the two apart."""
    import datetime as dt

    from attestation.abi.product import ProductLine
    from attestation.endorsement.trust import AmdRole, TrustStore
    from attestation.envelope.expected import load_expected
    from attestation.envelope.verification import verify_envelope

    certificates = dict(TrustStore.amd().amd_certificates())
    certificates[ProductLine.GENOA, AmdRole.ARK] = hardware.ark_certificate
    certificates[ProductLine.GENOA, AmdRole.ASK] = hardware.ask_certificate
    certificates[ProductLine.GENOA, AmdRole.ASVK] = hardware.asvk_certificate
    as_amd = TrustStore(certificates)
    genuine_host_data = bytes.fromhex("5a" * 32)
    tenants_guest, stock_guest = bytes.fromhex("11" * 48), bytes.fromhex("22" * 48)
    pins = json.loads(genuine_run.expected.read_text())
    del pins["simulatedRoots"]  # hardware only
    pins["hostData"] = [genuine_host_data.hex()]

    def verdict(envelope: bytes, document: dict[str, Any]) -> Any:
        expected = load_expected(json.dumps(document).encode())
        return verify_envelope(envelope, expected, now=dt.datetime.now(dt.UTC), trust=as_amd)

    attack = _on_hardware(
        hardware, genuine_run, measurement=stock_guest, host_data=genuine_host_data
    )
    host_data_only = verdict(attack, pins)
    assert host_data_only.platform == "sev-snp"
    assert host_data_only.exit_code == 6
    assert [check.name for check in host_data_only.failed_checks] == ["workload.measurement"]
    assert "is not pinned (measurements absent) on AMD hardware" in (
        host_data_only.failed_checks[0].detail
    )

    pinned = {**pins, "measurements": [tenants_guest.hex()]}
    refused = verdict(attack, pinned)
    assert refused.exit_code == 6
    assert refused.failed_checks[0].detail == (
        f"MEASUREMENT {stock_guest.hex()} not in measurements"
    )

    honest = _on_hardware(
        hardware, genuine_run, measurement=tenants_guest, host_data=genuine_host_data
    )
    assert verdict(honest, pinned).exit_code == 0
