"""``attested-replay expected``: write a tenant's expected-values file from a run's parameters.

The tenant states what a genuine envelope for its run must say: run ID and corpus checksum
(required), optionally tenant, workload, result and evaluation digests, the verification policy
(``--policy``, merged key by key) and the simulated roots it accepts. See docs/envelope.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attestation.envelope.expected import ExpectedValues, load_expected
from attestation.errors import AttestationError
from attestation.verify.policy import load_policy
from runner.commands.job_params import add_job_arguments, replay_spec
from runner.errors import InputError, UsageError
from runner.k8s.job import build_replay
from runner.pipeline.replay import compute_checksum
from runner.workload import current_workload
from tenant.fsutil import atomic_write_text

if TYPE_CHECKING:
    from runner.commands import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "expected",
        help="write an expected-values file for verify-attested-run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-id", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", type=Path, help="compute the checksum of this corpus directory")
    source.add_argument("--corpus-checksum", help="the expected corpus checksum (sha256:...)")
    parser.add_argument("--tenant")
    parser.add_argument("--result-digest")
    parser.add_argument("--evaluation-digest")
    parser.add_argument("--image-digest", help="the container image digest the run must bind")
    parser.add_argument(
        "--shard-count",
        type=int,
        metavar="N",
        help="the run must be split into N shards (1: unsharded); any count when omitted",
    )
    workload = parser.add_mutually_exclusive_group()
    workload.add_argument("--workload-digest", help="sha256: of the canonical workload object")
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
    parser.add_argument("--state-dir", type=Path, help="state directory of the simulated PKI")
    parser.add_argument("--policy", type=Path, help="policy JSON whose keys are merged in")
    parser.add_argument("--measurement", action="append", default=[], help="allowed MEASUREMENT")
    parser.add_argument("--host-data", action="append", default=[], help="allowed HOST_DATA")
    job = parser.add_argument_group(
        "the replay Job (pins HOST_DATA and the image digest)",
        "The run parameters given to `submit`: the HOST_DATA of the init-data `submit` builds "
        "from them (its agent policy admits only that Job's replay container), so a run that "
        "executed anything else fails verification with exit 8. --corpus-source is submit's "
        "--corpus.",
    )
    add_job_arguments(job, corpus_flag="--corpus-source", required=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    expected = build_expected(args)
    atomic_write_text(args.out, json.dumps(expected.to_json_dict(), indent=2) + "\n")
    print(f"wrote {args.out} (run {expected.run_id}, corpus {expected.corpus_checksum})")
    return 0


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
    host_data = build_replay(spec).init_data.host_data
    return {"hostData": [host_data.hex()], "imageDigest": spec.image_digest}


def build_expected(args: argparse.Namespace) -> ExpectedValues:
    document: dict[str, Any] = {}
    if args.policy:
        try:
            policy = load_policy(args.policy.read_bytes())
        except OSError as exc:
            raise UsageError(f"cannot read --policy {args.policy}: {exc}") from exc
        except AttestationError as exc:
            raise InputError(f"--policy {args.policy}: {exc}") from exc
        document.update(policy.to_json_dict())
    checksum = compute_checksum(args.corpus) if args.corpus else args.corpus_checksum
    document.update({"runId": args.run_id, "corpusChecksum": checksum})
    optional = {
        "tenant": args.tenant,
        "resultDigest": args.result_digest,
        "evaluationDigest": args.evaluation_digest,
        "imageDigest": args.image_digest,
        "shardCount": args.shard_count,
        "workloadDigest": current_workload().digest if args.this_workload else args.workload_digest,
    }
    document.update({key: value for key, value in optional.items() if value is not None})
    if args.measurement:
        document["measurements"] = [value.lower() for value in args.measurement]
    if args.host_data:
        document["hostData"] = [value.lower() for value in args.host_data]
    if args.image is not None:
        document.update(_pinned_by_the_job(args, checksum, document))
    roots = list(args.simulated_root)
    if args.trust_local_simulated_root:
        from runner.evidence.simulated import load_or_create_simulated_amd

        roots.append(load_or_create_simulated_amd(args.state_dir).root_fingerprint)
    if roots:
        document["simulatedRoots"] = roots
    try:
        return load_expected(json.dumps(document).encode())
    except AttestationError as exc:
        raise InputError(str(exc)) from exc
