"""Operator commands around evidence: ``vcek fetch``, ``measure`` and ``init-data``.

``vcek fetch`` gets the chip's VCEK from AMD KDS for a report (current Kata hosts return no
certificates), verifies it against AMD's pinned roots and the report, and writes a PEM bundle
for ``run --endorsement-bundle``. ``measure`` and ``init-data`` compute the reference values a
tenant puts in its expected-values file (``measurements`` and ``hostData``).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from attestation.abi.product import ProductLine
from attestation.tenant.fsutil import atomic_write
from runner.commands.job_params import add_job_arguments, replay_spec
from runner.commands.parsing import (
    add_actions,
    add_ca_bundle,
    add_command,
    input_file,
    output_dir,
    output_file,
)
from runner.errors import UsageError
from runner.evidence.kds import (
    DEFAULT_MAX_WAIT,
    DEFAULT_TIMEOUT,
    KDS_BASE_URL,
    KdsClient,
    fetch_vcek,
)
from runner.exit_codes import Family
from runner.k8s.job import build_replay
from runner.reference.initdata import ANNOTATION
from runner.reference.measure import (
    AGENT_REST_PARAMETER,
    VCPU_TYPES,
    VMM_NAMES,
    MeasureInputs,
    expected_measurement,
    measurements_snippet,
)

if TYPE_CHECKING:
    # argparse has no public name for the type add_subparsers() returns.
    from runner.commands import Subparsers

MEASURE_EPILOG = f"""\
The kernel command line (--append) must be exactly what QEMU received, including what the
pod adds through annotations: {AGENT_REST_PARAMETER} (required for --evidence coco-aa)
and the dm-verity parameters of the guest image. --vcpus is the number of vCPUs the VM boots
with: with Kata's static sandbox sizing, default_vcpus plus the pod's CPU limits rounded up
(default_vcpus=1 and limits.cpu=2 give 3). Read the real values from the QEMU command line Kata
logs (journalctl -t kata: -bios, -kernel, -initrd, -append, -smp). See docs/operator.md."""


def register(subparsers: Subparsers) -> None:
    _register_vcek(subparsers)
    _register_measure(subparsers)
    _register_initdata(subparsers)


def _register_vcek(subparsers: Subparsers) -> None:
    vcek = add_command(
        subparsers,
        "vcek",
        summary="VCEK certificates from AMD KDS",
        description="Current Kata hosts return no certificates with a report; the VCEK comes "
        "from AMD's Key Distribution Service.",
        family=Family.REFERENCE,
    )
    actions = add_actions(vcek)
    fetch = add_command(
        actions,
        "fetch",
        summary="download, verify and cache the VCEK for a report",
        description="Fetch the VCEK that signed REPORT from AMD KDS, check it against AMD's "
        "pinned roots,\\nthe report's REPORTED_TCB, CHIP_ID and signature, and write a PEM "
        "bundle (VCEK, ASK,\\nARK) for run --endorsement-bundle.",
        family=Family.REFERENCE,
    )
    fetch.add_argument(
        "--report",
        type=input_file("--report"),
        required=True,
        metavar="FILE",
        help="raw 1184-byte report",
    )
    fetch.add_argument(
        "--product",
        choices=[p.value for p in ProductLine],
        help="product line (required for version 2 reports, which carry no CPUID)",
    )
    fetch.add_argument("--kds-url", default=KDS_BASE_URL, metavar="URL", help="KDS base URL")
    fetch.add_argument(
        "--cache-dir",
        type=output_dir("--cache-dir", create=True),
        metavar="DIR",
        help="reuse and keep verified VCEKs here",
    )
    fetch.add_argument(
        "--out",
        type=output_file("--out"),
        metavar="FILE",
        help="write the PEM bundle here instead of standard output",
    )
    fetch.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="seconds per HTTP request",
    )
    fetch.add_argument(
        "--max-wait",
        type=float,
        default=DEFAULT_MAX_WAIT,
        metavar="SECONDS",
        help="longest Retry-After to honour on HTTP 429 before giving up",
    )
    add_ca_bundle(fetch)
    fetch.set_defaults(handler=handle_vcek_fetch)


def _register_measure(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "measure",
        summary="compute the launch MEASUREMENT a genuine pod VM must report",
        description="Uses sev-snp-measure on the guest firmware, kernel, initrd and command line.",
        epilog=MEASURE_EPILOG,
        family=Family.REFERENCE,
    )
    parser.add_argument(
        "--ovmf",
        type=input_file("--ovmf"),
        required=True,
        metavar="FILE",
        help="OVMF firmware (Kata: AMDSEV.fd)",
    )
    parser.add_argument(
        "--kernel",
        type=input_file("--kernel"),
        metavar="FILE",
        help="guest kernel (measured direct boot)",
    )
    parser.add_argument(
        "--initrd", type=input_file("--initrd"), metavar="FILE", help="guest initrd, if any"
    )
    parser.add_argument("--append", metavar="CMDLINE", help="the exact kernel command line")
    parser.add_argument("--vcpus", type=int, required=True, help="vCPUs the VM boots with")
    parser.add_argument(
        "--vcpu-type", default="EPYC-v4", choices=VCPU_TYPES, metavar="TYPE", help="vCPU model"
    )
    parser.add_argument(
        "--guest-features",
        type=lambda text: int(text, 0),
        default=0x1,
        metavar="N",
        help="VMSA SEV_FEATURES (default: 0x1; 0x21 for host kernels 6.6-6.7)",
    )
    parser.add_argument(
        "--vmm-type", default="QEMU", choices=VMM_NAMES, help="the VMM that launches the guest"
    )
    parser.add_argument(
        "--ovmf-hash", metavar="HEX", help="precomputed OVMF digest instead of hashing --ovmf"
    )
    parser.add_argument(
        "--emit-expected",
        action="store_true",
        help='print {"measurements": [...]} for the expected-values file instead of the hex',
    )
    parser.set_defaults(handler=handle_measure)


def _register_initdata(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "init-data",
        summary="the CoCo init-data of a replay Job, its HOST_DATA and the pod annotation",
        description=f"""\
