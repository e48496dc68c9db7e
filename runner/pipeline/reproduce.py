"""Re-derive a run's result from a corpus, trusting no hardware.

:func:`reproduce` reads an envelope as strictly as the verifier, checks the corpus checksum
against the envelope's binding before any scoring, then scores the corpus with
:func:`runner.pipeline.replay.replay_corpus` -- the function ``run`` calls, not a copy -- and
compares the evaluation and result digests with the binding's. Every leaf of the evaluation
is hashed from the run records here, a shard's too: ``runs.index.json`` is never read.

Nothing of the envelope's SEV-SNP evidence is used or checked: this answers "do these numbers
follow from this corpus under this scoring code?", which holds whoever ran the replay and on
whatever hardware. ``verify-attested-run`` answers the hardware question.

Failure classes are the verifier's (:mod:`attestation.exit_codes`):

* *malformed* (1): the envelope, the corpus or the corpus archive cannot be read as one;
* *binding* (7): the envelope's embedded result is not the one its binding names, or the bound
  result is not what this code computes from the same corpus and evaluation while the
  envelope names this very code (the numbers are not from the published code);
* *expectation* (8): the corpus or the evaluation (plan, marks, run records) differs from the
  one the envelope binds, or the envelope's run used other scoring code and the results
  differ (both code digests are named).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from attestation.encoding.canonical import canonicalize
from attestation.envelope.binding import result_digest
from attestation.envelope.merged import MergedEnvelope, parse_any_envelope
from attestation.envelope.merged_verification import header_binding
from attestation.envelope.model import Binding
from attestation.errors import AttestationError, FailureClass, MalformedError
from runner.corpus.errors import CorpusError
from runner.errors import InputError, UsageError
from runner.pipeline.corpus_source import unpack_archive
from runner.pipeline.replay import ReplayOutcome, compute_checksum, replay_corpus
from runner.workload import current_workload

#: At most this many differing result values are listed.
MAX_DIFFERENCES: Final = 20

TRUST_STATEMENT: Final = (
    "This check trusts no hardware: it re-ran the scoring on your corpus with this "
    "installation's code and compared digests with the envelope's binding. It did not look at "
    "the envelope's SEV-SNP evidence (verify-attested-run does), and it cannot tell whether "
    "the corpus' labels are true."
)


@dataclass(frozen=True, slots=True)
class Compared:
    """One value: what the envelope binds and what this machine computed (None: not computed,
    because an earlier check failed)."""

    name: str
    bound: str
    recomputed: str | None

    @property
    def same(self) -> bool | None:
        return None if self.recomputed is None else self.recomputed == self.bound

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bound": self.bound,
            "recomputed": self.recomputed,
            "same": self.same,
        }


@dataclass(frozen=True, slots=True)
class Reproduction:
    """The outcome of :func:`reproduce`: ``failure`` is None when every digest matched."""

    failure: FailureClass | None
    reason: str
    run_id: str | None = None
    tenant: str | None = None
    comparisons: tuple[Compared, ...] = ()
    result_differences: tuple[str, ...] = ()

    @property
    def reproduced(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict[str, Any]:
        return {
            "reproduced": self.reproduced,
            "failureClass": None if self.failure is None else self.failure.value,
            "reason": self.reason,
            "runId": self.run_id,
            "tenant": self.tenant,
            "comparisons": [compared.to_json() for compared in self.comparisons],
            "resultDifferences": list(self.result_differences),
            "trust": TRUST_STATEMENT,
        }


@dataclass(frozen=True, slots=True)
class _Claim:
    """What an envelope claims about the numbers: a whole run's, a merged run's (its header:
    the same digests an unsharded run binds) or one shard's (recomputed as that shard)."""

    run_id: str
    tenant: str
    binding: Binding
    result: dict[str, Any] | None
    #: A merged envelope: how many shards it merges.
    merged_from: int | None = None

    @classmethod
    def of(cls, envelope: bytes) -> _Claim:
        parsed = parse_any_envelope(envelope)
        if isinstance(parsed, MergedEnvelope):
            return cls(
                parsed.run_id,
                parsed.tenant,
                header_binding(parsed),
                parsed.result,
                merged_from=parsed.shard_count,
            )
        return cls(parsed.run_id, parsed.tenant, parsed.binding, parsed.result)

    @property
    def what(self) -> str:
        """The result in words ("the result", "shard 1 of 3's result", ...)."""
        if self.merged_from is not None:
            return f"the result merged from {self.merged_from} shards"
        shard = self.binding.shard
        return "the result" if shard is None else f"shard {shard.index} of {shard.count}'s result"


def reproduce(envelope_bytes: bytes, corpus: Path) -> Reproduction:
    """Re-derive the envelope's corpus checksum, evaluation digest and result digest from
    ``corpus`` (a corpus directory, a corpus export or a plain corpus archive) and compare.

    A merged envelope's header is compared with the unsharded replay (its merged report is
    byte for byte the unsharded one); a shard envelope with that shard's replay."""
    try:
        envelope = _Claim.of(envelope_bytes)
    except MalformedError as exc:
        return Reproduction(FailureClass.MALFORMED, f"--envelope: {exc}")
    if not corpus.exists():
        raise UsageError(f"--corpus {corpus}: no such file or directory")
    if corpus.is_dir():
        return _reproduce_from(envelope, corpus, f"--corpus {corpus}")
    with tempfile.TemporaryDirectory(prefix="attested-replay-reproduce-") as workdir:
        try:
            # The resolver `run --corpus` uses: a corpus export or a plain corpus archive.
            manifest = unpack_archive(corpus, Path(workdir))
        except InputError as exc:
            return _failed(envelope, FailureClass.MALFORMED, f"--corpus {corpus}: {exc}")
        outcome = _reproduce_from(envelope, Path(workdir), f"--corpus {corpus}")
        checksum = outcome.comparisons[0].recomputed if outcome.comparisons else None
        if manifest is not None and checksum not in (None, manifest.corpus_checksum):
            return _failed(
                envelope,
                FailureClass.MALFORMED,
                f"--corpus {corpus}: its manifest says corpus checksum "
                f"{manifest.corpus_checksum}, its files have {checksum}",
            )
        return outcome


