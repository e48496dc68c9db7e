"""Init-data: valid for the guest's parsers, one source with the Job, pinned by the tenant.

`submit --dry-run`, `init-data` and `expected` with the same run parameters must give one
HOST_DATA, the one of the annotation the Job carries.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from runner.cli import main
from runner.errors import UsageError
from runner.k8s.job import KATA_INIT_DATA, build_replay
from runner.reference.initdata import InitData, check_pinned_image
from tests.coco.conftest import CHECKSUM, IMAGE, SPECS, policy_of, replay_spec
from tests.coco.guest_configs import (
    ConfigError,
    check_aa_config,
    check_cdh_config,
    check_initdata,
)

UPSTREAM = Path(__file__).parents[1] / "assets" / "coco" / "initdata"
K8S = Path(__file__).parents[2] / "k8s"

#: What upstream's own tests say about these inputs (tests/assets/coco/PROVENANCE.md).
CDH_EXAMPLES = {
    "read_config-case0-valid.toml": True,
    "read_config-case1-invalid.toml": False,
    "read_config-case2-valid.toml": True,
    "read_config-case3-valid.toml": True,
    "read_config-case4-valid.toml": True,
    "example.config.toml": True,
    "hub-tests-cdh.toml": True,
}
AA_EXAMPLES = (
    "config.example.toml",
    "test-config1.toml",
    "test-config2.toml",
    "test-config4.toml",
    "test-config5.toml",
    "test-config6.toml",
)
INITDATA_EXAMPLES = (
    "kata-default-initdata.toml",
    "kata-types-complete-initdata.toml",
    "trustee-init-data-with-policy.toml",
    "trustee-simple-init-data.toml",
)


@pytest.mark.parametrize(("name", "valid"), sorted(CDH_EXAMPLES.items()))
def test_cdh_model_agrees_with_upstream_examples(name: str, valid: bool) -> None:
    text = (UPSTREAM / "cdh" / name).read_text()
    if valid:
        check_cdh_config(text)
    else:
        with pytest.raises(ConfigError, match="missing field `resource_uri`"):
            check_cdh_config(text)


@pytest.mark.parametrize("name", AA_EXAMPLES)
def test_aa_model_accepts_upstream_examples(name: str) -> None:
    check_aa_config((UPSTREAM / "aa" / name).read_text())


@pytest.mark.parametrize("name", INITDATA_EXAMPLES)
def test_initdata_model_accepts_upstream_examples(name: str) -> None:
    data = check_initdata((UPSTREAM / name).read_text())
    for key, check in (("aa.toml", check_aa_config), ("cdh.toml", check_cdh_config)):
        if key in data:
            check(data[key])


def test_the_previous_snp_overlay_cdh_config_is_refused() -> None:
    """It had no [kbc] table: CDH exits and the kata agent aborts the sandbox."""
    previous = (Path(__file__).parents[1] / "assets/coco/previous/snp-overlay.cdh.toml").read_text()
    with pytest.raises(ConfigError, match="missing field `kbc`"):
        check_cdh_config(previous)


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_generated_initdata_is_valid_for_every_guest_parser(spec: str) -> None:
    built = build_replay(replay_spec(**SPECS[spec]))
    data = check_initdata(built.init_data.toml.decode())
    assert set(data) == {"aa.toml", "cdh.toml", "policy.rego"}
    check_aa_config(data["aa.toml"])
    check_cdh_config(data["cdh.toml"])
    cdh = tomllib.loads(data["cdh.toml"])
    assert cdh["kbc"] == {"name": "offline_fs_kbc", "url": ""}
    assert json.loads(cdh["image"]["image_security_policy"]) == {
        "default": [{"type": "reject"}],
        "transports": {"docker": {IMAGE: [{"type": "insecureAcceptAnything"}]}},
    }
    assert data["policy.rego"] == policy_of(built)
    assert data["policy.rego"].startswith("package agent_policy\n")


@pytest.mark.parametrize("overlay", ["snp", "coco-dev", "peer-pods"])
def test_the_overlays_initdata_is_valid_for_every_guest_parser(overlay: str) -> None:
    data = check_initdata((K8S / "overlays" / overlay / "init-data.toml").read_text())
    check_aa_config(data["aa.toml"])
    check_cdh_config(data["cdh.toml"])


def test_host_data_and_annotation() -> None:
    built = build_replay(replay_spec())
    init_data = built.init_data
    assert init_data.host_data == hashlib.sha256(init_data.toml).digest()
    annotation = built.job["spec"]["template"]["metadata"]["annotations"][KATA_INIT_DATA]
    assert annotation == init_data.annotation_value
    compressed = base64.b64decode(annotation)
    assert gzip.decompress(compressed) == init_data.toml
    assert compressed[4:8] == b"\0\0\0\0"  # gzip MTIME 0: the same run gives the same bytes
    assert build_replay(replay_spec()).init_data == init_data


@pytest.mark.parametrize("algorithm", ["sha384", "sha512"])
def test_longer_digests_are_cut_to_32_bytes(algorithm: str) -> None:
    toml = build_replay(replay_spec()).init_data.toml
    init_data = InitData(toml, algorithm)  # type: ignore[arg-type]  # parametrised
    assert init_data.host_data == hashlib.new(algorithm, toml).digest()[:32]


@pytest.mark.parametrize(
    "image",
    [
        "registry.example/replay:latest",
        "replay@sha256:" + "ab" * 32,
        "library/replay@sha256:" + "ab" * 32,  # docker.io implied: the runtime rewrites it
        "acme/replay@sha256:" + "ab" * 32,
        IMAGE.upper(),
        IMAGE + "x",
        "registry.example/replay@sha512:" + "ab" * 64,
    ],
)
def test_images_must_be_pinned_with_their_registry(image: str) -> None:
    with pytest.raises(UsageError, match="must be pinned by digest with its registry"):
        check_pinned_image(image)
    with pytest.raises(UsageError, match="must be pinned by digest with its registry"):
        replay_spec(image=image)


@pytest.mark.parametrize(
    "image",
    [
        IMAGE,
        "localhost/replay@sha256:" + "ab" * 32,
        "registry:5000/team/replay@sha256:" + "ab" * 32,
        "10.0.0.7:5000/replay@sha256:" + "ab" * 32,
        "ghcr.io/acme/attested-replay@sha256:" + "ab" * 32,
    ],
)
def test_fully_qualified_images_are_accepted(image: str) -> None:
    assert check_pinned_image(image) == image


# -- one source: submit --dry-run, init-data and expected ----------------------------------

#: The pins every hardware expected-values file carries besides HOST_DATA.
EVALUATION = "sha256:" + "ee" * 32
MEASUREMENT = "ab" * 48
RUN = [
    "--run-id",
    "run-7",
    "--tenant",
    "acme",
    "--image",
    IMAGE,
    "--overlay",
    "snp",
    "--publish-url",
    "https://publish.example",
    "--publish-token-secret",
    "publish-token",
]
CORPUS = "https://corpora.example/acme/run-7.tar.gz"


def test_dry_run_init_data_and_expected_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", *RUN, "--corpus", CORPUS, "--checksum", CHECKSUM, "--dry-run"]) == 0
    job = json.loads(capsys.readouterr().out)
    annotation = job["spec"]["template"]["metadata"]["annotations"][KATA_INIT_DATA]
    toml = gzip.decompress(base64.b64decode(annotation))

    out = tmp_path / "init-data.toml"
    assert (
        main(["init-data", *RUN, "--corpus", CORPUS, "--checksum", CHECKSUM, "--out", str(out)])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert out.read_bytes() == toml
    host_data = hashlib.sha256(toml).hexdigest()
    assert lines[1] == f"HOST_DATA  {host_data}"
    assert (
        main(
            [
                "init-data",
                *RUN,
                "--corpus",
                CORPUS,
                "--checksum",
                CHECKSUM,
                "--out",
                str(out),
                "--emit-expected",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {"hostData": [host_data]}

    expected = tmp_path / "expected.json"
    assert (
        main(
            [
                "expected",
                *RUN,
                "--corpus-source",
                CORPUS,
                "--corpus-checksum",
                CHECKSUM,
                # A hardware file pins the launch digest and the evaluation too.
                *("--evaluation-digest", EVALUATION, "--measurement", MEASUREMENT),
                "--out",
                str(expected),
            ]
        )
        == 0
    )
    document = json.loads(expected.read_text())
    assert document["hostData"] == [host_data]
    assert document["imageDigest"] == IMAGE.rpartition("@")[2]
    assert document["runId"] == "run-7"
    assert document["tenant"] == "acme"

    built = build_replay(replay_spec())
    assert job == built.job
    assert built.init_data.host_data.hex() == host_data


def test_another_run_gives_another_host_data(capsys: pytest.CaptureFixture[str]) -> None:
    def host_data(*changes: str) -> str:
        args = ["submit", *RUN, "--corpus", CORPUS, "--checksum", CHECKSUM, "--dry-run", *changes]
        assert main(args) == 0
        job = json.loads(capsys.readouterr().out)
        annotation = job["spec"]["template"]["metadata"]["annotations"][KATA_INIT_DATA]
        return hashlib.sha256(gzip.decompress(base64.b64decode(annotation))).hexdigest()

    base = host_data()
    assert host_data("--cpu", "8", "--memory", "16Gi", "--namespace", "other") == base
    assert host_data("--run-id", "run-8") != base
    assert host_data("--overlay", "coco-dev") != base


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--overlay", "snp"], "also give --tenant, --corpus-source"),
        (
            [
                "--tenant",
                "acme",
                "--overlay",
                "snp",
                "--corpus-source",
                CORPUS,
                "--host-data",
                "00" * 32,
            ],
            "either --host-data or the replay Job's parameters",
        ),
        (
            [
                "--tenant",
                "acme",
                "--overlay",
                "snp",
                "--corpus-source",
                CORPUS,
                "--image-digest",
                "sha256:" + "cd" * 32,
            ],
            "is not the digest of --image",
        ),
    ],
)
def test_expected_refuses_incomplete_or_conflicting_job_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "expected.json"
    common = [
        *("expected", "--run-id", "run-7", "--corpus-checksum", CHECKSUM, "--image", IMAGE),
        *("--evaluation-digest", EVALUATION, "--measurement", MEASUREMENT),
    ]
    assert main([*common, *args, "--out", str(out)]) == 9
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_dry_run_cannot_wait(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["submit", *RUN, "--corpus", CORPUS, "--checksum", CHECKSUM, "--dry-run", "--wait"]
    assert main(args) == 9
    assert "--dry-run contacts no cluster" in capsys.readouterr().err


def test_expected_for_peer_pods_pins_init_data_through_pcr8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    peer_pods = [
        *RUN[: RUN.index("--overlay")],
        "--overlay",
        "peer-pods",
        *RUN[RUN.index("snp") + 1 :],
    ]
    toml = tmp_path / "init-data.toml"
    source = ["--corpus", CORPUS, "--checksum", CHECKSUM]
    assert main(["init-data", *peer_pods, *source, "--out", str(toml)]) == 0
    capsys.readouterr()
    digest = hashlib.sha256(toml.read_bytes()).hexdigest()
    expected = tmp_path / "expected.json"
    args = [
        *("expected", *peer_pods, "--corpus-source", CORPUS, "--corpus-checksum", CHECKSUM),
        *("--measurement", "cd" * 48, "--evaluation-digest", "sha256:" + "ef" * 32),
    ]
    assert main([*args, "--out", str(expected)]) == 0
    document = json.loads(expected.read_text())
    # A peer pod's VM starts without HOST_DATA: the init-data is pinned through PCR 8 instead.
    assert document["initDataDigest"] == digest
    assert "hostData" not in document
    assert document["imageDigest"] == IMAGE.rpartition("@")[2]
    # The same digest given by hand agrees; another one is refused before anything is written.
    assert main([*args, "--init-data-digest", digest.upper(), "--out", str(expected)]) == 0
    other = tmp_path / "other.json"
    assert main([*args, "--init-data-digest", "ab" * 32, "--out", str(other)]) == 9
    assert "is not the digest of the Job's init-data" in capsys.readouterr().err
    assert not other.exists()


def test_expected_takes_an_init_data_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "expected.json"
    common = [
        *("expected", "--run-id", "run-7", "--corpus-checksum", CHECKSUM, "--out", str(out)),
        *("--measurement", "cd" * 48, "--evaluation-digest", "sha256:" + "ef" * 32),
    ]
    assert main([*common, "--init-data-digest", "AB" * 32]) == 0
    assert json.loads(out.read_text())["initDataDigest"] == "ab" * 32
    assert main([*common, "--init-data-digest", "ab" * 31]) == 9
    assert "--init-data-digest" in capsys.readouterr().err