Write the init-data that `submit` puts into the Job with the same run parameters: an agent
policy that admits exactly that Job's replay container, the attestation-agent config and a
CDH config whose image policy admits only --image. Prints its HOST_DATA and the value of the
{ANNOTATION} annotation.""",
        family=Family.REFERENCE,
    )
    parser.add_argument("--run-id", required=True, help="run identifier")
    parser.add_argument("--tenant", required=True, help="tenant identifier (a DNS label)")
    parser.add_argument(
        "--checksum", required=True, metavar="sha256:HEX", help="expected corpus checksum"
    )
    add_job_arguments(parser)
    parser.add_argument(
        "--out",
        type=output_file("--out"),
        required=True,
        metavar="FILE",
        help="init-data TOML to write",
    )
    parser.add_argument(
        "--emit-expected",
        action="store_true",
        help='print {"hostData": [...]} for the expected-values file',
    )
    parser.set_defaults(handler=handle_initdata)


def handle_vcek_fetch(args: argparse.Namespace) -> int:
    try:
        report = args.report.read_bytes()
    except OSError as exc:
        raise UsageError(f"--report {args.report}: {exc.strerror or exc}") from exc
    client = KdsClient(
        args.kds_url, timeout=args.timeout, max_wait=args.max_wait, ca_bundle=args.ca_bundle
    )
    fetched = fetch_vcek(
        report,
        product=ProductLine(args.product) if args.product else None,
        client=client,
        cache_dir=args.cache_dir,
    )
    bundle = fetched.bundle_pem()
    if args.out:
        atomic_write(args.out, bundle)
        source = "cache" if fetched.from_cache else fetched.url
        print(f"VCEK verified ({source}); bundle written to {args.out}")
    else:
        print(bundle.decode("ascii"), end="")
    return 0


def handle_measure(args: argparse.Namespace) -> int:
    measurement = expected_measurement(
        MeasureInputs(
            ovmf=args.ovmf,
            vcpus=args.vcpus,
            kernel=args.kernel,
            initrd=args.initrd,
            append=args.append,
            vcpu_type=args.vcpu_type,
            guest_features=args.guest_features,
            vmm_type=args.vmm_type,
            ovmf_hash=args.ovmf_hash,
        )
    )
    if args.emit_expected:
        print(json.dumps(measurements_snippet(measurement), indent=2))
    else:
        print(measurement.hex())
    return 0


def handle_initdata(args: argparse.Namespace) -> int:
    initdata = build_replay(replay_spec(args, checksum=args.checksum)).init_data
    atomic_write(args.out, initdata.toml)
    if args.emit_expected:
        print(json.dumps(initdata.host_data_snippet(), indent=2))
        return 0
    print(f"init-data written to {args.out}")
    print(f"HOST_DATA  {initdata.host_data.hex()}")
    print(f"annotation {ANNOTATION}: {initdata.annotation_value}")
    return 0
