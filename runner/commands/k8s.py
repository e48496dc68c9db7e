"""Operator commands on Kubernetes: ``submit``, ``status``, ``collect``, ``cancel``, ``list``.

A run is named by its tenant and run ID; the Job name is derived from them
(``runner.k8s.job.job_name``). ``submit --wait`` and ``collect`` report success only for an
envelope that the tenant's verifier accepts against the expected-values file.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import structlog

from attestation.tenant.fsutil import atomic_write
from attestation.tenant.http import read_token
from runner.commands.job_params import (
    DEFAULT_NAMESPACE,
    add_job_arguments,
    replay_spec,
)
from runner.commands.parsing import (
    add_ca_bundle,
    add_command,
    input_file,
    input_file_or_dir,
    output_dir,
    output_file,
)
from runner.errors import SubmitError, UsageError
from runner.exit_codes import Family
from runner.extras import extra_required
from runner.k8s.job import (
    DEFAULT_ACTIVE_DEADLINE_SECONDS,
    DEFAULT_NODE_DISK,
    DEFAULT_SCRATCH_SIZE,
    ReplaySpec,
    build_replay,
    job_name,
)
from runner.k8s.progress import (
    IMAGE_PULL_GRACE,
    SANDBOX_GRACE,
    SCHEDULE_GRACE,
    START_GRACE,
    Report,
    WaitPolicy,
)
from runner.k8s.state import JOB_NOT_FOUND, RunOutcome, State, raise_for_outcome

if TYPE_CHECKING:
    from runner.commands import Subparsers
    from runner.k8s.submit import CollectedEnvelope, Submitter

Handler = Callable[[argparse.Namespace], int]
log = structlog.get_logger("attested-replay.k8s")

#: How much longer than the Job's deadline a client-side wait lasts (scheduling, collection).
WAIT_GRACE_SECONDS = 300


def load_verifier(expected_path: Path) -> Callable[[bytes], None]:
    """The tenant's verifier for one expected-values file (``runner.pipeline.verification``)."""
    from runner.pipeline.verification import envelope_verifier

    return envelope_verifier(expected_path)


