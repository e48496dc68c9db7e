"""``attested-replay run``: the main job (and the container entrypoint).

Validate and checksum the corpus, refuse an unexpected checksum, score, digest, bind, obtain
evidence over REPORT_DATA, verify the envelope with the tenant's own verifier, then write the
result and the envelope atomically (and optionally publish them).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import structlog
from pydantic import TypeAdapter, ValidationError

from attestation.binding import sha256_digest
from attestation.canonical import canonicalize
from attestation.envelope import Binding
from runner.corpus_source import fetch_corpus, is_url
from runner.envelope_builder import assemble_envelope, certificates_to_pem, envelope_json_bytes
from runner.errors import ChecksumMismatchError, UsageError
from runner.evidence import EVIDENCE_CHOICES, get_provider, load_endorsement_bundle
from runner.evidence.simulated import SIMULATED_PROVIDER
from runner.fsutil import atomic_write
from runner.k8s.job import FRAME_PREFIX  # the pod contract: submit reads this line
from runner.replay import Progress, ReplayOutcome, compute_checksum, replay_corpus
from runner.simulated_state import load_or_create_simulated_amd
from runner.verification import self_verify
from runner.workload import current_workload

if TYPE_CHECKING:
    from runner.commands import Subparsers

log = structlog.get_logger("attested-replay.run")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="replay a corpus and write its attestation envelope",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(parser)
    parser.set_defaults(handler=handle)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus", required=True, help="corpus directory, or https:// URL of a .tar.gz"
    )
    parser.add_argument("--run-id", required=True, help="run identifier ([A-Za-z0-9._-]{1,128})")
    parser.add_argument("--tenant", required=True, help="tenant identifier (a DNS label)")
    parser.add_argument(
        "--evidence",
        required=True,
        choices=EVIDENCE_CHOICES,
        help="evidence provider; 'simulated' only when asked for by name (never a fallback)",
    )
    parser.add_argument("--out", required=True, type=Path, help="envelope output file")
    parser.add_argument(
        "--result-out", type=Path, help="evaluation result file (default: <out>.result.json)"
    )
    parser.add_argument(
        "--expect-checksum", help="refuse a corpus whose checksum differs (sha256:...)"
    )
    parser.add_argument("--nonce", help="tenant-supplied nonce to bind into REPORT_DATA")
    parser.add_argument("--image-digest", help="container image digest to bind (sha256:...)")
    parser.add_argument(
        "--endorsement-bundle",
        type=Path,
        help="PEM bundle (VCEK or VLEK, ASK or ASVK, ARK) when the platform returns none",
    )
    parser.add_argument("--state-dir", type=Path, help="state directory of the simulated PKI")
    parser.add_argument(
        "--trust-simulated-root",
        action="store_true",
        help="let the run's own check accept this machine's simulated root (emulators, tests); "
        "implied by --evidence simulated. The envelope still says platform 'simulated'",
    )
    parser.add_argument(
        "--agent-url", default="http://127.0.0.1:8006", help="attestation-agent base URL (coco-aa)"
    )
    parser.add_argument(
        "--agent-timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the attestation agent (coco-aa, default %(default)s)",
    )
    parser.add_argument(
        "--configfs-root",
        type=Path,
        help="configfs-tsm report directory (default /sys/kernel/config/tsm/report)",
    )
    parser.add_argument(
        "--sev-guest-device", type=Path, help="SEV-SNP guest device (default /dev/sev-guest)"
    )
    parser.add_argument(
        "--agent-encoding",
        choices=["auto", "sha512", "sha256-hex"],
        default="auto",
        help="REPORT_DATA encoding for coco-aa (auto: from the agent's /info version)",
    )
    parser.add_argument(
        "--omit-result",
        action="store_true",
        help="put only the result digest in the envelope (the result file is still written)",
    )
    parser.add_argument("--publish", metavar="URL", help="publish the envelope (dir://, https://)")
    parser.add_argument("--publish-token-file", type=Path, help="bearer token for --publish")
    parser.add_argument(
        "--termination-log", type=Path, help="write the digests here (e.g. /dev/termination-log)"
    )
    parser.add_argument(
        "--frame-envelope",
        action="store_true",
        help=f"also print the envelope as one '{FRAME_PREFIX}<base64>' line on stdout",
    )


@dataclass(frozen=True, slots=True)
class RunOutput:
    """What a run wrote."""

    envelope_path: Path
    result_path: Path
    envelope_bytes: bytes
    envelope_digest: str
    outcome: ReplayOutcome
    provider: str


def handle(args: argparse.Namespace) -> int:
    output = perform_run(args)
    if args.frame_envelope:
        print(FRAME_PREFIX + base64.b64encode(output.envelope_bytes).decode("ascii"))
    _print_summary(args, output)
    return 0


#: Options whose values end up in the binding, with the binding field whose type they must
#: satisfy (``--expect-checksum`` is compared with ``corpusChecksum``).
_BOUND_OPTIONS: Final = (
    ("run_id", "run_id"),
    ("tenant", "tenant"),
    ("nonce", "nonce"),
    ("image_digest", "image_digest"),
    ("expect_checksum", "corpus_checksum"),
)


def check_run_parameters(args: argparse.Namespace) -> None:
    """Refuse parameters the envelope could not carry before any work is done (a bad run ID
    found only after a long replay would waste it, and would surface as an internal error)."""
    for attribute, field_name in _BOUND_OPTIONS:
        value = getattr(args, attribute)
        if value is None:
            continue
        field = Binding.model_fields[field_name]
        # pydantic keeps a field's top-level constraints apart from its annotation.
        field_type: Any = (
            Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
        )
        try:
            TypeAdapter(field_type).validate_python(value)
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]["msg"]
            option = "--" + attribute.replace("_", "-")
            shown = value if len(value) <= 80 else value[:77] + "..."
            raise UsageError(f"{option} {shown!r}: {problem}") from None
    result_path = _result_path(args)
    if result_path.resolve() == args.out.resolve():
        raise UsageError(f"--result-out {result_path} is the envelope's own path (--out)")


def _result_path(args: argparse.Namespace) -> Path:
    result_out: Path | None = args.result_out
    return result_out or args.out.with_name(args.out.name + ".result.json")


def _provider_options(args: argparse.Namespace) -> dict[str, object]:
    options: dict[str, object] = {"state_dir": args.state_dir}
    if args.evidence in {"coco-aa", "auto"}:
        options.update(
            agent_url=args.agent_url,
            agent_encoding=args.agent_encoding,
            agent_timeout=args.agent_timeout,
        )
    if args.evidence in {"configfs-tsm", "auto"} and args.configfs_root is not None:
        options["configfs_root"] = args.configfs_root
    if args.evidence in {"sev-guest", "auto"} and args.sev_guest_device is not None:
        options["sev_guest_device"] = args.sev_guest_device
    return options


def perform_run(args: argparse.Namespace) -> RunOutput:
    """The whole run for parsed ``run`` arguments (also used by ``demo``)."""
    check_run_parameters(args)
    publish_token = _publish_token(args)
    structlog.contextvars.bind_contextvars(run_id=args.run_id, tenant=args.tenant)
    # The provider is chosen, and its interface looked for, before any work: a machine without
    # it fails at once (exit 3) rather than after a long replay. Evidence itself can only be
    # requested after the replay, since the binding holds the result digest.
    provider = get_provider(args.evidence, **_provider_options(args))
    provider.check_available()
    with tempfile.TemporaryDirectory(prefix="attested-replay-") as workdir:
        corpus_dir = _resolve_corpus(args.corpus, Path(workdir))
        if args.expect_checksum:
            actual = compute_checksum(corpus_dir)
            if actual != args.expect_checksum:
                raise ChecksumMismatchError(
                    f"corpus checksum is {actual}, expected {args.expect_checksum}; "
                    "refusing to replay"
                )
        with _progress_reporter() as progress:
            outcome = replay_corpus(corpus_dir, progress=progress)
    if args.expect_checksum and outcome.corpus_checksum != args.expect_checksum:
        raise ChecksumMismatchError(f"corpus changed during the replay: {outcome.corpus_checksum}")
    log.info("replayed", cases=outcome.case_count, result_digest=outcome.result_digest)

    binding = Binding(
        run_id=args.run_id,
        tenant=args.tenant,
        corpus_checksum=outcome.corpus_checksum,
        evaluation_digest=outcome.evaluation_digest,
        result_digest=outcome.result_digest,
        workload=current_workload(),
        nonce=args.nonce,
        image_digest=args.image_digest,
    )
    # The report is requested after scoring, so the result digest is hardware-bound.
    evidence = provider.obtain(binding.canonical_bytes())
    log.info("evidence_obtained", provider=evidence.provider, certificates=len(evidence.cert_chain))
    chain = evidence.cert_chain
    if not chain and args.endorsement_bundle:
        chain = load_endorsement_bundle(args.endorsement_bundle)
    endorsement = certificates_to_pem(chain)
    envelope = assemble_envelope(
        binding,
        evidence,
        endorsement_pem=endorsement,
        result=None if args.omit_result else outcome.result,
    )
    envelope_bytes = envelope_json_bytes(envelope)
    # The tenant's own verifier runs before anything is written or published.
    simulated_root = None
    if evidence.provider == SIMULATED_PROVIDER or args.trust_simulated_root:
        simulated_root = load_or_create_simulated_amd(args.state_dir).root_fingerprint
    self_verify(envelope_bytes, binding=binding, simulated_root=simulated_root)

    result_path = _result_path(args)
    atomic_write(result_path, canonicalize(outcome.result) + b"\n")
    atomic_write(args.out, envelope_bytes)
    envelope_digest = sha256_digest(envelope_bytes)
    log.info("envelope_written", path=str(args.out), envelope_digest=envelope_digest)

    if args.termination_log:
        _write_termination_log(args.termination_log, args.run_id, envelope_digest, outcome)
    if args.publish:
        _publish(args, envelope_bytes, publish_token)
    return RunOutput(
        envelope_path=args.out,
        result_path=result_path,
        envelope_bytes=envelope_bytes,
        envelope_digest=envelope_digest,
        outcome=outcome,
        provider=evidence.provider,
    )


def _resolve_corpus(source: str, workdir: Path) -> Path:
    if is_url(source):
        return fetch_corpus(source, workdir)
    path = Path(source)
    if not path.is_dir():
        raise UsageError(f"--corpus {source}: not a directory or an https:// URL")
    return path


def _write_termination_log(
    path: Path, run_id: str, envelope_digest: str, outcome: ReplayOutcome
) -> None:
    # The termination message is limited to 4096 bytes: digests only, never the envelope.
    message = {
        "v": 1,
        "runId": run_id,
        "envelope": envelope_digest,
        "result": outcome.result_digest,
        "corpusChecksum": outcome.corpus_checksum,
    }
    text = json.dumps(message, sort_keys=True)
    try:
        path.write_text(text, encoding="ascii")
    except OSError as exc:
        log.warning("termination_log_unwritable", path=str(path), error=str(exc))


def _publish_token(args: argparse.Namespace) -> str | None:
    """Check the publication target and read its token before any work: a bad target or an
    unreadable token found after a long replay would waste it (and fail the Job)."""
    if not args.publish:
        if args.publish_token_file:
            raise UsageError("--publish-token-file needs --publish")
        return None
    from runner.publish.client import check_target
    from runner.publish.tokens import read_token

    check_target(args.publish)
    token = read_token(args.publish_token_file) if args.publish_token_file else None
    if token is None and not args.publish.startswith("dir://"):
        raise UsageError(f"publishing to {args.publish} needs --publish-token-file")
    return token


def _publish(args: argparse.Namespace, envelope_bytes: bytes, token: str | None) -> None:
    from runner.publish.client import publish_envelope

    outcome = publish_envelope(
        args.publish, envelope_bytes, tenant=args.tenant, run_id=args.run_id, token=token
    )
    log.info("envelope_published", target=args.publish, outcome=str(outcome))


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


def _print_summary(args: argparse.Namespace, output: RunOutput) -> None:
    outcome = output.outcome
    lines = [
        f"run {args.run_id} for tenant {args.tenant}: {outcome.case_count} cases replayed",
        f"  corpus checksum   {outcome.corpus_checksum}",
        f"  evaluation digest {outcome.evaluation_digest}",
        f"  result digest     {outcome.result_digest}",
        f"  evidence          {output.provider}",
        f"  envelope          {output.envelope_path} ({output.envelope_digest})",
        f"  result            {output.result_path}",
    ]
    marks = outcome.result.get("marks")
    if isinstance(marks, list):
        verdicts = ", ".join(
            f"{m.get('id')}={m.get('result')}" for m in marks if isinstance(m, dict)
        )
        lines.append(f"  pass marks        {verdicts}")
    # With --frame-envelope stdout carries the frame; keep it parseable.
    stream = sys.stderr if args.frame_envelope else sys.stdout
    print("\n".join(lines), file=stream)
