"""The main job as a library: a :class:`RunRequest` in, a :class:`RunResult` out.

:func:`run` is the product's core sequence, called by ``attested-replay run`` (the container
entrypoint), ``attested-replay demo`` and the tests alike:

1. check every parameter the envelope will carry, the publication target and its token, and
   that the evidence interface exists, before any work (a mistake found after a long replay
   would waste it);
2. fetch the corpus (a directory, or an ``https://`` ``.tar.gz``), refuse an unexpected
   checksum, replay and score it;
3. bind run, tenant, corpus checksum, evaluation digest, result digest and workload, and obtain
   evidence whose REPORT_DATA commits to that binding (after scoring, so the result digest is
   hardware-bound);
4. assemble the envelope and verify it with the tenant's own verifier;
5. write the result and the envelope atomically, the termination message, and publish.

The fields of :class:`RunRequest` are the options of ``attested-replay run`` (``run_id`` is
``--run-id``), and errors name them that way.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog
from pydantic import BaseModel, ConfigDict, Field, model_validator

from attestation.contracts import (
    MAX_SHARD_ENVELOPE_BYTES,
    MAX_SHARD_ENVELOPE_JSON_ITEMS,
    Nonce,
    RunId,
    Sha256Digest,
    TenantId,
    mergeable_shard_count_problem,
    sha256_digest,
)
from attestation.encoding.canonical import canonicalize
from attestation.encoding.json_document import json_item_bound
from attestation.endorsement.trust import TrustStore
from attestation.envelope.model import Binding, Envelope, ShardPosition
from attestation.tenant.fsutil import atomic_write_all
from attestation.tenant.http import HttpClient, HttpEnvironment, http_environment, read_token
from attestation.tenant.paths import check_output_file
from attestation.verify.checks import VerificationResult
from runner.errors import ChecksumMismatchError, InputError, UsageError
from runner.evidence import AgentEncoding, EvidenceKind, get_provider, load_endorsement_bundle
from runner.evidence.coco_aa import DEFAULT_BASE_URL, DEFAULT_TIMEOUT
from runner.evidence.simulated import SIMULATED_PROVIDER, load_or_create_simulated_amd
from runner.pipeline.corpus_source import DOWNLOAD_DEADLINE, corpus_directory, describe_source
from runner.pipeline.envelope import assemble_envelope, endorse, envelope_json_bytes
from runner.pipeline.environment import ProcessEnvironment, process_environment
from runner.pipeline.replay import Progress, ReplayOutcome, compute_checksum, replay_corpus
from runner.pipeline.verification import self_verify
from runner.pod_output import TerminationMessage
from runner.publish.client import PublishOutcome, check_target, publish_envelope
from runner.workload import current_workload

log = structlog.get_logger("attested-replay.run")


class RunRequest(BaseModel):
    """Everything that defines one run. Validated on construction (pydantic
    ``ValidationError``): identifiers and digests by the wire contracts' types."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    corpus: str = Field(
        description="corpus directory, .tar.gz file (a corpus export or an archive of the corpus "
        "files), or https:// URL of one"
    )
    corpus_deadline: float = Field(
        default=DOWNLOAD_DEADLINE,
        gt=0,
        description="seconds a corpus download may take in all, retries and waits included",
    )
    ca_bundle: Path | None = Field(
        default=None,
        description="CA certificates for https:// (default: certifi's); never from the environment",
    )
    run_id: RunId
    tenant: TenantId
    evidence: EvidenceKind = Field(
        description="evidence provider; 'simulated' only when asked for by name (never a fallback)"
    )
    out: Path = Field(description="envelope output file")
    result_out: Path | None = Field(
        default=None, description="evaluation result file (default: <out>.result.json)"
    )
    tails_out: Path | None = Field(
        default=None, description="a shard's tails file, for the merge (default: <out>.tails.json)"
    )
    expect_checksum: Sha256Digest | None = None
    nonce: Nonce | None = None
    image_digest: Sha256Digest | None = None
    endorsement_bundle: Path | None = None
    state_dir: Path | None = Field(default=None, description="state directory of the simulated PKI")
    trust_simulated_root: bool = False
    agent_url: str = DEFAULT_BASE_URL
    agent_timeout: float = DEFAULT_TIMEOUT
    #: Seconds to wait for the agent's REST server to listen; None: 30 for coco-aa, 0 for auto.
    agent_wait: float | None = Field(default=None, ge=0)
    agent_encoding: AgentEncoding = "auto"
    configfs_root: Path | None = None
    sev_guest_device: Path | None = None
    omit_result: bool = False
    publish: str | None = None
    publish_token_file: Path | None = None
    termination_log: Path | None = None
    #: Score only shard ``shard_index`` (from 0) of a replay split into ``shard_count`` shards;
    #: the envelope's binding says which (both or neither).
    shard_index: int | None = Field(default=None, ge=0)
    shard_count: int | None = None

    @model_validator(mode="after")
    def _shard_pair(self) -> RunRequest:
        if (self.shard_index is None) != (self.shard_count is None):
            raise ValueError("--shard-index and --shard-count go together")
        index, count = self.shard_index, self.shard_count
        # First: a split whose merged envelope could exceed the envelope limits is refused
        # before any shard runs (the limit is the contracts' worst case over any corpus).
        problem = None if count is None else mergeable_shard_count_problem(count, "--shard-count")
        if problem is not None:
            raise ValueError(problem)
        if self.tails_out is not None and count is None:
            raise ValueError("--tails-out needs --shard-count (only a shard has a tails file)")
        if index is not None and count is not None and index >= count:
            raise ValueError(
                f"--shard-index {index} is not below --shard-count {count} (shards are "
                "numbered from 0)"
            )
        return self

    @property
    def shard(self) -> ShardPosition | None:
        """The shard this run scores, or None for a whole run."""
        if self.shard_index is None or self.shard_count is None:
            return None
        return ShardPosition(index=self.shard_index, count=self.shard_count)

    @property
    def result_path(self) -> Path:
        """Where the evaluation result goes."""
        return self.result_out or self.out.with_name(self.out.name + ".result.json")

    @property
    def tails_path(self) -> Path | None:
        """Where a shard's tails file goes (None for a whole run)."""
        if self.shard_count is None:
            return None
        return self.tails_out or default_tails_path(self.out)

    def provider_options(self) -> dict[str, object]:
        """The options of :func:`runner.evidence.get_provider` for this request's provider."""
        options: dict[str, object] = {"state_dir": self.state_dir}
        if self.evidence in {"coco-aa", "auto"}:
            options.update(
                agent_url=self.agent_url,
                agent_encoding=self.agent_encoding,
                agent_timeout=self.agent_timeout,
                agent_wait=self.agent_wait,
            )
        if self.evidence in {"configfs-tsm", "auto"} and self.configfs_root is not None:
            options["configfs_root"] = self.configfs_root
        if self.evidence in {"sev-guest", "auto"} and self.sev_guest_device is not None:
            options["sev_guest_device"] = self.sev_guest_device
        return options


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run produced and wrote."""

    envelope: Envelope
    envelope_bytes: bytes
    envelope_digest: str
    envelope_path: Path
    result_path: Path
    outcome: ReplayOutcome
    provider: str
    #: The tenant's verifier on the envelope (crypto-only policy), before anything was written.
    verification: VerificationResult
    termination: TerminationMessage
    #: What the run's HTTP clients took from outside the request (the CA bundle) and which
    #: trust variables they ignored.
    http_environment: HttpEnvironment
    #: The code-loading variables set for the process (a genuine run refuses them).
    process_environment: ProcessEnvironment
    #: The publisher's receipt when ``publish`` was set.
    publication: PublishOutcome | None = None


def run(request: RunRequest, *, progress: Progress | None = None) -> RunResult:
    """Run the main job (see the module docstring for the steps).

    ``progress(done, total)`` reports the replay's progress (see
    :func:`runner.pipeline.replay.replay_corpus`).

    Raises:
        RunnerError: a subclass naming what failed (``runner.exit_codes`` maps each to the
            exit code of ``attested-replay run``).
    """
    _check_paths(request)
    publish_token = _publish_token(request)
    # Every log event of the run carries its run ID and tenant (and only this run's).
    with structlog.contextvars.bound_contextvars(run_id=request.run_id, tenant=request.tenant):
        return _run(request, publish_token, progress)


def _run(request: RunRequest, publish_token: str | None, progress: Progress | None) -> RunResult:
    # An unusable --ca-bundle fails here, before any work; the record comes first in the log.
    http_env = http_environment(request.ca_bundle)
    log.info("http_environment", **asdict(http_env))
    process_env = process_environment(os.environ)
    log.info("process_environment", **asdict(process_env))
    if process_env.in_effect and request.evidence != SIMULATED_PROVIDER:
        names = ", ".join(process_env.in_effect)
        raise UsageError(
            f"refusing to attest with --evidence {request.evidence} while {names} "
            f"{'is' if len(process_env.in_effect) == 1 else 'are'} set: these variables load "
            "code or change how it computes before attested-replay starts, and a replay pod's "
            "agent policy never admits them (docs/environment.md); unset them"
        )
    # The provider is chosen, and its interface looked for, before any work: a machine without
    # it fails at once (exit 3) rather than after a long replay. Evidence itself can only be
    # requested after the replay, since the binding holds the result digest.
    provider = get_provider(request.evidence, **request.provider_options())
    provider.check_available()
    outcome = _replay(request, progress)
    log.info("replayed", cases=outcome.case_count, result_digest=outcome.result_digest)
    if outcome.shard is not None and not outcome.used_runs_index:
        # Not an error (the digest is the same), but each shard then hashes every run record.
        log.warning(
            "runs_index_absent",
            hint="each shard hashed every run record; `attested-replay corpus index DIR` "
            "writes runs.index.json, with which a shard hashes only its own blocks",
        )

    binding = Binding(
        run_id=request.run_id,
        tenant=request.tenant,
        corpus_checksum=outcome.corpus_checksum,
        evaluation_digest=outcome.evaluation_digest,
        result_digest=outcome.result_digest,
        workload=current_workload(),
        nonce=request.nonce,
        image_digest=request.image_digest,
        shard=request.shard,
    )
    # The report is requested after scoring, so the result digest is hardware-bound.
    evidence = provider.obtain(binding.canonical_bytes())
    log.info("evidence_obtained", provider=evidence.provider, certificates=len(evidence.cert_chain))
    chain = evidence.cert_chain
    if request.endorsement_bundle and (not chain or evidence.vtpm is not None):
        # The az-snp-vtpm attester returns the VCEK alone (guest-components
        # attester/src/az_snp_vtpm/mod.rs @ 07b7c1a0): a mounted bundle adds ASK and ARK.
        chain = (*chain, *load_endorsement_bundle(request.endorsement_bundle))
    # The evidence is verified once, with this run's one `now`: the chain that verifies says
    # whose root it reached (the envelope's platform), and the self-check reuses it.
    now = datetime.now(UTC)
    trust = TrustStore.amd()
    simulated_root = None
    if evidence.provider == SIMULATED_PROVIDER or request.trust_simulated_root:
        amd = load_or_create_simulated_amd(request.state_dir)
        trust = trust.with_simulated_root(amd.ark_certificate)
        simulated_root = amd.root_fingerprint
    endorsed = endorse(evidence, chain, trust=trust, now=now)
    envelope = assemble_envelope(
        binding, endorsed, result=None if request.omit_result else outcome.result
    )
    envelope_bytes = envelope_json_bytes(envelope)
    if request.shard is not None:
        _check_shard_envelope_size(envelope_bytes)
    # The tenant's own verifier runs on the envelope before anything is written or published.
    verification = self_verify(
        envelope_bytes,
        binding=binding,
        simulated_root=simulated_root,
        shard=request.shard,
        verifier=endorsed.verifier,
        now=now,
    )

    # All files or none; the envelope, whose presence means "done", is renamed last.
    files = [(request.result_path, canonicalize(outcome.result) + b"\n")]
    if request.tails_path is not None and outcome.tails is not None:
        files.append((request.tails_path, outcome.tails))
    atomic_write_all([*files, (request.out, envelope_bytes)])
    envelope_digest = sha256_digest(envelope_bytes)
    log.info("envelope_written", path=str(request.out), envelope_digest=envelope_digest)
    termination = TerminationMessage(
        run_id=request.run_id,
        envelope=envelope_digest,
        result=outcome.result_digest,
        corpus_checksum=outcome.corpus_checksum,
    )
    if request.termination_log:
        _write_termination_log(request.termination_log, termination)
    publication = None
    if request.publish:
        publication = _publish(request, request.publish, envelope, envelope_bytes, publish_token)
    return RunResult(
        envelope=envelope,
        envelope_bytes=envelope_bytes,
        envelope_digest=envelope_digest,
        envelope_path=request.out,
        result_path=request.result_path,
        outcome=outcome,
        provider=evidence.provider,
        verification=verification,
        termination=termination,
        http_environment=http_env,
        process_environment=process_env,
        publication=publication,
    )


def default_tails_path(envelope: Path) -> Path:
    """Where a shard's tails file is, beside its envelope (``run`` writes, ``merge`` reads)."""
    return envelope.with_name(envelope.name + ".tails.json")