def register(subparsers: Subparsers) -> None:
    submit = add_command(
        subparsers,
        "submit",
        summary="submit a replay Job to Kubernetes",
        description="""\
Build the replay Job and its init-data (whose agent policy admits only this Job's replay
container) and create it; --dry-run prints the Job instead. With --wait it waits for the run,
collects the envelope and verifies it against --expected before reporting success.""",
        family=Family.CLUSTER,
    )
    _cluster_arguments(submit)
    submit.add_argument(
        "--checksum", required=True, metavar="sha256:HEX", help="expected corpus checksum"
    )
    submit.add_argument("--run-id", required=True, help="run identifier")
    submit.add_argument("--tenant", required=True, help="tenant identifier (a DNS label)")
    add_job_arguments(submit)
    submit.add_argument(
        "--dry-run",
        action="store_true",
        help="print the Job (JSON, with its init-data annotation) and contact no cluster",
    )
    submit.add_argument(
        "--runtime-class", metavar="NAME", help="override the overlay's runtime class"
    )
    submit.add_argument(
        "--cpu", default="2", metavar="N", help="whole vCPUs (part of the launch measurement)"
    )
    submit.add_argument("--memory", default="4Gi", metavar="QUANTITY", help="memory limit")
    submit.add_argument(
        "--active-deadline",
        type=int,
        default=DEFAULT_ACTIVE_DEADLINE_SECONDS,
        metavar="SECONDS",
        help="activeDeadlineSeconds of the Job",
    )
    submit.add_argument(
        "--ttl",
        type=int,
        default=86400,
        metavar="SECONDS",
        help="ttlSecondsAfterFinished: collect before it expires",
    )
    submit.add_argument(
        "--backoff-limit",
        type=int,
        default=2,
        metavar="N",
        help="retries of a failed attempt, disruptions included: at most N+1 VMs per run "
        "(with --shards: per index, backoffLimitPerIndex)",
    )
    submit.add_argument(
        "--scratch-size",
        default=DEFAULT_SCRATCH_SIZE,
        metavar="QUANTITY",
        help="data the pod's /tmp must hold (corpus download + unpacked copy)",
    )
    submit.add_argument(
        "--node-disk",
        default=DEFAULT_NODE_DISK,
        metavar="QUANTITY",
        help="size of the kubelet filesystem on the replay nodes (kubectl get node -o "
        "jsonpath={.status.capacity.ephemeral-storage}): CoCo block-encrypted emptyDirs spend "
        "0.09%% of it on metadata, counted against their sizeLimit",
    )
    submit.add_argument(
        "--parallelism",
        type=int,
        metavar="P",
        help="with --shards: how many indices (TEEs) run at once (default: all)",
    )
    submit.add_argument(
        "--rerun",
        metavar="REASON",
        help="run a run ID again whose Job is gone (expired, cancelled, stopped): the reason, "
        "who and when are appended to the run's record",
    )
    submit.add_argument("--wait", action="store_true", help="wait, collect and verify")
    _collect_arguments(submit)
    submit.set_defaults(handler=_api_refusals(handle_submit))

    status = add_command(
        subparsers,
        "status",
        summary="print the phase of a submitted run",
        description="""\
One JSON object: the Job, its pods and the run's phase; when the Job is gone (TTL, cancel,
stop), what the run's record says: phase gone, why, when and by whom.""",
        family=Family.CLUSTER,
    )
    _cluster_arguments(status)
    _run_arguments(status, several=False)
    status.set_defaults(handler=_api_refusals(handle_status))

    collect = add_command(
        subparsers,
        "collect",
        summary="collect and verify the envelopes of finished runs",
        description="""\
For each run: read the envelope (publication service, or the framed line of the pod log),
check it against the pod's termination message and verify it against --expected (a file, or a
directory of <run-id>.json files). One JSON line per run. A run whose Job is gone is an error
naming what is missing and, when the run was published, where its envelope is.""",
        family=Family.CLUSTER,
    )
    _cluster_arguments(collect)
    _run_arguments(collect, several=True)
    collect.add_argument("--wait", action="store_true", help="wait for the runs to finish first")
    collect.add_argument(
        "--publish-url", metavar="URL", help="collect from this publication endpoint"
    )
    _collect_arguments(collect)
    collect.add_argument(
        "--out-dir",
        type=output_dir("--out-dir", create=False),
        metavar="DIR",
        help="write <run-id>.envelope.json files here (an existing directory)",
    )
    collect.set_defaults(handler=_api_refusals(handle_collect))

    cancel = add_command(
        subparsers,
        "cancel",
        summary="delete a run's Job and its pods",
        description="The Job is deleted with its pods (background propagation: the garbage "
        "collector deletes the pods).",
        family=Family.CLUSTER,
    )
    _cluster_arguments(cancel)
    _run_arguments(cancel, several=False)
    cancel.set_defaults(handler=_api_refusals(handle_cancel))

    listing = add_command(
        subparsers,
        "list",
        summary="list the runs in the namespace",
        description="One JSON line per run Job, as status prints it.",
        family=Family.CLUSTER,
    )
    _cluster_arguments(listing)
    listing.set_defaults(handler=_api_refusals(handle_list))


