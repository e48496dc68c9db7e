"""The verification policy: what a tenant accepts once a report is authentic.

A :class:`Policy` is a frozen pydantic model with camelCase JSON keys. Every key is optional
and ``{}`` is the secure default; unknown keys are rejected (a typo must not weaken a policy).

=========================== ============ ===================================================
key                         default      meaning
=========================== ============ ===================================================
allowDebug                  false        accept POLICY.DEBUG = 1
allowMigrationAgent         false        accept POLICY.MIGRATE_MA = 1
allowedVmpl                 [0]          accepted VMPL values (0..3)
allowProvisionalFirmware    false        false: COMMITTED_TCB == CURRENT_TCB and committed
                                         firmware == current firmware. true: committed may be
                                         older, but never newer, than current
minimumTcb                  none         REPORTED_TCB must be >= this, component-wise
minimumFirmware             none         "major.minor.build": CURRENT *and* COMMITTED
                                         firmware versions must be >= it
allowedProducts             any          ["Milan", "Genoa", "Turin"]
allowedSigners              both         ["vcek", "vlek"]
measurements                not checked  allowed MEASUREMENT values (96 hex chars); on AMD
                                         hardware required when any other workload key is
                                         pinned, or in envelope mode (see below)
acceptAnyMeasurement        false        the explicit opt-out of that requirement: any guest
                                         firmware, kernel, initrd and command line accepted
hostData                    not checked  allowed HOST_DATA values (64 hex chars)
idKeyDigests                not checked  allowed ID_KEY_DIGEST values (96 hex chars)
authorKeyDigests            not checked  allowed AUTHOR_KEY_DIGEST values (96 hex chars)
rejectUnknownPlatformInfo   false        fail on PLATFORM_INFO bits this verifier cannot name
=========================== ============ ===================================================

``minimumTcb`` has two shapes. Flat, for every product line::

    {"minimumTcb": {"bl": 7, "tee": 0, "snp": 14, "ucode": 72}}

(``fmc`` in the flat shape applies only to Turin, the only layout that has it), or keyed by
product line::

    {"minimumTcb": {"Milan": {"snp": 24}, "Genoa": {"snp": 23}, "Turin": {"fmc": 0, "snp": 2}}}

With the keyed shape, a report of a product line that is not listed fails (fail closed:
restrict ``allowedProducts`` or list the product). Components are compared one by one,
never as a single integer.

MEASUREMENT is the digest of what the guest booted (firmware, kernel, initrd, command line: the
Kata agent that enforces the policy HOST_DATA names). HOST_DATA alone proves nothing on
hardware: Kata's stock confidential guest image can be booted with a genuine HOST_DATA value and
no init-data, and nothing in it compares the two. So on AMD hardware (not a simulated root)
``workload.measurement`` fails when ``measurements`` is absent and either another workload key
is pinned or the caller verifies a workload claim (an envelope), unless ``acceptAnyMeasurement``
says the tenant gives that up; the verdict then says so.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Annotated, Final

from pydantic import (
    Field,
    field_validator,
)

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import AttestationReport, PlatformInfo
from attestation.abi.tcb import TcbVersion
from attestation.contracts import MAX_POLICY_BYTES, Hex32, Hex48, WireModel
from attestation.encoding.json_document import load_json_document
from attestation.errors import FailureClass
from attestation.verify.checks import Check

_PLATFORM: Final = FailureClass.PLATFORM_POLICY
_WORKLOAD: Final = FailureClass.WORKLOAD_IDENTITY


#: Strict types: a security policy does not coerce "yes" into true or "1" into 1.
Byte = Annotated[int, Field(strict=True, ge=0, le=0xFF)]
Flag = Annotated[bool, Field(strict=True)]
_FIRMWARE_RE: Final = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")


class TcbMinimum(WireModel):
    """Minimum security patch levels; a component left out is not checked."""

    bl: Byte | None = None
    tee: Byte | None = None
    snp: Byte | None = None
    ucode: Byte | None = None
    #: Compared only on Turin (the only TCB layout with an FMC byte).
    fmc: Byte | None = None

    def shortfalls(self, tcb: TcbVersion) -> list[str]:
        """Every component of ``tcb`` below this minimum, as ``name actual < minimum``."""
        actual = tcb.security_components()
        out = []
        for name, minimum in self.model_dump(exclude_none=True).items():
            if name in actual and actual[name] < minimum:
                out.append(f"{name} {actual[name]} < {minimum}")
        return out


class Policy(WireModel):
    """What a tenant accepts (see the module docstring for every key and its default)."""

    allow_debug: Flag = False
    allow_migration_agent: Flag = False
    allowed_vmpl: tuple[Annotated[int, Field(strict=True, ge=0, le=3)], ...] = (0,)
    allow_provisional_firmware: Flag = False
    minimum_tcb: TcbMinimum | dict[ProductLine, TcbMinimum] | None = None
    minimum_firmware: str | None = None
    #: None: any product line.
    allowed_products: tuple[ProductLine, ...] | None = None
    allowed_signers: tuple[SignerKind, ...] = (SignerKind.VCEK, SignerKind.VLEK)
    #: None: MEASUREMENT is not checked.
    measurements: tuple[Hex48, ...] | None = None
    #: None: HOST_DATA is not checked.
    host_data: tuple[Hex32, ...] | None = None
    #: None: ID_KEY_DIGEST is not checked.
    id_key_digests: tuple[Hex48, ...] | None = None
    #: None: AUTHOR_KEY_DIGEST is not checked.
    author_key_digests: tuple[Hex48, ...] | None = None
    reject_unknown_platform_info: Flag = False
    #: The opt-out of pinning MEASUREMENT on hardware (see the module docstring).
    accept_any_measurement: Flag = False

    @field_validator(
        "measurements", "host_data", "id_key_digests", "author_key_digests", mode="before"
    )
    @classmethod
    def _lowercase_hex(cls, value: object) -> object:
        """Digests are compared as lowercase hex; tools print them in either case."""
        if isinstance(value, list | tuple):
            return [item.lower() if isinstance(item, str) else item for item in value]
        return value

    @field_validator("minimum_firmware")
    @classmethod
    def _firmware_format(cls, value: str | None) -> str | None:
        if value is not None:
            match = _FIRMWARE_RE.fullmatch(value)
            if match is None or any(int(part) > 0xFF for part in match.groups()):
                raise ValueError('must be "major.minor.build" with each part 0..255')
        return value

    @property
    def minimum_firmware_tuple(self) -> tuple[int, int, int] | None:
        if self.minimum_firmware is None:
            return None
        major, minor, build = (int(part) for part in self.minimum_firmware.split("."))
        return (major, minor, build)


#: The crypto-only policy: accepts any authentic report, whatever guest booted (for the
#: operator's own checks, tests and diagnostics; the platform policy is the tenant's).
CRYPTO_ONLY: Final = Policy(
    allow_debug=True,
    allow_migration_agent=True,
    allowed_vmpl=(0, 1, 2, 3),
    allow_provisional_firmware=True,
    accept_any_measurement=True,
)


def load_policy(data: bytes) -> Policy:
    """Parse a policy document (JSON).

    Raises:
        MalformedError: too large, not strict JSON, not an object, an unknown key or a bad value.
    """
    return load_json_document(data, Policy, what="policy", limit=MAX_POLICY_BYTES)


def _one_of(value: bytes, allowed: tuple[str, ...]) -> bool:
    return value.hex() in allowed


def evaluate_policy(
    report: AttestationReport,
    policy: Policy,
    *,
    product: ProductLine,
    signer: SignerKind,
    hardware: bool = False,
    workload_claim: bool = False,
) -> list[Check]:
    """Every policy check for an authentic report, each with its outcome (all violations).

    ``product`` and ``signer`` are the verified product line and signer kind (for a v2 report
    the product line comes from the certificate). ``hardware``: the report chains to AMD's
    roots (not a simulated one); ``workload_claim``: the verdict is about a workload (an
    envelope), so MEASUREMENT must be pinned on hardware even if nothing else is.
    """
    checks = [
        _debug(report, policy),
        _migration_agent(report, policy),
        _vmpl(report.vmpl, policy.allowed_vmpl),
        _provisional(report, policy, product),
        _minimum_tcb(report, policy, product),
        _minimum_firmware(report, policy),
        _products(policy.allowed_products, product),
        _signers(policy.allowed_signers, signer),
        _platform_info(report.platform_info, policy.reject_unknown_platform_info),
    ]
    if _measurement_unpinned(policy, hardware=hardware, workload_claim=workload_claim):
        checks.append(_unpinned_measurement(report.measurement))
        checks.extend(_workload_identity(report, policy)[1:])
    else:
        checks.extend(_workload_identity(report, policy))
    return checks


# Outcomes whose detail names no value are built once: a Check is immutable.
_DEBUG_OFF: Final = Check.passed("policy.debug", _PLATFORM, "POLICY.DEBUG is 0")
_DEBUG_ALLOWED: Final = Check.passed(
    "policy.debug", _PLATFORM, "POLICY.DEBUG is 1 (allowed by allowDebug)"
)
_DEBUG_REFUSED: Final = Check.failed(
    "policy.debug", _PLATFORM, "POLICY.DEBUG is 1: the host can read guest memory"
)
_MA_OFF: Final = Check.passed("policy.migration-agent", _PLATFORM, "POLICY.MIGRATE_MA is 0")
_MA_ALLOWED: Final = Check.passed(
    "policy.migration-agent", _PLATFORM, "POLICY.MIGRATE_MA is 1 (allowed)"
)
_MA_REFUSED: Final = Check.failed(
    "policy.migration-agent", _PLATFORM, "POLICY.MIGRATE_MA is 1: a migration agent is allowed"
)
_NO_MINIMUM_TCB: Final = Check.passed("policy.minimum-tcb", _PLATFORM, "no minimumTcb configured")
_NO_MINIMUM_FIRMWARE: Final = Check.passed(
    "policy.minimum-firmware", _PLATFORM, "no minimumFirmware configured"
)


def _debug(report: AttestationReport, policy: Policy) -> Check:
    if not report.policy.debug:
        return _DEBUG_OFF
    return _DEBUG_ALLOWED if policy.allow_debug else _DEBUG_REFUSED


def _migration_agent(report: AttestationReport, policy: Policy) -> Check:
    if not report.policy.migrate_ma:
        return _MA_OFF
    return _MA_ALLOWED if policy.allow_migration_agent else _MA_REFUSED


# The checks taking values (not the report) are pure functions of a policy and a few values a
# fleet shares: each outcome is built once (a Check is immutable).


@functools.lru_cache(maxsize=256)
def _vmpl(vmpl: int, allowed_vmpl: tuple[int, ...]) -> Check:
    allowed = list(allowed_vmpl)
    ok = vmpl in allowed_vmpl
    detail = f"VMPL {vmpl} {'in' if ok else 'not in'} allowedVmpl {allowed}"
    return Check("policy.vmpl", _PLATFORM, ok, detail)


def _firmware(major: int, minor: int, build: int) -> str:
    return f"{major}.{minor}.{build}"


def _provisional(report: AttestationReport, policy: Policy, product: ProductLine) -> Check:
    name = "policy.provisional-firmware"
    current_fw = (report.current_major, report.current_minor, report.current_build)
    committed_fw = (report.committed_major, report.committed_minor, report.committed_build)
    if report.committed_tcb == report.current_tcb and committed_fw == current_fw:
        return _committed_is_current(report.current_tcb, current_fw)
    current = report.tcb("current", product)
    committed = report.tcb("committed", product)
    describe = (
        f"COMMITTED_TCB {committed.components()} firmware {_firmware(*committed_fw)}, "
        f"CURRENT_TCB {current.components()} firmware {_firmware(*current_fw)}"
    )
    if not policy.allow_provisional_firmware:
        return Check.failed(name, _PLATFORM, f"provisional firmware not allowed: {describe}")
    if current.dominates(committed) and current_fw >= committed_fw:
        return Check.passed(name, _PLATFORM, f"provisional firmware allowed: {describe}")
    return Check.failed(name, _PLATFORM, f"committed is newer than current: {describe}")


@functools.lru_cache(maxsize=256)
def _committed_is_current(tcb: int, firmware: tuple[int, int, int]) -> Check:
    return Check.passed(
        "policy.provisional-firmware",
        _PLATFORM,
        f"COMMITTED_TCB == CURRENT_TCB ({tcb:#018x}), firmware {_firmware(*firmware)}",
    )


def _minimum_tcb(report: AttestationReport, policy: Policy, product: ProductLine) -> Check:
    name = "policy.minimum-tcb"
    minimum = policy.minimum_tcb
    if minimum is None:
        return _NO_MINIMUM_TCB
    if isinstance(minimum, dict):
        if product not in minimum:
            return Check.failed(
                name, _PLATFORM, f"minimumTcb lists no minimum for product line {product}"
            )
        minimum = minimum[product]
    reported = report.tcb("reported", product)
    shortfalls = minimum.shortfalls(reported)
    if shortfalls:
        return Check.failed(name, _PLATFORM, "REPORTED_TCB below minimum: " + ", ".join(shortfalls))
    return Check.passed(name, _PLATFORM, f"REPORTED_TCB {reported.components()} meets minimum")


def _minimum_firmware(report: AttestationReport, policy: Policy) -> Check:
    name = "policy.minimum-firmware"
    minimum = policy.minimum_firmware_tuple
    if minimum is None:
        return _NO_MINIMUM_FIRMWARE
    versions = {
        "current": (report.current_major, report.current_minor, report.current_build),
        "committed": (report.committed_major, report.committed_minor, report.committed_build),
    }
    below = [f"{k} {_firmware(*v)}" for k, v in versions.items() if v < minimum]
    if below:
        return Check.failed(
            name, _PLATFORM, f"firmware below {_firmware(*minimum)}: " + ", ".join(below)
        )
    return Check.passed(name, _PLATFORM, f"firmware meets {_firmware(*minimum)}")


@functools.lru_cache(maxsize=256)
def _products(allowed_products: tuple[ProductLine, ...] | None, product: ProductLine) -> Check:
    name = "policy.products"
    if allowed_products is None:
        return Check.passed(name, _PLATFORM, f"{product} (any product line allowed)")
    ok = product in allowed_products
    allowed = [p.value for p in allowed_products]
    return Check(name, _PLATFORM, ok, f"{product} {'in' if ok else 'not in'} {allowed}")


@functools.lru_cache(maxsize=256)
def _signers(allowed_signers: tuple[SignerKind, ...], signer: SignerKind) -> Check:
    ok = signer in allowed_signers
    allowed = [s.value for s in allowed_signers]
    return Check(
        "policy.signers", _PLATFORM, ok, f"{signer.value} {'in' if ok else 'not in'} {allowed}"
    )


@functools.lru_cache(maxsize=256)
def _platform_info(info: PlatformInfo, reject_unknown: bool) -> Check:
    name = "policy.platform-info"
    bits = info.unknown_bit_numbers()
    raw = f"PLATFORM_INFO {info.raw:#x}"
    if not bits:
        return Check.passed(name, _PLATFORM, f"{raw}: no unknown bits")
    detail = f"{raw}: unknown bits {bits}"
    if reject_unknown:
        return Check.failed(name, _PLATFORM, f"{detail} (rejectUnknownPlatformInfo)")
    return Check.passed(name, _PLATFORM, f"{detail} (reported, not rejected)")


#: (check name, report field, policy key) of each workload identity check, in order.
_WORKLOAD_ROWS: Final = (
    ("workload.measurement", "MEASUREMENT", "measurements"),
    ("workload.host-data", "HOST_DATA", "hostData"),
    ("workload.id-key-digest", "ID_KEY_DIGEST", "idKeyDigests"),
    ("workload.author-key-digest", "AUTHOR_KEY_DIGEST", "authorKeyDigests"),
)
_NOT_CHECKED: Final = tuple(
    Check.passed(name, _WORKLOAD, f"{field} not checked ({key} absent)")
    for name, field, key in _WORKLOAD_ROWS
)


_NOTHING_PINNED: Final = (None, None, None, None)

#: How a tenant gets the value to pin (the refusal names it).
PIN_MEASUREMENT_HINT: Final = (
    "pin the launch digest of the guest you trust: `attested-replay measure` computes it, "
    "`attested-replay expected --measurement` (or the measurements key) pins it"
)


def _measurement_unpinned(policy: Policy, *, hardware: bool, workload_claim: bool) -> bool:
    """Whether MEASUREMENT is missing where the verdict needs it (module docstring)."""
    if not hardware or policy.measurements is not None or policy.accept_any_measurement:
        return False
    others = (policy.host_data, policy.id_key_digests, policy.author_key_digests)
    return workload_claim or any(pinned is not None for pinned in others)


def _unpinned_measurement(measurement: bytes) -> Check:
    return Check.failed(
        "workload.measurement",
        _WORKLOAD,
        f"MEASUREMENT {measurement.hex()} is not pinned (measurements absent) on AMD hardware: "
        "any guest could have produced this report, Kata's stock image with the genuine "
        f"HOST_DATA too; {PIN_MEASUREMENT_HINT} (acceptAnyMeasurement: true gives this up)",
    )


_ANY_MEASUREMENT: Final = Check.passed(
    "workload.measurement",
    _WORKLOAD,
    "MEASUREMENT not checked (acceptAnyMeasurement: any guest firmware, kernel, initrd and "
    "command line accepted)",
)


def _workload_identity(report: AttestationReport, policy: Policy) -> Sequence[Check]:
    allowed_sets = (
        policy.measurements,
        policy.host_data,
        policy.id_key_digests,
        policy.author_key_digests,
    )
    if allowed_sets == _NOTHING_PINNED and not policy.accept_any_measurement:
        return _NOT_CHECKED
    values = (report.measurement, report.host_data, report.id_key_digest, report.author_key_digest)
    checks = []
    for (name, field, key), not_checked, value, allowed in zip(
        _WORKLOAD_ROWS, _NOT_CHECKED, values, allowed_sets, strict=True
    ):
        if allowed is None and key == "measurements" and policy.accept_any_measurement:
            checks.append(_ANY_MEASUREMENT)
        elif allowed is None:
            checks.append(not_checked)
        elif _one_of(value, allowed):
            checks.append(Check.passed(name, _WORKLOAD, f"{field} {value.hex()} in {key}"))
        else:
            checks.append(Check.failed(name, _WORKLOAD, f"{field} {value.hex()} not in {key}"))
    return checks
