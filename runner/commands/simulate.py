"""``attested-replay simulate``: the simulated AMD's root, and reports signed by it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import REPORT_SIZE
from attestation.errors import AttestationError
from attestation.tenant.fsutil import atomic_write, atomic_write_text
from runner.commands.parsing import add_actions, add_command, add_state_dir_argument, output_file
from runner.errors import UsageError
from runner.evidence.simulated import load_or_create_simulated_amd
from runner.exit_codes import Family

if TYPE_CHECKING:
    from runner.commands import Subparsers

_REPORT_DATA_SIZE = 64
_MEASUREMENT_SIZE = 48
_HOST_DATA_SIZE = 32
_MAX_VMPL = 3


DESCRIPTION = """\
The simulated AMD is an AMD-like PKI kept in the state directory (created on first use, never
replaced): a tenant accepts its reports only by pinning its root."""


def register(subparsers: Subparsers) -> None:
    parser = add_command(
        subparsers,
        "simulate",
        summary="the simulated AMD: its root certificate and reports signed by it",
        description=DESCRIPTION,
        family=Family.REPLAY,
    )
    commands = add_actions(parser)

    root = add_command(
        commands,
        "root",
        summary="print the simulated root's fingerprint (what a tenant pins)",
        description="The fingerprint (sha256: of the root's DER) goes in an expected-values "
        "file's simulatedRoots\n(attested-replay expected --simulated-root); the PEM file is "
        "what verify-attested-run\n--simulated-root takes for raw reports.",
        family=Family.REPLAY,
    )
    add_state_dir_argument(root)
    root.add_argument("--pem", action="store_true", help="print the root certificate (PEM) instead")
    root.add_argument(
        "--out",
        type=output_file("--out"),
        metavar="FILE",
        help="also write the root certificate (PEM) to this file",
    )
    root.set_defaults(handler=_root)

    report = add_command(
        commands,
        "report",
        summary="write a report signed by the simulated AMD",
        description="A 1184-byte SEV-SNP report with its certificate chain (VCEK/VLEK, "
        "intermediate, ARK), for\ntrying the raw-report verifier without SEV-SNP hardware.",
        family=Family.REPLAY,
    )
    add_state_dir_argument(report)
    report.add_argument(
        "--report-data",
        required=True,
        type=_hex_bytes(_REPORT_DATA_SIZE, pad=True),
        metavar="HEX",
        help="REPORT_DATA as hex, at most 64 bytes (shorter values are zero-padded)",
    )
    report.add_argument(
        "--out",
        required=True,
        type=output_file("--out"),
        metavar="FILE",
        help="where to write the report",
    )
    report.add_argument(
        "--endorsement-out",
        required=True,
        type=output_file("--endorsement-out"),
        metavar="FILE",
        help="where to write the PEM chain: VCEK/VLEK, then ASK/ASVK, then the simulated ARK",
    )
    report.add_argument(
        "--product",
        type=_product,
        default=ProductLine.MILAN,
        metavar="LINE",
        help="product line: Milan, Genoa or Turin (default: Milan)",
    )
    report.add_argument(
        "--measurement",
        type=_hex_bytes(_MEASUREMENT_SIZE),
        metavar="HEX",
        help="MEASUREMENT as 96 hex digits (default: a fixed simulated launch digest)",
    )
    report.add_argument(
        "--host-data",
        type=_hex_bytes(_HOST_DATA_SIZE),
        default=bytes(_HOST_DATA_SIZE),
        metavar="HEX",
        help="HOST_DATA as 64 hex digits (default: zero)",
    )
    report.add_argument(
        "--policy", type=_integer, default=0x30000, help="guest POLICY (default: 0x30000)"
    )
    report.add_argument("--vmpl", type=_integer, default=0, help="VMPL, 0 to 3")
    report.add_argument(
        "--signer",
        choices=[kind.value for kind in SignerKind],
        default=SignerKind.VCEK.value,
        help="the key that signs the report",
    )
    report.add_argument(
        "--report-version", type=_integer, default=5, metavar="N", help="report version, 2 to 5"
    )
    report.set_defaults(handler=_report)


def _root(args: argparse.Namespace) -> int:
    amd = load_or_create_simulated_amd(args.state_dir)
    if args.out is not None:
        atomic_write_text(args.out, amd.ark_pem)
    if args.pem:
        print(amd.ark_pem, end="")
    else:
        print(amd.root_fingerprint)
    return 0


def _report(args: argparse.Namespace) -> int:
    if not 0 <= args.vmpl <= _MAX_VMPL:
        raise UsageError(f"--vmpl {args.vmpl}: must be 0 to 3")
    amd = load_or_create_simulated_amd(args.state_dir)
    signer = SignerKind(args.signer)
    optional = {} if args.measurement is None else {"measurement": args.measurement}
    try:
        report = amd.sign_report(
            report_data=args.report_data,
            product_line=args.product,
            version=args.report_version,
            host_data=args.host_data,
            policy=args.policy,
            vmpl=args.vmpl,
            signer=signer,
            **optional,
        )
        chain = amd.endorsement_pem(report, product_line=args.product)
    except (AttestationError, ValueError) as exc:
        raise UsageError(f"cannot build that report: {exc}") from exc
    assert len(report) == REPORT_SIZE
    atomic_write(args.out, report)
    atomic_write_text(args.endorsement_out, chain)
    print(
        f"wrote {args.out} ({args.product.value} v{args.report_version} report signed by the "
        f"simulated {signer.value.upper()}) and {args.endorsement_out}; "
        f"simulated root {amd.root_fingerprint}"
    )
    return 0


def _product(text: str) -> ProductLine:
    for line in ProductLine:
        if text.lower() == line.value.lower():
            return line
    raise argparse.ArgumentTypeError(f"unknown product {text!r} (Milan, Genoa, Turin)")


def _hex_bytes(size: int, *, pad: bool = False) -> Callable[[str], bytes]:
    def parse(text: str) -> bytes:
        try:
            value = bytes.fromhex(text.removeprefix("0x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not hex") from None
        if len(value) == size or (pad and 0 < len(value) < size):
            return value.ljust(size, b"\0")
        expected = f"at most {size}" if pad else f"exactly {size}"
        raise argparse.ArgumentTypeError(f"must be {expected} bytes, got {len(value)}")

    return parse


def _integer(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