def _api_refusals(handler: Handler) -> Handler:
    """``handler``, with an API answer it did not handle itself (a 403 for a user the Role
    does not bind, say) turned into an error that says so, rather than an internal error."""

    @functools.wraps(handler)
    def handle(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except Exception as exc:
            # Only a command that loaded the Kubernetes client can have met its exception.
            exceptions = sys.modules.get("kubernetes.client.exceptions")
            if exceptions is None or not isinstance(exc, exceptions.ApiException):
                raise
            from runner.k8s.retry import refusal

            raise refusal(exc) from exc

    return handle


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        type=input_file("--kubeconfig"),
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context")
    parser.add_argument(
        "--namespace",
        metavar="NAME",
        help="namespace (default: the context's, else attested-replay)",
    )
    parser.add_argument(
        "--watch-timeout",
        type=int,
        default=60,
        metavar="SECONDS",
        help="server-side timeout of each watch request",
    )
    parser.add_argument(
        "--api-retries",
        type=int,
        default=6,
        metavar="N",
        help="attempts per API call (5xx, dropped connections)",
    )
    parser.add_argument(
        "--api-retry-delay",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="delay before the first retry (doubling after)",
    )
    parser.add_argument(
        "--records-namespace",
        default="attested-replay",
        metavar="NAMESPACE",
        help="where the run records live (one per run ID, kept after the Job): the same for "
        "every submitter, whatever namespace the Jobs run in",
    )


def _run_arguments(parser: argparse.ArgumentParser, *, several: bool) -> None:
    parser.add_argument(
        "run", nargs="+" if several else None, metavar="RUN", help="run ID" + ("s" * several)
    )
    parser.add_argument("--tenant", required=True, help="the runs' tenant")


def _collect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="how long to wait (default: the Job's deadline + 300)",
    )
    graces = parser.add_argument_group(
        "graces",
        "how long a stalled pod may stay so before the run counts as unable to run; the Job is "
        "then deleted so that no further VM boots (exit 5). Final at once: an agent-policy "
        "denial, an annotation the runtime refuses, an invalid image name.",
    )
    for flag, default, what in (
        ("--schedule-grace", SCHEDULE_GRACE, "Unschedulable (no node has room yet)"),
        ("--image-pull-grace", IMAGE_PULL_GRACE, "ErrImagePull / ImagePullBackOff"),
        ("--start-grace", START_GRACE, "CreateContainerConfigError and other start errors"),
        ("--sandbox-grace", SANDBOX_GRACE, "FailedCreatePodSandBox (each attempt boots a VM)"),
    ):
        graces.add_argument(flag, type=float, default=default, metavar="SECONDS", help=what)
    parser.add_argument(
        "--expected",
        type=input_file_or_dir("--expected"),
        metavar="FILE|DIR",
        help="expected-values file, or a directory of <run-id>.json files",
    )
    parser.add_argument(
        "--out",
        type=output_file("--out"),
        metavar="FILE",
        help="write the verified envelope here",
    )
    parser.add_argument(
        "--publish-token-file",
        type=input_file("--publish-token-file"),
        metavar="FILE",
        help="bearer token of the run's tenant for reading from the publication endpoint "
        "(collect; with --publish-url, submit first asks it whether the run ID was published)",
    )
    add_ca_bundle(parser)


# -- handlers -------------------------------------------------------------------------------


def handle_submit(args: argparse.Namespace) -> int:
    if args.dry_run:
        if args.wait:
            raise UsageError("--dry-run contacts no cluster, so it cannot --wait")
        built = build_replay(_replay_spec(args, str(args.namespace or DEFAULT_NAMESPACE)))
        print(json.dumps(built.job, indent=2, sort_keys=True))
        log.info(
            "dry_run", job=built.job["metadata"]["name"], host_data=built.init_data.host_data.hex()
        )
        return 0
    if args.wait and args.expected is None:
        raise UsageError("--wait verifies the envelope: give --expected EXPECTED.json")
    if args.publish_url and args.publish_token_file is None:
        raise UsageError(
            f"--publish-url {args.publish_url}: submit first asks the publication service "
            f"whether run {args.run_id!r} was published; give --publish-token-file FILE (a "
            f"token of tenant {args.tenant!r})"
        )
    # The expected values are read before anything is submitted: a missing or malformed file
    # found only after the Job ran would waste a TEE run.
    verifier = load_verifier(_expected_for(args.expected, args.run_id)) if args.wait else None
    # The Job's parameters are checked before connecting: a bad checksum, image or nonce is
    # found without a cluster (the namespace is checked again once the kubeconfig named it).
    _replay_spec(args, str(args.namespace or DEFAULT_NAMESPACE))
    submitter = _submitter(args)
    spec = _replay_spec(args, submitter.namespace)
    if args.rerun is not None and not args.rerun.strip():
        raise UsageError("--rerun needs a reason (it is recorded with the run)")
    submission = submitter.submit(spec, rerun=args.rerun)
    print(json.dumps(submission.to_json_dict(), sort_keys=True))
    if verifier is None:
        return 0
    timeout = _wait_timeout(args.timeout, spec.active_deadline_seconds)
    outcome = _wait(submitter, [submission.name], timeout, _wait_policy(args))[submission.name]
    raise_for_outcome(outcome)
    collected = submitter.collect(
        submission.name, verify_envelope=verifier, publish_url=args.publish_url
    )
    _write_collected(collected, args.out, None)
    return 0


