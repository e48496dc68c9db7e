"""The expected SEV-SNP launch MEASUREMENT, computed with the ``sev-snp-measure`` package.

What goes in, and why each matters on a Kata ``kata-qemu-snp`` node (Kata's
``configuration-qemu-snp.toml`` and the ``sev-snp-measure`` documentation):

* OVMF (``AMDSEV.fd``), kernel, initrd (optional) and the kernel command line: Kata boots
  with measured direct boot, so their SHA-256 digests sit in a page the PSP measures. The
  command line includes everything the pod adds through annotations, in particular
  ``agent.guest_components_rest_api=attestation`` (needed for ``--evidence coco-aa``) and the
  dm-verity root hash of the guest image.
* vCPU count: one VMSA per vCPU is measured. With Kata's static sandbox sizing the VM boots
  with ``default_vcpus + ceil(sum of container CPU limits)`` vCPUs.
* vCPU type (``EPYC-v4`` in Kata), guest features (VMSA SEV_FEATURES, 0x1 by default) and
  the VMM type.

The digest is only as right as these inputs: read them from the QEMU command line Kata logs
(``journalctl -t kata``: ``-bios``, ``-kernel``, ``-initrd``, ``-append``, ``-smp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from sevsnpmeasure import guest, vcpu_types
from sevsnpmeasure.sev_mode import SevMode
from sevsnpmeasure.vmm_types import VMMType

from runner.errors import InputError, UsageError

MEASUREMENT_SIZE: Final = 48
VCPU_TYPES: Final = tuple(sorted(vcpu_types.CPU_SIGS))
VmmName = Literal["QEMU", "ec2", "gce"]
VMM_NAMES: Final[tuple[VmmName, ...]] = ("QEMU", "ec2", "gce")
#: The attestation agent's REST switch; documented here because forgetting it in the
#: measured command line is the commonest reason for a MEASUREMENT mismatch.
AGENT_REST_PARAMETER: Final = "agent.guest_components_rest_api=attestation"


@dataclass(frozen=True, slots=True)
class MeasureInputs:
    """Everything that determines the launch digest of an SNP guest."""

    ovmf: Path
    vcpus: int
    kernel: Path | None = None
    initrd: Path | None = None
    append: str | None = None
    vcpu_type: str = "EPYC-v4"
    guest_features: int = 0x1
    vmm_type: VmmName = "QEMU"
    ovmf_hash: str | None = None
    """Precomputed OVMF digest (hex), as ``sev-snp-measure --snp-ovmf-hash``."""

    def __post_init__(self) -> None:
        if self.vcpus < 1:
            raise UsageError(f"--vcpus must be at least 1, got {self.vcpus}")
        if self.vcpu_type not in vcpu_types.CPU_SIGS:
            raise UsageError(
                f"unknown --vcpu-type {self.vcpu_type!r} (one of {', '.join(VCPU_TYPES)})"
            )
        if self.vmm_type not in VMM_NAMES:
            raise UsageError(f"unknown VMM type {self.vmm_type!r} ({', '.join(VMM_NAMES)})")
        if not 0 <= self.guest_features < (1 << 64):
            raise UsageError("--guest-features must be a 64-bit unsigned value")
        if self.kernel is None and (self.initrd is not None or self.append is not None):
            raise UsageError("--initrd and --append need --kernel (measured direct boot)")
        if self.ovmf_hash is not None:
            try:
                raw = bytes.fromhex(self.ovmf_hash)
            except ValueError as exc:
                raise UsageError("--ovmf-hash must be hex") from exc
            if len(raw) != MEASUREMENT_SIZE:
                raise UsageError(f"--ovmf-hash must be {MEASUREMENT_SIZE} bytes of hex")


def expected_measurement(inputs: MeasureInputs) -> bytes:
    """The 48-byte launch MEASUREMENT for ``inputs``."""
    for label, path in (
        ("--ovmf", inputs.ovmf),
        ("--kernel", inputs.kernel),
        ("--initrd", inputs.initrd),
    ):
        if path is not None and not path.is_file():
            raise InputError(f"{label} {path}: no such file")
    # gce guests are measured without a CPU signature (sev-snp-measure's own rule).
    vcpu_sig = None if inputs.vmm_type == "gce" else vcpu_types.CPU_SIGS[inputs.vcpu_type]
    try:
        digest: bytes = guest.calc_launch_digest(
            SevMode.SEV_SNP,
            inputs.vcpus,
            vcpu_sig,
            str(inputs.ovmf),
            str(inputs.kernel) if inputs.kernel else None,
            # sev-snp-measure hashes b"" for a missing initrd only when given a falsy value.
            str(inputs.initrd) if inputs.initrd else None,
            inputs.append if inputs.kernel else None,
            inputs.guest_features,
            snp_ovmf_hash_str=inputs.ovmf_hash or "",
            vmm_type=VMMType[inputs.vmm_type],
        )
    except (RuntimeError, ValueError, OSError, AssertionError) as exc:
        raise InputError(f"cannot compute the launch measurement: {exc}") from exc
    if len(digest) != MEASUREMENT_SIZE:
        raise InputError(f"sev-snp-measure returned {len(digest)} bytes, not {MEASUREMENT_SIZE}")
    return digest


def measurements_snippet(measurement: bytes) -> dict[str, list[str]]:
    """The expected-values key for this measurement: ``{"measurements": ["<96 hex>"]}``."""
    return {"measurements": [measurement.hex()]}
