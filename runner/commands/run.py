"""``attested-replay run``: the main job (and the container entrypoint).

The job itself is :func:`runner.pipeline.run`; this module maps the options to a
``RunRequest`` and prints.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from pydantic import ValidationError

from attestation.contracts import (
    MAX_MERGEABLE_SHARD_COUNT,
    RUN_ID_GRAMMAR,
    SHARD_INDEX_VARIABLE,
    explain_problem,
)
from runner.commands.parsing import (
    add_command,
    add_state_dir_argument,
    input_file,
    interface_path,
    output_file,
    seconds,
)
from runner.errors import UsageError
from runner.evidence import AGENT_ENCODINGS, EVIDENCE_CHOICES
from runner.evidence.coco_aa import DEFAULT_BASE_URL, DEFAULT_TIMEOUT
from runner.exit_codes import Family
from runner.pipeline import RunRequest, RunResult, run
from runner.pipeline.corpus_source import DOWNLOAD_DEADLINE
from runner.pipeline.replay import Progress
from runner.pod_output import FRAME_PREFIX, frame_envelope, frame_tails

if TYPE_CHECKING:
    from runner.commands import Subparsers

_INDEX_TEXT: Final = re.compile(r"^(0|[1-9][0-9]{0,5})$")


DESCRIPTION = """\
Validate and checksum the corpus, refuse an unexpected checksum, score every run record,
bind the digests into REPORT_DATA, obtain attestation evidence over them, verify the envelope
with the tenant's own verifier, and only then write the result and the envelope (atomically)
and publish them. Parameters, paths, the publication target and the evidence interface are
checked before any work; on any failure nothing is written."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "run",
        summary="replay a corpus and write its attestation envelope",
        description=DESCRIPTION,
        family=Family.REPLAY,
    )
    add_run_arguments(parser)
    # On a terminal the summary it prints says what its info events say (runner.cli.log_level).
    parser.set_defaults(handler=handle, terminal_log_level="warning")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        required=True,
        metavar="DIR|ARCHIVE|URL",
        help="corpus directory, .tar.gz file (a corpus export or an archive of the corpus "
        "files), or https:// URL of one",
    )
    parser.add_argument(
        "--corpus-deadline",
        type=float,
        default=DOWNLOAD_DEADLINE,
        metavar="SECONDS",
        help="most seconds a corpus download may take, retries included (default %(default)g)",
    )
    parser.add_argument(
        "--ca-bundle",
        type=input_file("--ca-bundle"),
        metavar="FILE",
        help="CA certificates for https:// downloads and publishing (default: certifi's "
        "bundle; REQUESTS_CA_BUNDLE, SSL_CERT_FILE, proxy and netrc variables are never used)",
    )
    parser.add_argument("--run-id", required=True, help=f"run identifier ({RUN_ID_GRAMMAR})")
    parser.add_argument("--tenant", required=True, help="tenant identifier (a DNS label)")
    parser.add_argument(
        "--evidence",
        required=True,
        choices=EVIDENCE_CHOICES,
        help="evidence provider; 'simulated' only when asked for by name (never a fallback)",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=output_file("--out"),
        metavar="FILE",
        help="envelope output file (its directory must exist)",
    )
    parser.add_argument(
        "--result-out",
        type=output_file("--result-out"),
        metavar="FILE",
        help="evaluation result file (default: <out>.result.json)",
    )
    parser.add_argument(
        "--expect-checksum", help="refuse a corpus whose checksum differs (sha256:...)"
    )
    parser.add_argument("--nonce", help="tenant-supplied nonce to bind into REPORT_DATA")
    parser.add_argument("--image-digest", help="container image digest to bind (sha256:...)")
    parser.add_argument(
        "--endorsement-bundle",
        type=input_file("--endorsement-bundle"),
        metavar="FILE",
        help="PEM bundle (VCEK or VLEK, ASK or ASVK, ARK) when the platform returns none",
    )
    add_state_dir_argument(parser)
    parser.add_argument(
        "--trust-simulated-root",
        action="store_true",
        help="let the run's own check accept this machine's simulated root (emulators, tests); "
        "implied by --evidence simulated. The envelope still says platform 'simulated'",
    )
    parser.add_argument(
        "--agent-url", default=DEFAULT_BASE_URL, help="attestation-agent base URL (coco-aa)"
    )
    parser.add_argument(
        "--agent-timeout",
        type=seconds(),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="seconds to wait for the attestation agent (coco-aa)",
    )
    parser.add_argument(
        "--agent-wait",
        type=seconds(zero=True),
        help="seconds to wait for the attestation agent's REST server to start listening "
        "(coco-aa: default 30; auto: default 0, since it cannot tell a late agent from none)",
    )
    parser.add_argument(
        "--configfs-root",
        type=interface_path("--configfs-root"),
        metavar="DIR",
        help="configfs-tsm report directory (default: /sys/kernel/config/tsm/report)",
    )
    parser.add_argument(
        "--sev-guest-device",
        type=interface_path("--sev-guest-device"),
        metavar="PATH",
        help="SEV-SNP guest device (default: /dev/sev-guest)",
    )
    parser.add_argument(
        "--agent-encoding",
        choices=AGENT_ENCODINGS,
        default="auto",
        help="REPORT_DATA encoding for coco-aa (auto: from the agent's /info version)",
    )
    parser.add_argument(
        "--omit-result",
        action="store_true",
        help="put only the result digest in the envelope (the result file is still written)",
    )
    parser.add_argument(
        "--publish", metavar="URL", help="publish the envelope to dir://PATH or https://HOST"
    )
    parser.add_argument(
        "--publish-token-file",
        type=input_file("--publish-token-file"),
        metavar="FILE",
        help="file holding the bearer token for --publish (https:// targets need one)",
    )
    parser.add_argument(
        "--termination-log",
        type=output_file("--termination-log", in_place=True),
        metavar="FILE",
        help="write the digests here (e.g. /dev/termination-log)",
    )
    parser.add_argument(
        "--frame-envelope",
        action="store_true",
        help=f"also print the envelope as one '{FRAME_PREFIX}<base64>' line on stdout",
    )
    parser.add_argument(
        "--shard-count",
        type=int,
        metavar="N",
        help=f"score one shard of a replay split into N shards (at most "
        f"{MAX_MERGEABLE_SHARD_COUNT}, so that the merged envelope fits the envelope limits); "
        "the envelope attests that shard, and `attested-replay merge` joins all N",
    )
    parser.add_argument(
        "--tails-out",
        type=output_file("--tails-out"),
        metavar="FILE",
        help="a shard's latency tails, for the merge (default: <out>.tails.json)",
    )
    parser.add_argument(
        "--shard-index",
        type=int,
        metavar="I",
        help=f"which shard, from 0 (default: ${SHARD_INDEX_VARIABLE}, set by an Indexed Job)",
    )


