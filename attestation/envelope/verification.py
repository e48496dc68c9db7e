"""Envelope-mode verification: every raw-report check, then binding (7), then expectations (8).

An envelope is one run's (or one shard's); a merged envelope holds a sharded replay's shard
envelopes, each verified here as an envelope, then the merge (``merged_verification``).

The envelope carries its own endorsement (VCEK/VLEK, ASK/ASVK, ARK as PEM); the ARK in it is
never trusted. AMD's pinned roots are; a simulated root is trusted only when its fingerprint
is listed in the tenant's ``simulatedRoots``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from cryptography import x509

from attestation.abi.product import ProductLine
from attestation.abi.report import AttestationReport
from attestation.contracts import Platform
from attestation.endorsement.certificate import endorsement_from_certificate, load_certificates
from attestation.endorsement.chain import verify_chain
from attestation.endorsement.trust import TrustStore, fingerprint
from attestation.envelope.binding import report_data_for, report_data_matches, result_digest
from attestation.envelope.expectations import EXPECTATION_CHECKS, expectation_checks, shard_check
from attestation.envelope.expected import ExpectedValues
from attestation.envelope.model import (
    ENVELOPE_KIND,
    Envelope,
    ShardPosition,
    load_envelope_object,
    validate_parsed_envelope,
)
from attestation.errors import AttestationError, FailureClass, MalformedError
from attestation.verify.checks import Check, VerificationResult
from attestation.verify.verifier import LATER_STAGES, ReportChecks, Verifier

if TYPE_CHECKING:
    # Imported where they are used: a merged envelope's and a shard's machinery (the
    # evaluation's partials) and the az-snp-vtpm checks load only for such an envelope, so a
    # one-shot ``verify-attested-run --envelope`` of a plain SEV-SNP envelope does not pay
    # for them (tests/attestation/test_cli_imports.py).
    from attestation.envelope.merged import AnyEnvelope
    from attestation.scoring.shards import CheckedShard

_MALFORMED = FailureClass.MALFORMED
_BINDING = FailureClass.BINDING
_EXPECTATION = FailureClass.EXPECTATION

#: Raw-report stages listed as "not run" when the envelope or its certChain does not parse.
_RAW_STAGES: tuple[tuple[str, FailureClass], ...] = (
    ("report.parse", _MALFORMED),
    ("endorsement.parse", _MALFORMED),
    *LATER_STAGES,
)
_BINDING_CHECKS = ("binding.report-data", "binding.envelope-fields", "binding.result-digest")
#: A shard envelope's own check of its result (after the binding checks).
SHARD_RESULT_CHECK = "binding.shard-result"


def verify_envelope(
    envelope_bytes: bytes,
    expected: ExpectedValues,
    *,
    now: datetime,
    trust: TrustStore | None = None,
    crl: bytes | None = None,
    shard: ShardPosition | None = None,
    verifier: Verifier | None = None,
) -> VerificationResult:
    """Verify an envelope (of either kind) against the tenant's expectations. Never raises for
    a failed check.

    ``verifier`` (optional) runs the raw-report stages instead of one made here from ``trust``,
    ``crl`` and the expectations' policy and ``simulatedRoots``: a caller that has just
    verified the same evidence with it (the run, before it builds the envelope) reuses its
    memoized chain validation. It must hold the trust and policy the expectations name.

    A shard's envelope is a part of a run, never a whole one: it fails the ``expectation.shard``
    check unless the caller asks for exactly that ``shard`` (the operator's checks of one
    shard); a tenant verifies the merged envelope of all shards, whose every shard gets the
    checks of an envelope (see :mod:`attestation.envelope.merged_verification`).

    An exception the checks did not foresee (a bug, or an input no bound anticipated) is a
    verdict too: the failed check ``envelope.judged``, class malformed (exit 1), naming the
    exception. The envelope is then NOT VERIFIED, never left without a verdict; only a
    ``MemoryError`` (the tenant's machine, not the envelope) propagates.
    """
    try:
        return _verify_envelope(
            envelope_bytes,
            expected,
            now=now,
            trust=trust,
            crl=crl,
            shard=shard,
            verifier=verifier,
        )
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - every input gets a verdict, never a traceback
        return unjudged_result(exc)


#: The check that fails when verification itself raised (see :func:`unjudged_result`).
JUDGED_CHECK = "envelope.judged"


def unjudged_result(exc: BaseException) -> VerificationResult:
    """The verdict on an envelope whose verification raised ``exc``: malformed (class 1),
    since the verifier could not read it as an envelope it can judge. Fails closed."""
    detail = str(exc)[:300]
    return VerificationResult.from_checks(
        [
            Check.failed(
                JUDGED_CHECK,
                _MALFORMED,
                f"the verifier could not judge this envelope: {type(exc).__name__}"
                + (f": {detail}" if detail else ""),
            )
        ]
    )


def _verify_envelope(
    envelope_bytes: bytes,
    expected: ExpectedValues,
    *,
    now: datetime,
    trust: TrustStore | None,
    crl: bytes | None,
    shard: ShardPosition | None,
    verifier: Verifier | None,
) -> VerificationResult:
    try:
        envelope = _parse_any_envelope(envelope_bytes)
    except MalformedError as exc:
        checks = [Check.from_error("envelope.parse", exc)]
        checks.append(
            Check.not_run("envelope.cert-chain", _MALFORMED, "the envelope did not parse")
        )
        checks.extend(
            Check.not_run(name, cls, "the envelope did not parse") for name, cls in _RAW_STAGES
        )
        checks.extend(_not_run_later("the envelope did not parse"))
        return VerificationResult.from_checks(checks)
    if not isinstance(envelope, Envelope):
        from attestation.envelope.merged_verification import verify_merged

        # Shards of one chip carry one certChain: it is read, and its chain validated (the
        # Verifier's memo), once per merged envelope.
        chains: dict[str, _Chain] = {}

        def verify_one(part: Envelope) -> tuple[VerificationResult, CheckedShard | None]:
            return _verify_parsed(
                part,
                expected,
                now=now,
                trust=trust,
                crl=crl,
                shard=None,
                expectations=False,
                verifier=verifier,
                chains=chains,
            )

        return verify_merged(envelope, expected, verify_shard=verify_one, shard=shard)
    return verify_parsed_envelope(
        envelope, expected, now=now, trust=trust, crl=crl, shard=shard, verifier=verifier
    )


def _parse_any_envelope(data: bytes) -> AnyEnvelope:
    """:func:`attestation.envelope.merged.parse_any_envelope`, which loads the merged
    envelope's model only for a document of another kind than a plain envelope."""
    document = load_envelope_object(data)
    if document.get("kind") == ENVELOPE_KIND:
        return validate_parsed_envelope(document, what="envelope")
    from attestation.envelope.merged import any_envelope

    return any_envelope(document)


def verify_parsed_envelope(
    envelope: Envelope,
    expected: ExpectedValues,
    *,
    now: datetime,
    trust: TrustStore | None = None,
    crl: bytes | None = None,
    shard: ShardPosition | None = None,
    expectations: bool = True,
    verifier: Verifier | None = None,
) -> VerificationResult:
    """The checks of one parsed envelope; without ``expectations`` only classes 1-7 (the
    checks of a shard inside a merged envelope, whose expectations apply to the merge)."""
    result, _ = _verify_parsed(
        envelope,
        expected,
        now=now,
        trust=trust,
        crl=crl,
        shard=shard,
        expectations=expectations,
        verifier=verifier,
    )
    return result


def _verify_parsed(
    envelope: Envelope,
    expected: ExpectedValues,
    *,
    now: datetime,
    trust: TrustStore | None,
    crl: bytes | None,
    shard: ShardPosition | None,
    expectations: bool,
    verifier: Verifier | None,
    chains: dict[str, _Chain] | None = None,
) -> tuple[VerificationResult, CheckedShard | None]:
    """:func:`verify_parsed_envelope`, and a shard envelope's checked result when its
    ``binding.shard-result`` check passed (what a merged envelope's merge reads).

    ``chains``: the certificate chains read so far, by ``certChain`` text, with the verifier
    made for each (a merged envelope's shards share them)."""
    is_shard = envelope.binding.shard is not None
    checks = [
        Check.passed(
            "envelope.parse",
            _MALFORMED,
            f"{envelope.kind} {envelope.api_version}, run {envelope.run_id}",
        )
    ]
    base = trust if trust is not None else TrustStore.amd()
    text = envelope.evidence.cert_chain
    known = None if chains is None else chains.get(text)
    try:
        certificates = (
            known.certificates if known is not None else load_certificates(text.encode("ascii"))
        )
    except (AttestationError, UnicodeEncodeError) as exc:
        checks.append(Check.failed("envelope.cert-chain", _MALFORMED, f"evidence.certChain: {exc}"))
        checks.extend(Check.not_run(name, cls, "no endorsement") for name, cls in _RAW_STAGES)
        checks.extend(_not_run_later("no endorsement", expectations=expectations, shard=is_shard))
        return VerificationResult.from_checks(checks), None
    checks.append(
        Check.passed(
            "envelope.cert-chain",
            _MALFORMED,
            f"{len(certificates)} certificate(s), the first is the endorsement",
        )
    )
    if verifier is None and known is not None:
        verifier = known.verifier
    if verifier is None:
        store = _with_pinned_simulated_root(base, certificates, expected)
        verifier = Verifier(store, policy=expected.policy, crl=crl, workload_claim=True)
        if chains is not None:
            chains[text] = _Chain(certificates, verifier)
    evidence = _checked_evidence(envelope, certificates, verifier, expected, now=now)
    checks.extend(evidence.checks)
    raw = evidence.snp
    if raw is None or not evidence.authentic or raw.report is None or raw.chain is None:
        report = None if raw is None else raw.report
        product = None if raw is None else raw.product_line
        why = "the evidence is not authentic"
        checks.extend(_not_run_later(why, expectations=expectations, shard=is_shard))
        return VerificationResult.from_checks(checks, report, product), None

    # The chain that verified says which root it reached: only AMD's may be labelled sev-snp.
    platform = raw.result().platform
    assert platform is not None  # the report is authentic
    binding_checks = _binding_checks(envelope, raw.report, bound=evidence.bound, platform=platform)
    checked = None
    if is_shard:
        shard_result_check, checked = _shard_result_check(envelope, binding_checks)
        binding_checks.append(shard_result_check)
    checks.extend(binding_checks)
    if expectations and any(check.ok is False for check in binding_checks):
        checks.extend(
            Check.not_run(name, _EXPECTATION, "the binding does not hold")
            for name in EXPECTATION_CHECKS
        )
    elif expectations:
        checks.extend(expectation_checks(envelope.binding, expected))
        checks.append(shard_check(envelope.binding.shard, expected, shard))
    return VerificationResult.from_checks(checks, raw.report, raw.product_line, raw.chain), checked


@dataclass(frozen=True, slots=True)
class _Evidence:
    """The checks of an envelope's evidence, its SNP report's, and the REPORT_DATA value the
    evidence binds (the report's own, or an az-snp-vtpm quote's extraData)."""

    checks: list[Check]
    snp: ReportChecks | None
    authentic: bool
    bound: bytes


def _checked_evidence(
    envelope: Envelope,
    certificates: tuple[x509.Certificate, ...],
    verifier: Verifier,
    expected: ExpectedValues,
    *,
    now: datetime,
) -> _Evidence:
    """The raw-report checks of ``sev-snp`` evidence, or every az-snp-vtpm check (whose quote
    must carry this envelope's binding hash), then the init-data pin when the tenant set one."""
    evidence = envelope.evidence
    pin = None if expected.init_data_digest is None else bytes.fromhex(expected.init_data_digest)
    if evidence.vtpm is None:
        raw = verifier.check(evidence.report_bytes(), certificates, now=now)
        checks = list(raw.checks)
        if pin is not None and raw.authentic and raw.report is not None:
            checks.append(host_data_init_data_check(raw.report.host_data, pin))
        bound = b"" if raw.report is None else raw.report.report_data
        return _Evidence(checks, raw, raw.authentic, bound)
    from attestation.abi.tpm import parse_signature
    from attestation.verify.az_vtpm import VtpmEvidence, check_vtpm_evidence

    vtpm = evidence.vtpm
    nonce = report_data_for(envelope.binding, evidence.report_data_encoding)
    try:
        parts = VtpmEvidence(
            hcl_report=evidence.report_bytes(),
            quote=vtpm.quote_bytes(),
            signature=parse_signature(vtpm.signature_bytes()),
            pcrs=tuple(bytes.fromhex(pcr) for pcr in vtpm.pcrs),
            format_version=vtpm.format_version,
        )
    except AttestationError as exc:
        checks = [Check.from_error("quote.parse", exc)]
        checks.extend(Check.not_run(name, cls, "no evidence") for name, cls in _RAW_STAGES)
        return _Evidence(checks, None, authentic=False, bound=b"")
    out = check_vtpm_evidence(
        parts, certificates, verifier=verifier, nonce=nonce, now=now, init_data_digest=pin
    )
    snp = out.snp
    authentic = snp is not None and snp.authentic and out.quote_authentic
    bound = out.quote.extra_data if out.quote is not None else b""
    return _Evidence(out.checks, snp, authentic, bound)


def host_data_init_data_check(host_data: bytes, init_data_digest: bytes) -> Check:
    """``workload.init-data`` of SEV-SNP evidence: Kata puts the init-data digest in HOST_DATA."""
    name = "workload.init-data"
    if host_data == init_data_digest:
        return Check.passed(
            name, FailureClass.WORKLOAD_IDENTITY, "HOST_DATA = the init-data digest"
        )
    return Check.failed(
        name,
        FailureClass.WORKLOAD_IDENTITY,
        f"HOST_DATA {host_data.hex()} is not the pinned init-data digest {init_data_digest.hex()}",
    )


@dataclass(frozen=True, slots=True)
class _Chain:
    """A certChain read once, and the verifier made for it."""

    certificates: tuple[x509.Certificate, ...]
    verifier: Verifier


def _shard_result_check(
    envelope: Envelope, binding_checks: Sequence[Check]
) -> tuple[Check, CheckedShard | None]:
    """``binding.shard-result`` of a shard envelope: its (bound) result is a shard result of
    its binding's position, corpus and evaluation, whose partials decode and check."""
    position = envelope.binding.shard
    assert position is not None
    if any(check.ok is False for check in binding_checks):
        return Check.not_run(SHARD_RESULT_CHECK, _BINDING, "the binding does not hold"), None
    if envelope.result is None:
        return (
            Check.passed(
                SHARD_RESULT_CHECK,
                _BINDING,
                "no result in the envelope: fetch it to merge or check the shard's partials",
            ),
            None,
        )
    from attestation.envelope.merged import checked_shard
    from attestation.scoring.shards import ShardMergeError

    where = f"shard {position.index} of {position.count}"
    try:
        checked = checked_shard(envelope, where=where)
    except ShardMergeError as exc:
        return Check.failed(SHARD_RESULT_CHECK, _BINDING, str(exc)), None
    result = checked.result
    return (
        Check.passed(
            SHARD_RESULT_CHECK,
            _BINDING,
            f"{where}: cases {result.first_case}..{result.end_case - 1} of "
            f"{result.case_count}, the partials of {len(result.runs)} runs",
        ),
        checked,
    )


def _with_pinned_simulated_root(
    base: TrustStore, certificates: tuple[x509.Certificate, ...], expected: ExpectedValues
) -> TrustStore:
    """Trust the simulated roots from the chain whose fingerprints the tenant pinned (each of
    them: a chain may carry several)."""
    pinned = set(expected.simulated_roots)
    store = base
    for certificate in certificates:
        if fingerprint(certificate) in pinned:
            try:
                store = store.with_simulated_root(certificate)
            except AttestationError:
                continue  # an AMD certificate listed as "simulated", or unreadable: not trusted
    return store


def platform_of_chain(certificates: Sequence[x509.Certificate], *, now: datetime) -> Platform:
    """``sev-snp`` when the endorsement chains to AMD's pinned roots at ``now``, else
    ``simulated``. Only an AMD chain may ever be labelled real hardware."""
    if not certificates:
        return "simulated"
    try:
        leaf = endorsement_from_certificate(certificates[0])
    except AttestationError:
        return "simulated"
    lines = [leaf.product_line] if leaf.product_line is not None else list(ProductLine)
    for line in lines:
        try:
            verify_chain(
                leaf, line, trust=TrustStore.amd(), now=now, intermediates=certificates[1:]
            )
        except AttestationError:
            continue
        return "sev-snp"
    return "simulated"


def _binding_checks(
    envelope: Envelope, report: AttestationReport, *, bound: bytes, platform: Platform
) -> list[Check]:
    """``bound``: the REPORT_DATA value the evidence binds (the SNP report's REPORT_DATA, or
    the extraData of an az-snp-vtpm quote)."""
    binding = envelope.binding
    encoding = envelope.evidence.report_data_encoding
    expected_report_data = report_data_for(binding, encoding)
    where = "REPORT_DATA" if envelope.evidence.vtpm is None else "the vTPM quote's extraData"
    checks = []
    if report_data_matches(expected_report_data, bound):
        checks.append(
            Check.passed(
                "binding.report-data",
                _BINDING,
                f"{where} = {encoding} of the canonical binding",
            )
        )
    else:
        checks.append(
            Check.failed(
                "binding.report-data",
                _BINDING,
                f"{where} {bound.hex()} is not the {encoding} binding of this "
                f"envelope ({expected_report_data.hex()}): the binding or the report was changed",
            )
        )

    mismatches = []
    pairs = {
        "reportData": (envelope.report_data, bound.hex()),
        "measurement": (envelope.measurement, report.measurement.hex()),
        "hostData": (envelope.host_data, report.host_data.hex()),
        "runId": (envelope.run_id, binding.run_id),
        "tenant": (envelope.tenant, binding.tenant),
        "platform": (envelope.platform, platform),
    }
    for key, (claimed, actual) in pairs.items():
        if claimed != actual:
            mismatches.append(f"{key} says {claimed!r} but the evidence says {actual!r}")
    if mismatches:
        checks.append(Check.failed("binding.envelope-fields", _BINDING, "; ".join(mismatches)))
    else:
        checks.append(
            Check.passed("binding.envelope-fields", _BINDING, "convenience fields equal the report")
        )

    if envelope.result is None:
        checks.append(
            Check.passed(
                "binding.result-digest",
                _BINDING,
                "no result in the envelope; resultDigest is bound, fetch the result separately",
            )
        )
    else:
        try:
            actual_digest = result_digest(envelope.result)
        except AttestationError as exc:
            actual_digest = f"<not canonicalizable: {exc}>"
        if actual_digest == binding.result_digest:
            checks.append(
                Check.passed("binding.result-digest", _BINDING, f"result digest {actual_digest}")
            )
        else:
            checks.append(
                Check.failed(
                    "binding.result-digest",
                    _BINDING,
                    f"the result's digest is {actual_digest}, the binding says "
                    f"{binding.result_digest}: the result was changed",
                )
            )
    return checks


def _not_run_later(why: str, *, expectations: bool = True, shard: bool = False) -> list[Check]:
    names = (*_BINDING_CHECKS, SHARD_RESULT_CHECK) if shard else _BINDING_CHECKS
    later = [Check.not_run(name, _BINDING, why) for name in names]
    if expectations:
        later.extend(Check.not_run(name, _EXPECTATION, why) for name in EXPECTATION_CHECKS)
    return later