def handle_status(args: argparse.Namespace) -> int:
    submitter = _submitter(args)
    status = submitter.status(job_name(args.tenant, args.run))
    print(json.dumps(status.to_json_dict(), sort_keys=True))
    return 0


def handle_collect(args: argparse.Namespace) -> int:
    runs: list[str] = list(dict.fromkeys(args.run))
    if args.expected is None:
        raise UsageError("collect verifies envelopes: give --expected")
    if len(runs) > 1 and args.out is not None:
        raise UsageError("--out takes one run; use --out-dir for several")
    submitter = _submitter(args)
    names = {run: job_name(args.tenant, run) for run in runs}
    if args.wait:
        timeout = _wait_timeout(args.timeout, DEFAULT_ACTIVE_DEADLINE_SECONDS)
        outcomes = _wait(submitter, list(names.values()), timeout, _wait_policy(args))
    else:
        outcomes = {}
    failures: list[str] = []
    for run, name in names.items():
        try:
            # No Job when the wait began: collect below says what the run record knows.
            if name in outcomes and outcomes[name].reason != JOB_NOT_FOUND:
                raise_for_outcome(outcomes[name])
            collected = submitter.collect(
                name,
                verify_envelope=load_verifier(_expected_for(args.expected, run)),
                publish_url=args.publish_url,
            )
        except SubmitError as exc:
            if len(runs) == 1:
                raise
            failures.append(f"{run}: {exc}")
            print(json.dumps({"runId": run, "job": name, "error": str(exc)}, sort_keys=True))
            continue
        _write_collected(collected, args.out, args.out_dir)
    if failures:
        raise SubmitError(f"{len(failures)} of {len(runs)} runs failed; first: {failures[0]}")
    return 0


def handle_cancel(args: argparse.Namespace) -> int:
    submitter = _submitter(args)
    name = job_name(args.tenant, args.run)
    submitter.cancel(name)
    print(json.dumps({"job": name, "runId": args.run, "cancelled": True}, sort_keys=True))
    return 0


def handle_list(args: argparse.Namespace) -> int:
    for status in _submitter(args).list_runs():
        print(json.dumps(status.to_json_dict(), sort_keys=True))
    return 0


# -- helpers --------------------------------------------------------------------------------


def _replay_spec(args: argparse.Namespace, namespace: str) -> ReplaySpec:
    cpu_text = str(args.cpu)
    if not cpu_text.isdigit():
        raise UsageError(
            f"--cpu {cpu_text!r}: give a whole number of vCPUs (fractions such as 500m or 1.5 "
            "are refused: the vCPU count is part of the SNP launch measurement)"
        )
    return dataclasses.replace(
        replay_spec(args, checksum=args.checksum),
        namespace=namespace,
        runtime_class=args.runtime_class,
        cpu=int(cpu_text),
        memory=args.memory,
        backoff_limit=args.backoff_limit,
        parallelism=args.parallelism,
        active_deadline_seconds=args.active_deadline,
        ttl_seconds_after_finished=args.ttl,
        scratch_size=args.scratch_size,
        node_disk=args.node_disk,
    )