def _check_shard_envelope_size(envelope_bytes: bytes) -> None:
    """A shard envelope within the bound every merge counts on (its size does not depend on
    the cases: only a plan and marks near their own limits, or cost totals of thousands of
    digits, reach it)."""
    items = json_item_bound(envelope_bytes)
    if len(envelope_bytes) > MAX_SHARD_ENVELOPE_BYTES or items > MAX_SHARD_ENVELOPE_JSON_ITEMS:
        raise InputError(
            f"the shard envelope is {len(envelope_bytes)} bytes with up to {items} JSON values, "
            f"over the {MAX_SHARD_ENVELOPE_BYTES} bytes and {MAX_SHARD_ENVELOPE_JSON_ITEMS} "
            "values a shard envelope may take (so that any split merges): the plan, marks or "
            "cost totals are too large to shard"
        )


def _check_paths(request: RunRequest) -> None:
    """A corpus directory must exist and every output path must be writable before any work: a
    typo found after a long replay would waste it (``attested-replay run`` checks its path
    options while parsing too)."""
    describe_source(request.corpus, "--corpus")
    if request.result_path.resolve() == request.out.resolve():
        raise UsageError(f"--result-out {request.result_path}: is the envelope's own path (--out)")
    check_output_file(request.out, "--out")
    check_output_file(request.result_path, "--result-out")
    tails = request.tails_path
    if tails is not None:
        if tails.resolve() in {request.out.resolve(), request.result_path.resolve()}:
            raise UsageError(f"--tails-out {tails}: is the envelope's or the result's path")
        check_output_file(tails, "--tails-out")
    if request.termination_log is not None:
        check_output_file(request.termination_log, "--termination-log", in_place=True)


