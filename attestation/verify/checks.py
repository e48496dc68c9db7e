"""Check outcomes and the verification result built from them.

Every verification step yields a :class:`Check`; a :class:`VerificationResult` is just the
ordered tuple of checks plus what was parsed. The exit code is that of the first failing
check's class (checks are appended in the architecture's order), so further stages such as
envelope binding (class 7) and expectations (class 8) are added by appending checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from attestation.abi.product import ProductLine
from attestation.abi.report import AttestationReport
from attestation.contracts import Platform
from attestation.endorsement.chain import VerifiedChain
from attestation.errors import AttestationError, FailureClass
from attestation.exit_codes import EXIT_CODES, VERIFIED


@dataclass(frozen=True, slots=True)
class Check:
    """One verification step. ``ok`` is None when the step did not run (an earlier stage failed)."""

    name: str
    failure_class: FailureClass
    ok: bool | None
    detail: str

    # Positional arguments: a verification builds a few dozen checks (benchmarks/verify.py).
    @classmethod
    def passed(cls, name: str, failure_class: FailureClass, detail: str) -> Check:
        return cls(name, failure_class, True, detail)  # noqa: FBT003 - the field `ok`

    @classmethod
    def failed(cls, name: str, failure_class: FailureClass, detail: str) -> Check:
        return cls(name, failure_class, False, detail)  # noqa: FBT003 - the field `ok`

    @classmethod
    def not_run(cls, name: str, failure_class: FailureClass, why: str) -> Check:
        return cls(name, failure_class, ok=None, detail=f"not run: {why}")

    @classmethod
    def from_error(cls, name: str, error: AttestationError) -> Check:
        """A failed check carrying an error's class and message."""
        return cls(name, error.failure_class, ok=False, detail=str(error))

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "class": self.failure_class.value,
            "ok": self.ok,
            "detail": self.detail,
        }


#: How a verdict that rests on a simulated root says so: nobody may mistake operator-signed
#: evidence for AMD's.
SIMULATED_VERDICT: Final = "SIMULATED \N{EM DASH} not AMD hardware"


#: The checks of the guest's identity whose "not checked" the one-line verdict states.
_IDENTITY_CHECKS: Final = frozenset({"workload.measurement", "workload.host-data"})


@dataclass(frozen=True, slots=True)
class VerificationResult:
    """The ordered checks of one verification, the report they were about (if it parsed) and
    the certificate chain that endorses it (when the chain and the signature verified)."""

    checks: tuple[Check, ...]
    report: AttestationReport | None = None
    product_line: ProductLine | None = None
    chain: VerifiedChain | None = None

    @classmethod
    def from_checks(
        cls,
        checks: Iterable[Check],
        report: AttestationReport | None = None,
        product_line: ProductLine | None = None,
        chain: VerifiedChain | None = None,
    ) -> VerificationResult:
        return cls(tuple(checks), report, product_line, chain)

    @property
    def platform(self) -> Platform | None:
        """``sev-snp`` when the chain reached AMD's pinned roots, ``simulated`` when it reached
        a pinned simulated root; None when no chain verified."""
        if self.chain is None:
            return None
        return "simulated" if self.chain.simulated else "sev-snp"

    @property
    def simulated(self) -> bool:
        """Whether the verdict rests on a simulated root (operator-signed, not AMD hardware)."""
        return self.chain is not None and self.chain.simulated

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.ok is False)

    @property
    def ok(self) -> bool:
        """Verified: at least one check ran, none failed and none was left unrun."""
        return bool(self.checks) and all(check.ok is True for check in self.checks)

    @property
    def failure_class(self) -> FailureClass | None:
        """The class of the first failing check, in check order; None when verified."""
        failed = self.failed_checks
        if failed:
            return failed[0].failure_class
        if not self.ok:  # nothing ran, or a step was skipped without a failure: fail closed
            return FailureClass.USAGE
        return None

    @property
    def exit_code(self) -> int:
        failure = self.failure_class
        return VERIFIED if failure is None else EXIT_CODES[failure]

    def summary(self) -> str:
        """A one-line verdict, then one line per failed check (``verify-attested-run``'s text)."""
        if self.ok:
            report = self.report
            what = ""
            if report is not None:
                signer = report.signer_kind.value if report.signer_kind else "unsigned"
                what = f" (report version {report.version}, {self.product_line}, {signer})"
            # A verdict never reads as plain VERIFIED when the guest's identity was not checked.
            # A merged envelope names each shard's checks ``shards[i].workload.measurement``.
            unpinned = list(
                dict.fromkeys(
                    check.detail.partition(" not checked")[0]
                    for check in self.checks
                    if check.name.rpartition("].")[2] in _IDENTITY_CHECKS
                    and " not checked" in check.detail
                )
            )
            if unpinned:
                what += f"; {' and '.join(unpinned)} not checked (not pinned)"
            if self.simulated:
                return f"VERIFIED ({SIMULATED_VERDICT}){what}\n"
            return f"VERIFIED{what}\n"
        failure = self.failure_class or FailureClass.USAGE
        lines = [f"NOT VERIFIED: {failure.value} (exit {self.exit_code})"]
        lines.extend(
            f"  FAILED {check.name} [{check.failure_class.value}]: {check.detail}"
            for check in self.failed_checks
        )
        return "\n".join(lines) + "\n"

    def to_json_dict(self) -> dict[str, Any]:
        """The ``--json`` document: verdict, exit code, every check and the decoded report."""
        failure = self.failure_class
        return {
            "verified": self.ok,
            "simulated": self.simulated,
            "exitCode": self.exit_code,
            "failureClass": None if failure is None else failure.value,
            "checks": [check.to_json_dict() for check in self.checks],
            "report": None if self.report is None else self.report.to_json_dict(self.product_line),
        }