def _submitter(args: argparse.Namespace) -> Submitter:
    # The Kubernetes client is an optional extra: imported only by the commands that need it.
    with extra_required(args.command, "kubernetes"):
        from runner.k8s.config import connect
        from runner.k8s.retry import KUBERNETES_RETRY
        from runner.k8s.submit import Submitter

    kubeconfig = None if args.kubeconfig is None else str(args.kubeconfig)
    connection = connect(kubeconfig, args.context)
    namespace = str(args.namespace or connection.namespace or DEFAULT_NAMESPACE)
    token_file = getattr(args, "publish_token_file", None)
    # Same rules as the publisher's token files: an empty or multi-token file is refused here,
    # not sent as a malformed Authorization header.
    token = None if token_file is None else read_token(token_file)
    log.debug("k8s_connected", source=connection.source, namespace=namespace)
    return Submitter(
        connection.api_client,
        namespace=namespace,
        retry_policy=dataclasses.replace(
            KUBERNETES_RETRY, attempts=args.api_retries, backoff_factor=args.api_retry_delay
        ),
        watch_timeout=args.watch_timeout,
        publish_token=token,
        ca_bundle=getattr(args, "ca_bundle", None),
        records_namespace=args.records_namespace,
    )


def _expected_for(expected: Path, run_id: str) -> Path:
    path = expected / f"{run_id}.json" if expected.is_dir() else expected
    if not path.is_file():
        raise UsageError(f"expected-values file {path} does not exist")
    return path


def _wait_timeout(given: float | None, deadline: int) -> float:
    """``--timeout``, else the Job's deadline plus a grace period."""
    return given if given is not None else deadline + WAIT_GRACE_SECONDS


def _wait_policy(args: argparse.Namespace) -> WaitPolicy:
    for flag in ("schedule_grace", "image_pull_grace", "start_grace", "sandbox_grace"):
        if getattr(args, flag) < 0:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 0 seconds")
    return WaitPolicy(
        schedule_grace=args.schedule_grace,
        image_pull_grace=args.image_pull_grace,
        start_grace=args.start_grace,
        sandbox_grace=args.sandbox_grace,
    )


def _wait(
    submitter: Submitter, names: list[str], timeout: float, policy: WaitPolicy
) -> dict[str, RunOutcome]:
    with _progress(len(names)) as on_progress:
        return submitter.wait(names, timeout=timeout, on_progress=on_progress, policy=policy)


@contextmanager
def _progress(total: int) -> Iterator[Callable[[Report], None]]:
    """Rich status line on a terminal; structlog events otherwise."""
    done: set[str] = set()
    terminal = set(get_args(State))  # every outcome state ends a run

    def fields(report: Report) -> dict[str, object]:
        found: dict[str, object] = {"job": report.name, "phase": report.phase}
        if report.reason:
            found.update(reason=report.reason, message=report.message)
        if report.attempts:
            found["sandbox_attempts"] = report.attempts
        return found

    if not sys.stderr.isatty():

        def log_progress(report: Report) -> None:
            if report.phase in terminal:
                done.add(report.name)
            log.info("run_progress", **fields(report), finished=len(done), total=total)

        yield log_progress
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"waiting for {total} run(s)") as status:

        def show_progress(report: Report) -> None:
            line = f"{report.name}: {report.phase}"
            if report.reason:
                line += f" ({report.reason}) {report.message}"
            if report.phase in terminal:
                done.add(report.name)
                console.log(line, markup=False)
            elif report.reason:
                console.log(line, markup=False)
            status.update(f"{len(done)}/{total} finished; {report.name}: {report.phase}")

        yield show_progress


def _write_collected(collected: CollectedEnvelope, out: Path | None, out_dir: Path | None) -> None:
    target = out
    if out_dir is not None:
        target = out_dir / f"{collected.run_id}.envelope.json"
    if target is not None:
        atomic_write(target, collected.envelope)
    summary = collected.to_json_dict()
    if target is not None:
        summary["path"] = str(target)
    print(json.dumps(summary, sort_keys=True))
