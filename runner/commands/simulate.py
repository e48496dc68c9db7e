"""``attested-replay simulate``: the simulated AMD's root, and reports signed by it.

``simulate root`` prints the simulated ARK (PEM, or ``--fingerprint``) that a tenant pins with
``verify-attested-run --simulated-root``; ``simulate report`` writes a signed 1184-byte report
and its certificate chain (VCEK/VLEK, intermediate, ARK), for trying the raw-report verifier
without SEV-SNP hardware.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from attestation.abi.product import ProductLine, SignerKind
from attestation.abi.report import REPORT_SIZE
from attestation.errors import AttestationError
from runner.errors import UsageError
from runner.evidence.simulated import load_or_create_simulated_amd
from tenant.fsutil import atomic_write, atomic_write_text

if TYPE_CHECKING:
    from runner.commands import Subparsers

_REPORT_DATA_SIZE = 64
_MEASUREMENT_SIZE = 48
_HOST_DATA_SIZE = 32
_MAX_VMPL = 3


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="the simulated AMD: its root certificate and reports signed by it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="simulate_command", metavar="SUBCOMMAND")
    commands.required = True

    root = commands.add_parser("root", help="print the simulated ARK (the root a tenant pins)")
    _add_state_dir(root)
    root.add_argument(
        "--fingerprint", action="store_true", help='print "sha256:<hex of DER>" instead of PEM'
    )
    root.set_defaults(handler=_root)

    report = commands.add_parser("report", help="write a report signed by the simulated AMD")
    _add_state_dir(report)
    report.add_argument(
        "--report-data",
        required=True,
        type=_hex_bytes("--report-data", _REPORT_DATA_SIZE, pad=True),
        help="REPORT_DATA as hex, at most 64 bytes (shorter values are zero-padded)",
    )
    report.add_argument("--out", required=True, type=Path, help="where to write the report")
    report.add_argument(
        "--endorsement-out",
        required=True,
        type=Path,
        help="where to write the PEM chain: VCEK/VLEK, then ASK/ASVK, then the simulated ARK",
    )
    report.add_argument(
        "--product", type=_product, default=ProductLine.MILAN, help="Milan (default), Genoa, Turin"
    )
    report.add_argument(
        "--measurement",
        type=_hex_bytes("--measurement", _MEASUREMENT_SIZE),
        help="MEASUREMENT as 96 hex digits (default: a fixed simulated launch digest)",
    )
    report.add_argument(
        "--host-data",
        type=_hex_bytes("--host-data", _HOST_DATA_SIZE),
        default=bytes(_HOST_DATA_SIZE),
        help="HOST_DATA as 64 hex digits (default zero)",
    )
    report.add_argument(
        "--policy", type=_integer("--policy"), default=0x30000, help="guest POLICY (0x30000)"
    )
    report.add_argument("--vmpl", type=_integer("--vmpl"), default=0, help="VMPL 0..3 (0)")
    report.add_argument(
        "--signer", choices=[kind.value for kind in SignerKind], default=SignerKind.VCEK.value
    )
    report.add_argument(
        "--report-version", type=_integer("--report-version"), default=5, help="2..5 (5)"
    )
    report.set_defaults(handler=_report)


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="runner state directory (default: $ATTESTED_REPLAY_STATE_DIR, "
        "else $XDG_CACHE_HOME/attested-replay, else ~/.cache/attested-replay)",
    )


def _root(args: argparse.Namespace) -> int:
    amd = load_or_create_simulated_amd(args.state_dir)
    if args.fingerprint:
        print(amd.root_fingerprint)
    else:
        print(amd.ark_pem, end="")
    return 0


def _report(args: argparse.Namespace) -> int:
    if not 0 <= args.vmpl <= _MAX_VMPL:
        raise UsageError(f"--vmpl must be 0..3, got {args.vmpl}")
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


def _hex_bytes(option: str, size: int, *, pad: bool = False) -> Callable[[str], bytes]:
    def parse(text: str) -> bytes:
        try:
            value = bytes.fromhex(text.removeprefix("0x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} is not hex: {text!r}") from None
        if len(value) == size or (pad and 0 < len(value) < size):
            return value.ljust(size, b"\0")
        expected = f"at most {size}" if pad else f"exactly {size}"
        raise argparse.ArgumentTypeError(f"{option} must be {expected} bytes, got {len(value)}")

    return parse


def _integer(option: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            return int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} is not an integer: {text!r}") from None

    return parse