def handle(args: argparse.Namespace) -> int:
    request = run_request(args)
    with _progress_reporter() as progress:
        result = run(request, progress=progress)
    if args.frame_envelope:
        print(frame_envelope(result.envelope_bytes))
        if result.outcome.tails is not None:
            print(frame_tails(result.outcome.tails))
    _print_summary(result, framed=args.frame_envelope)
    return 0


def run_request(args: argparse.Namespace) -> RunRequest:
    """The :class:`RunRequest` of parsed ``run`` options; a value the envelope could not carry
    is refused here, before any work, naming the option (``--run-id 'x y': ...``)."""
    values = {name: getattr(args, name) for name in RunRequest.model_fields}
    if values["shard_count"] is not None and values["shard_index"] is None:
        values["shard_index"] = shard_index_from_environment(os.environ)
    try:
        return RunRequest(**values)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        message = problem["msg"].removeprefix("Value error, ")
        if not problem["loc"]:  # a rule across options names them itself
            raise UsageError(message) from None
        name = str(problem["loc"][0])
        option = "--" + name.replace("_", "-")
        value = str(values.get(name))
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise UsageError(f"{option} {shown!r}: {explain_problem(problem)}") from None


def shard_index_from_environment(environ: Mapping[str, str]) -> int:
    """The shard index of a pod of an Indexed Job (``$JOB_COMPLETION_INDEX``).

    The operator controls the pod's environment, so the value is only trusted to be a
    position: it is bound into the envelope, and the merge accepts each position once.
    """
    text = environ.get(SHARD_INDEX_VARIABLE)
    if text is None:
        raise UsageError(
            f"--shard-count needs --shard-index, or ${SHARD_INDEX_VARIABLE} (set by a Kubernetes "
            "Indexed Job)"
        )
    if _INDEX_TEXT.fullmatch(text) is None:
        raise UsageError(
            f"${SHARD_INDEX_VARIABLE} {text[:40]!r} is not a shard index (0, 1, 2, ...)"
        )
    return int(text)


@contextmanager
def _progress_reporter() -> Iterator[Progress | None]:
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress as ProgressBar

    # On stderr, the terminal just checked: rich's default console is stdout, which may be a
    # pipe carrying the summary or the framed envelope.
    with ProgressBar(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("replaying", total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _print_summary(result: RunResult, *, framed: bool) -> None:
    outcome = result.outcome
    envelope = result.envelope
    lines = [
        f"run {envelope.run_id} for tenant {envelope.tenant}: {outcome.case_count} cases replayed",
        f"  corpus checksum   {outcome.corpus_checksum}",
        f"  evaluation digest {outcome.evaluation_digest}",
        f"  result digest     {outcome.result_digest}",
        f"  evidence          {result.provider}",
        f"  envelope          {result.envelope_path} ({result.envelope_digest})",
        f"  result            {result.result_path}",
        f"  http environment  {result.http_environment.describe()}",
        f"  code variables    {result.process_environment.describe()}",
    ]
    publication = result.publication
    if publication is not None:
        where = f"{publication.target} ({publication.status}"
        if publication.log_index is not None:
            where += f", log index {publication.log_index} of {publication.tree_size}"
        lines.append(f"  published         {where})")
    marks = outcome.result.get("marks")
    if isinstance(marks, list):
        verdicts = ", ".join(
            f"{m.get('id')}={m.get('result')}" for m in marks if isinstance(m, dict)
        )
        lines.append(f"  pass marks        {verdicts}")
    # With --frame-envelope stdout carries the frame; keep it parseable.
    stream = sys.stderr if framed else sys.stdout
    print("\n".join(lines), file=stream)