def _replay(request: RunRequest, progress: Progress | None) -> ReplayOutcome:
    with corpus_directory(
        request.corpus, deadline=request.corpus_deadline, ca_bundle=request.ca_bundle
    ) as corpus_dir:
        if request.expect_checksum and request.shard is None:
            actual = compute_checksum(corpus_dir)
            if actual != request.expect_checksum:
                raise ChecksumMismatchError(
                    f"corpus checksum is {actual}, expected {request.expect_checksum}; "
                    "refusing to replay"
                )
        # A shard checks the expected checksum as soon as its own blocks are hashed (with the
        # runs index it never hashes the others: runner.corpus.case_blocks).
        outcome = replay_corpus(
            corpus_dir,
            progress=progress,
            shard=request.shard,
            expect_checksum=request.expect_checksum if request.shard is not None else None,
        )
    if request.expect_checksum and outcome.corpus_checksum != request.expect_checksum:
        raise ChecksumMismatchError(f"corpus changed during the replay: {outcome.corpus_checksum}")
    return outcome


def _write_termination_log(path: Path, message: TerminationMessage) -> None:
    """Best effort (the envelope is already written): never blocking on a FIFO without a
    reader (ENXIO), and only into a regular file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(path))
            os.set_blocking(fd, True)
            os.write(fd, message.to_json().encode("ascii"))
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("termination_log_unwritable", path=str(path), error=str(exc))


def _publish_token(request: RunRequest) -> str | None:
    """Check the publication target and read its token before any work: a bad target or an
    unreadable token found after a long replay would waste it (and fail the Job)."""
    if not request.publish:
        if request.publish_token_file:
            raise UsageError("--publish-token-file needs --publish")
        return None
    check_target(request.publish)
    token = read_token(request.publish_token_file) if request.publish_token_file else None
    if token is None and not request.publish.startswith("dir://"):
        raise UsageError(f"publishing to {request.publish} needs --publish-token-file")
    return token


def _publish(
    request: RunRequest, target: str, envelope: Envelope, envelope_bytes: bytes, token: str | None
) -> PublishOutcome:
    with HttpClient(token=token, what="publication target", ca_bundle=request.ca_bundle) as http:
        # publish_envelope logs it (envelope_published, with its fields).
        return publish_envelope(
            target,
            envelope_bytes,
            tenant=request.tenant,
            run_id=request.run_id,
            token=token,
            client=http,
            envelope=envelope,  # the bytes' source, verified above: not parsed again
        )