def _failed(envelope: _Claim, failure: FailureClass, reason: str) -> Reproduction:
    return Reproduction(failure, reason, run_id=envelope.run_id, tenant=envelope.tenant)


def _reproduce_from(envelope: _Claim, corpus_dir: Path, source: str) -> Reproduction:
    binding = envelope.binding
    claimed = _claimed_digest(envelope.result)
    if claimed is not None and claimed != binding.result_digest:
        return _failed(
            envelope,
            FailureClass.BINDING,
            f"the envelope's result has digest {claimed}, its binding says "
            f"{binding.result_digest}: the result was changed after binding",
        )
    code = Compared("scoring code", binding.workload.code_digest, current_workload().code_digest)
    try:
        checksum = compute_checksum(corpus_dir)
    except CorpusError as exc:
        return _failed(envelope, FailureClass.MALFORMED, f"{source}: {exc}")
    corpus = Compared("corpus checksum", binding.corpus_checksum, checksum)
    if not corpus.same:
        return Reproduction(
            FailureClass.EXPECTATION,
            f"the corpus differs from the one the envelope binds: {source} has checksum "
            f"{checksum}, the envelope's run scored {binding.corpus_checksum}",
            run_id=envelope.run_id,
            tenant=envelope.tenant,
            comparisons=(
                corpus,
                Compared("evaluation digest", binding.evaluation_digest, None),
                Compared("result digest", binding.result_digest, None),
                code,
            ),
        )
    try:
        # Every leaf hashed here: an index in the operator's directory is never read (a stale
        # one beside altered run records would stand for the records the run scored).
        outcome = replay_corpus(corpus_dir, shard=binding.shard, use_runs_index=False)
    except CorpusError as exc:
        return _failed(envelope, FailureClass.MALFORMED, f"{source} does not replay: {exc}")
    return _compare(envelope, outcome, corpus, code)


def _claimed_digest(result: dict[str, Any] | None) -> str | None:
    """The digest of the envelope's embedded result (None when absent); a result with no
    canonical form (valid JSON, never a report) is named as such, never the bound digest."""
    if result is None:
        return None
    try:
        return result_digest(result)
    except AttestationError as exc:
        return f"<not canonicalizable: {exc}>"


def _compare(
    envelope: _Claim, outcome: ReplayOutcome, corpus: Compared, code: Compared
) -> Reproduction:
    binding = envelope.binding
    evaluation = Compared("evaluation digest", binding.evaluation_digest, outcome.evaluation_digest)
    result = Compared("result digest", binding.result_digest, outcome.result_digest)
    comparisons = (corpus, evaluation, result, code)
    differing = (
        tuple(_differences(envelope.result, outcome.result))
        if envelope.result is not None and not result.same
        else ()
    )

    def verdict(failure: FailureClass | None, reason: str) -> Reproduction:
        return Reproduction(
            failure,
            reason,
            run_id=envelope.run_id,
            tenant=envelope.tenant,
            comparisons=comparisons,
            result_differences=differing,
        )

    if not evaluation.same:
        return verdict(
            FailureClass.EXPECTATION,
            "the evaluation (plan, marks or run records) differs from the one the envelope "
            f"binds: this corpus gives {outcome.evaluation_digest}, the envelope's run scored "
            f"{binding.evaluation_digest}",
        )
    if not result.same:
        if code.same:
            return verdict(
                FailureClass.BINDING,
                f"the envelope binds {envelope.what} {binding.result_digest}, but its own "
                "scoring code "
                f"(code digest {code.bound}, the same as this installation's) computes "
                f"{outcome.result_digest} from this corpus: the numbers are not from the "
                "published code",
            )
        return verdict(
            FailureClass.EXPECTATION,
            f"the results differ ({binding.result_digest} bound, {outcome.result_digest} "
            f"recomputed) and so does the scoring code: the envelope's run used code digest "
            f"{code.bound}, this installation has {code.recomputed}; reproduce with the "
            f"version that ran ({binding.workload.name} {binding.workload.version})",
        )
    note = "" if code.same else " (with other scoring code than the run's, which agrees here)"
    return verdict(
        None,
        f"the corpus, evaluation and {envelope.what} the envelope binds follow from this "
        f"corpus{note}",
    )


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT: Final = _Absent()


def _differences(bound: object, recomputed: object) -> list[str]:
    """JSON paths where two results differ, with both values (the first
    :data:`MAX_DIFFERENCES`)."""
    found: list[str] = []

    def walk(left: object, right: object, where: str) -> None:
        if len(found) >= MAX_DIFFERENCES:
            return
        if isinstance(left, dict) and isinstance(right, dict):
            for key in sorted(set(left) | set(right)):
                walk(left.get(key, _ABSENT), right.get(key, _ABSENT), f"{where}.{key}")
        elif isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
            for index, (one, other) in enumerate(zip(left, right, strict=True)):
                walk(one, other, f"{where}[{index}]")
        elif left is _ABSENT or right is _ABSENT or canonicalize(left) != canonicalize(right):
            found.append(f"{where}: envelope {_shown(left)}, recomputed {_shown(right)}")

    walk(bound, recomputed, "result")
    return found


def _shown(value: object) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
