"""``attested-replay expected``: write a tenant's expected-values file from a run's parameters."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from attestation.contracts import explain_problem, format_sha256
from attestation.envelope.expected import ExpectedValues
from attestation.errors import AttestationError
from attestation.tenant.fsutil import atomic_write_text
from attestation.verify.policy import load_policy
from runner.commands.job_params import add_job_arguments, check_image_layout, replay_spec
from runner.commands.parsing import (
    add_command,
    add_state_dir_argument,
    input_file,
    input_file_or_dir,
    output_file,
)
from runner.errors import InputError, UsageError
from runner.exit_codes import Family
from runner.k8s.job import Overlay, build_replay
from runner.pipeline.corpus_source import unpack_archive
from runner.pipeline.replay import CorpusDigests, corpus_digests
from runner.reference.initdata import InitData
from runner.workload import current_workload

if TYPE_CHECKING:
    from runner.commands import Subparsers


DESCRIPTION = """\
The tenant states what a genuine envelope for its run must say: run ID, corpus checksum and
evaluation digest (--corpus DIR|ARCHIVE, the approved corpus or its export, pins both: cases,
plan, marks and run records); the launch MEASUREMENT values it allows (--measurement, from
`attested-replay measure`; required unless the file accepts only simulated evidence);
optionally tenant, workload and result digests, image digest, the verification policy
(--policy, merged key by key), HOST_DATA values (or the replay Job's parameters), the init-data
digest (--init-data-digest: HOST_DATA on SEV-SNP, vTPM PCR 8 on Azure peer pods) and the
simulated roots it accepts. Leaving a pin out takes an --accept-any-... option, and the
verdict then says what was not pinned. verify-attested-run --expected reads the file
(docs/envelope.md lists every key)."""

#: Why a hardware file needs MEASUREMENT, and how to get it (``expected`` refuses without).
MEASUREMENT_REQUIRED: Final = (
    "a hardware expected-values file must pin the launch MEASUREMENT: without it any guest "
    "(Kata's stock image with the genuine HOST_DATA too) passes; compute it with "
    "`attested-replay measure` and give it with --measurement (repeatable: one per node size "
    "or vCPU type), or give --accept-any-measurement to give that up"
)
#: Why the evaluation digest is needed, and how to get it.
EVALUATION_REQUIRED: Final = (
    "--corpus-checksum pins the cases only: give --evaluation-digest too, or --corpus "
    "DIR|ARCHIVE (pins both, with the plan, marks and run records), or "
    "--accept-any-evaluation to accept any predictions and marks"
)


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "expected",
        summary="write an expected-values file for verify-attested-run",
        description=DESCRIPTION,
        family=Family.REPLAY,
    )
    parser.add_argument("--run-id", required=True, help="the run ID the envelope must carry")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--corpus",
        type=input_file_or_dir("--corpus"),
        metavar="DIR|ARCHIVE",
        help="pin the corpus checksum and evaluation digest of this approved corpus (a "
        "directory, its export from `corpus export`, or a .tar.gz of the corpus files)",
    )
    source.add_argument(
        "--corpus-checksum", metavar="sha256:HEX", help="the expected corpus checksum"
    )
    parser.add_argument("--tenant", help="the tenant the envelope must name")
    parser.add_argument(
        "--result-digest", metavar="sha256:HEX", help="the result digest the envelope must bind"
    )
    parser.add_argument(
        "--evaluation-digest",
        metavar="sha256:HEX",
        help="the evaluation digest (plan, marks, runs) the envelope must bind",
    )
    parser.add_argument(
        "--accept-any-evaluation",
        action="store_true",
        help="pin no evaluation digest: accept whatever predictions, marks and plan the "
        "operator scored (the verdict says so)",
    )
    parser.add_argument(
        "--image-digest",
        metavar="sha256:HEX",
        help="the container image digest the run must bind",
    )
    workload = parser.add_mutually_exclusive_group()
    workload.add_argument(
        "--workload-digest",
        metavar="sha256:HEX",
        help="sha256: of the canonical workload object (name, version, code digest)",
    )
    workload.add_argument(
        "--this-workload",
        action="store_true",
        help="expect the workload of this installation (name, version, code digest)",
    )
    roots = parser.add_mutually_exclusive_group()
    roots.add_argument(
        "--simulated-root",
        action="append",
        default=[],
        metavar="FINGERPRINT",
        help="accept simulated evidence under this root (sha256:<hex of its DER>); repeatable",
    )
    roots.add_argument(
        "--trust-local-simulated-root",
        action="store_true",
        help="accept the simulated root kept in this machine's state directory",
    )
    add_state_dir_argument(parser, existing=True)
    parser.add_argument(
        "--policy",
        type=input_file("--policy"),
        metavar="FILE",
        help="verification policy JSON whose keys are merged in",
    )
    parser.add_argument(
        "--measurement",
        action="append",
        default=[],
        metavar="HEX",
        help="an allowed launch MEASUREMENT (96 hex digits, from `attested-replay measure`); "
        "repeatable, one per node size or vCPU type",
    )
    parser.add_argument(
        "--accept-any-measurement",
        action="store_true",
        help="pin no MEASUREMENT on hardware: accept any guest firmware, kernel and agent (the "
        "verdict says so)",
    )
    parser.add_argument(
        "--host-data",
        action="append",
        default=[],
        metavar="HEX",
        help="an allowed HOST_DATA (64 hex digits); repeatable",
    )
    parser.add_argument(
        "--init-data-digest",
        metavar="HEX",
        help="the SHA-256 of the init-data (64 hex digits) the evidence must carry: HOST_DATA of "
        "SEV-SNP evidence, PCR 8 of Azure az-snp-vtpm evidence (peer pods)",
    )
    job = parser.add_argument_group(
        "the replay Job (pins HOST_DATA and the image digest)",
        "The run parameters given to `submit`: the HOST_DATA of the init-data `submit` builds "
        "from them (its agent policy admits only that Job's replay container), so a run that "
        "executed anything else fails verification with exit 8. --corpus-source is submit's "
        "--corpus. With --overlay peer-pods (Azure: no HOST_DATA) the init-data's SHA-256 is "
        "pinned as initDataDigest instead, checked against vTPM PCR 8.",
    )
    add_job_arguments(job, corpus_flag="--corpus-source", required=False)
    parser.add_argument(
        "--out",
        type=output_file("--out"),
        required=True,
        metavar="FILE",
        help="the expected-values file to write",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    expected = build_expected(args)
    atomic_write_text(args.out, json.dumps(expected.to_json_dict(), indent=2) + "\n")
    print(f"wrote {args.out} (run {expected.run_id}, corpus {expected.corpus_checksum})")
    for what in unpinned(expected):
        print(f"not pinned: {what}")
    return 0


def unpinned(expected: ExpectedValues) -> list[str]:
    """What the file gives up, in the tenant's words (printed after writing it)."""
    given_up = []
    if expected.policy.measurements is None and expected.policy.accept_any_measurement:
        given_up.append("MEASUREMENT (--accept-any-measurement): any guest is accepted")
    if expected.evaluation_digest is None:
        given_up.append(
            "the evaluation digest (--accept-any-evaluation): any predictions, marks and plan"
        )
    return given_up


def _pinned_by_the_job(
    args: argparse.Namespace, checksum: str, document: dict[str, Any]
) -> dict[str, Any]:
    """``hostData`` and ``imageDigest`` of the Job ``submit`` makes from these parameters."""
    missing = [
        flag
        for flag, value in (
            ("--tenant", args.tenant),
            ("--overlay", args.overlay),
            ("--corpus-source", args.corpus_source),
        )
        if value is None
    ]
    if missing:
        raise UsageError(f"--image pins the replay Job's HOST_DATA: also give {', '.join(missing)}")
    if "hostData" in document:
        raise UsageError("give either --host-data or the replay Job's parameters (--image ...)")
    spec = replay_spec(args, checksum=checksum, flag="--corpus-source")
    if document.get("imageDigest", spec.image_digest) != spec.image_digest:
        raise UsageError(f"--image-digest {document['imageDigest']} is not the digest of --image")
    init_data = build_replay(spec).init_data
    if args.overlay == _PEER_PODS:
        return {**_init_data_pin(init_data, document), "imageDigest": spec.image_digest}
    return {"hostData": [init_data.host_data.hex()], "imageDigest": spec.image_digest}


def _init_data_pin(init_data: InitData, document: dict[str, Any]) -> dict[str, Any]:
    """``initDataDigest`` of a peer pod's init-data: the VM starts without HOST_DATA, and the
    attestation agent extends this digest into vTPM PCR 8 (guest-components
    ``attester/src/az_snp_vtpm/mod.rs`` @ 07b7c1a0, ``bind_init_data``: SHA-256 digests only)."""
    if init_data.algorithm != "sha256":
        raise UsageError(
            f"--overlay {_PEER_PODS}: the init-data's algorithm is {init_data.algorithm}, "
            "but the attestation agent extends only a SHA-256 digest into PCR 8"
        )
    digest = init_data.digest.hex()
    if document.get("initDataDigest", digest) != digest:
        raise UsageError(
            f"--init-data-digest {document['initDataDigest']} is not the digest of the Job's "
            f"init-data ({digest})"
        )
    return {"initDataDigest": digest}


#: The option behind each key of the expected-values file (keys from --policy are that file's).
_OPTION_OF_KEY: Final = MappingProxyType(
    {
        "runId": "--run-id",
        "corpusChecksum": "--corpus-checksum",
        "tenant": "--tenant",
        "resultDigest": "--result-digest",
        "evaluationDigest": "--evaluation-digest",
        "imageDigest": "--image-digest",
        "workloadDigest": "--workload-digest",
        "measurements": "--measurement",
        "acceptAnyMeasurement": "--accept-any-measurement",
        "acceptAnyEvaluation": "--accept-any-evaluation",
        "hostData": "--host-data",
        "simulatedRoots": "--simulated-root",
        "shardCount": "--shards",
        "nonce": "--nonce",
        "initDataDigest": "--init-data-digest",
    }
)
#: The overlay whose VMs start without HOST_DATA: its init-data is pinned through PCR 8.
_PEER_PODS: Final[Overlay] = "peer-pods"
#: Stands for the checksum of --corpus while the other options are checked (before the
#: corpus is read, which can take long).
_PENDING_CHECKSUM: Final = format_sha256(bytes(32))


def build_expected(args: argparse.Namespace) -> ExpectedValues:
    """The expected values of the options; every option is checked before --corpus is read."""
    document: dict[str, Any] = {}
    if args.policy:
        document.update(_policy_keys(args.policy))
    document.update({"runId": args.run_id, "corpusChecksum": args.corpus_checksum})
    optional = {
        "tenant": args.tenant,
        "resultDigest": args.result_digest,
        "evaluationDigest": args.evaluation_digest,
        "imageDigest": args.image_digest,
        # --shards (a Job parameter below) also pins into how many shards the run is split.
        "shardCount": args.shards,
        # --nonce (a Job parameter too) pins the nonce the tenant chose for this run.
        "nonce": args.nonce,
        "initDataDigest": args.init_data_digest and args.init_data_digest.lower(),
        "workloadDigest": current_workload().digest if args.this_workload else args.workload_digest,
    }
    document.update({key: value for key, value in optional.items() if value is not None})
    if args.measurement:
        document["measurements"] = [value.lower() for value in args.measurement]
    if args.accept_any_measurement:
        document["acceptAnyMeasurement"] = True
    if args.accept_any_evaluation:
        document["acceptAnyEvaluation"] = True
    if args.host_data:
        document["hostData"] = [value.lower() for value in args.host_data]
    roots = list(args.simulated_root)
    if args.trust_local_simulated_root:
        from runner.evidence.simulated import load_simulated_amd

        roots.append(load_simulated_amd(args.state_dir).root_fingerprint)
    if roots:
        document["simulatedRoots"] = roots
    checksum = args.corpus_checksum or _PENDING_CHECKSUM
    # Every option is checked before any work (reading the corpus can take long).
    _require_pins(_validate({**document, "corpusChecksum": checksum}, args), args)
    if args.corpus is not None:
        digests = _corpus_digests(args.corpus)
        checksum = digests.corpus_checksum
        if document.setdefault("evaluationDigest", digests.evaluation_digest) != (
            digests.evaluation_digest
        ):
            raise InputError(
                f"--evaluation-digest {document['evaluationDigest']} is not the evaluation "
                f"digest of --corpus {args.corpus} ({digests.evaluation_digest})"
            )
    document["corpusChecksum"] = checksum
    if args.image is not None:
        document.update(_pinned_by_the_job(args, checksum, document))
    if args.image_layout is not None:  # a rebuilt image: pin its digest (docs/image.md)
        document["imageDigest"] = check_image_layout(args.image_layout, args.image_digest)
    return _validate(document, args)


def _require_pins(expected: ExpectedValues, args: argparse.Namespace) -> None:
    """Refuse a file that would accept a run the tenant did not ask for, unless the tenant
    gave that pin up by name: MEASUREMENT for hardware (a file without simulated roots
    accepts only AMD hardware), the evaluation digest for every run."""
    if (
        not expected.simulated_roots
        and expected.policy.measurements is None
        and not expected.policy.accept_any_measurement
    ):
        raise UsageError(MEASUREMENT_REQUIRED)
    if (
        args.corpus is None
        and expected.evaluation_digest is None
        and not args.accept_any_evaluation
    ):
        raise UsageError(EVALUATION_REQUIRED)


def _corpus_digests(corpus: Path) -> CorpusDigests:
    """The checksum and evaluation digest of a corpus directory, export or plain archive (the
    corpus inputs every command takes; an export is checked against its manifest)."""
    if corpus.is_dir():
        return corpus_digests(corpus)
    with tempfile.TemporaryDirectory(prefix="attested-replay-expected-") as workdir:
        try:
            manifest = unpack_archive(corpus, Path(workdir))
        except InputError as exc:
            raise InputError(f"--corpus {corpus}: {exc}") from exc
        digests = corpus_digests(Path(workdir))
    if manifest is not None and digests.corpus_checksum != manifest.corpus_checksum:
        raise InputError(
            f"--corpus {corpus}: its manifest says corpus checksum {manifest.corpus_checksum}, "
            f"its files have {digests.corpus_checksum}"
        )
    return digests


def _policy_keys(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--policy {path}: {exc.strerror or exc}") from exc
    try:
        return load_policy(data).to_json_dict()
    except AttestationError as exc:
        raise InputError(f"--policy {path}: {exc}") from exc


def _validate(document: dict[str, Any], args: argparse.Namespace) -> ExpectedValues:
    try:
        return ExpectedValues.model_validate(document, by_alias=True, by_name=False)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        key = str(problem["loc"][0]) if problem["loc"] else ""
        option = _OPTION_OF_KEY.get(key)
        if option is None:  # a key that came from the --policy file
            where = ".".join(str(part) for part in problem["loc"])
            raise InputError(
                f"--policy {args.policy}: {where}: {explain_problem(problem)}"
            ) from None
        value = problem["input"]
        shown = " ".join(map(str, value)) if isinstance(value, list) else str(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise UsageError(f"{option} {shown!r}: {explain_problem(problem)}") from None
