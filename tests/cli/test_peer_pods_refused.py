"""Peer pods say the truth: no envelope of theirs can be tied to the agent policy yet, so
``submit`` and ``expected`` refuse the overlay, naming why (runner.k8s.job.require_verifiable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.cli import main
from runner.k8s.job import OVERLAYS, PEER_PODS_UNVERIFIABLE

IMAGE = "registry.example/attested-replay@sha256:" + "ab" * 32
CHECKSUM = "sha256:" + "11" * 32
CORPUS = "https://corpora.example/c.tar.gz"
RUN = ["--run-id", "run-7", "--tenant", "acme", "--image", IMAGE, "--overlay", "peer-pods"]
REFUSAL = f"error: --overlay peer-pods: refused: {PEER_PODS_UNVERIFIABLE}\n"


def test_the_reason_names_host_data_and_the_vtpm() -> None:
    assert PEER_PODS_UNVERIFIABLE.startswith(
        "a peer-pod VM has no SNP HOST_DATA: cloud-api-adaptor extends the init-data digest into "
        "vTPM PCR 8 instead"
    )
    assert [name for name, profile in OVERLAYS.items() if profile.unverifiable] == ["peer-pods"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_submit_refuses_peer_pods_before_any_cluster(
    capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    argv = ["submit", *RUN, "--corpus", CORPUS, "--checksum", CHECKSUM]
    assert main([*argv, *(["--dry-run"] if dry_run else [])]) == 9
    captured = capsys.readouterr()
    assert captured.err == REFUSAL
    assert captured.out == ""


def test_expected_refuses_a_peer_pods_host_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "expected.json"
    argv = [
        *("expected", *RUN, "--corpus-source", CORPUS, "--corpus-checksum", CHECKSUM),
        *("--evaluation-digest", CHECKSUM, "--measurement", "ab" * 48, "--out", str(out)),
    ]
    assert main(argv) == 9
    assert capsys.readouterr().err == REFUSAL
    assert not out.exists()


def test_the_snp_overlay_is_not_refused(capsys: pytest.CaptureFixture[str]) -> None:
    run = [*RUN[:-1], "snp"]
    assert main(["submit", *run, "--corpus", CORPUS, "--checksum", CHECKSUM, "--dry-run"]) == 0
    assert "refused" not in capsys.readouterr().err
