"""``verify-attested-run``: the tenant's offline verifier.

Raw-report mode::

    verify-attested-run --report R.bin --endorsement VCEK.pem [--policy POLICY.json]
        [--now RFC3339] [--crl CRL.der] [--simulated-root ROOT.pem] [--json]

Envelope mode (every raw-report check, then the binding (7), then the expectations (8))::

    verify-attested-run --envelope ENVELOPE.json --expected EXPECTED.json [--now RFC3339]
        [--crl CRL.der] [--json]

In envelope mode the policy keys and the accepted simulated roots come from the
expected-values file only.

The exit code is the public table in :mod:`attestation.exit_codes` (0 verified, 1-8 the first
failing class, 9 usage/IO/internal). argparse errors, ``--help``, unreadable files and any
unexpected exception exit 9: nothing but a completed verification ever exits 0.

Modes are a required mutually exclusive group; a new mode adds its option to the group and a
``_run_<mode>`` function returning a :class:`VerificationResult`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

from attestation import __version__, files
from attestation.errors import AttestationError, FailureClass, MalformedError, UsageError
from attestation.exit_codes import EXIT_CODES, MEANINGS, exit_code_for
from attestation.help_format import HelpFormatter, exit_code_epilog

if TYPE_CHECKING:
    # Imported by the mode that uses them: one process verifies in one mode, and `--help`,
    # `--version` and usage errors load none of them (tests/attestation/test_cli_imports.py).
    from attestation.endorsement.trust import TrustStore
    from attestation.verify.checks import VerificationResult
    from attestation.verify.policy import Policy

PROG: Final = "verify-attested-run"
#: How long a FIFO or device input (``<(curl ...)``) may take to end: bounded, so that a FIFO
#: without a writer cannot hold the verifier forever.
DEFAULT_INPUT_WAIT: Final = 30.0
MAX_INPUT_WAIT: Final = 3600.0
_SERIAL_ZERO_WARNING: Final = "Parsed a serial number which wasn't positive"
#: pydantic's switch for its plugins (pydantic/plugin/_loader.py, pydantic 2.x).
_PYDANTIC_PLUGINS: Final = "PYDANTIC_DISABLE_PLUGINS"


class _InformationShown(Exception):  # noqa: N818 - not an error: --help or --version ran
    """``--help`` or ``--version`` printed what was asked: exit 0, nothing was verified (no
    verdict line is printed, so no caller can read one)."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse exits 2 on errors, which is a verdict code here: raise UsageError (9) instead."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        if status == 0:  # --help and --version end here
            raise _InformationShown
        raise UsageError((message or "argument error").strip())

    def parse_args(  # type: ignore[override]  # argparse's overloads, one used
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        # argparse reports a missing required option before an unknown one, so a typo
        # ("--envelop") would read as "one of --report --envelope is required".
        _refuse_unknown_options(self, sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)


def _refuse_unknown_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    known = [
        option
        for action in parser._actions  # noqa: SLF001 - argparse lists its options nowhere else
        for option in action.option_strings
    ]
    for word in argv:
        if word == "--":
            return
        name = word.split("=", 1)[0]
        if not name.startswith("-") or name == "-" or name in known:
            continue
        import difflib  # only to word this error

        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else f" (known: {', '.join(known)})"
        raise UsageError(f"unknown option {name}{hint}")


_DESCRIPTION: Final = """\
Verify AMD SEV-SNP attestation evidence offline, trusting only AMD's roots.

Raw-report mode: --report R.bin --endorsement VCEK.pem [--policy POLICY.json]
[--simulated-root ROOT.pem]. Envelope mode: --envelope ENVELOPE.json --expected
EXPECTED.json (every raw-report check, then the binding, then the expectations; the policy
and any accepted simulated roots come from the expected-values file). The first line of the
output is the verdict; a verdict that rests on a simulated root says so."""


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=exit_code_epilog(MEANINGS.items()),
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {__version__}",
        help="print the version and exit (0: nothing was verified)",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--report", type=Path, metavar="FILE", help="raw 1184-byte SNP attestation report"
    )
    mode.add_argument(
        "--envelope", type=Path, metavar="FILE", help="attestation envelope (JSON) of a replay"
    )
    parser.add_argument(
        "--expected",
        type=Path,
        metavar="FILE",
        help="the tenant's expected-values file (envelope mode; docs/envelope.md)",
    )
    parser.add_argument(
        "--endorsement",
        type=Path,
        metavar="FILE",
        help="VCEK/VLEK certificate (PEM, DER, or PEM bundle with the leaf first)",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="verification policy JSON (default: {}, the secure defaults)",
    )
    parser.add_argument(
        "--now",
        metavar="RFC3339",
        help="time at which certificates must be valid (default: the current time)",
    )
    parser.add_argument(
        "--crl", type=Path, metavar="FILE", help="AMD CRL (DER, signed by the ARK) to check"
    )
    parser.add_argument(
        "--simulated-root",
        type=Path,
        metavar="FILE",
        help="trust this simulated ARK (PEM/DER) in addition to AMD's roots (raw-report mode)",
    )
    parser.add_argument(
        "--input-timeout",
        type=_seconds,
        default=DEFAULT_INPUT_WAIT,
        metavar="SECONDS",
        help="how long an input that is a FIFO or device, such as <(command), may take to end",
    )
    parser.add_argument("--json", action="store_true", help="print every check as JSON")
    return parser


def read_input(path: Path, limit: int, what: str, *, wait: float = DEFAULT_INPUT_WAIT) -> bytes:
    """Read a file of at most ``limit`` bytes (a FIFO or device for at most ``wait`` s).

    Raises:
        UsageError: the file cannot be read, or a stream did not end in time (exit 9).
        MalformedError: the file is larger than ``limit`` (exit 1).
    """
    try:
        return files.read_input(path, limit, wait=wait)
    except files.FileTooLargeError:
        raise MalformedError(f"{what} {str(path)!r} is over the {limit}-byte limit") from None
    except OSError as error:
        raise UsageError(f"cannot read {what} {str(path)!r}: {error.strerror or error}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= MAX_INPUT_WAIT:
        raise argparse.ArgumentTypeError(
            f"{text} is not a number of seconds more than 0 and at most {MAX_INPUT_WAIT:g}"
        )
    return value


def parse_now(value: str | None) -> datetime:
    """The verification time: an RFC 3339 timestamp with an offset, or the current time."""
    if value is None:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--now {value!r} is not an RFC 3339 timestamp") from None
    if moment.tzinfo is None:
        raise UsageError(f"--now {value!r} needs a UTC offset (e.g. 2026-01-01T00:00:00Z)")
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC
        raise UsageError(f"--now {value!r} is out of range in UTC") from None


def trust_store(args: argparse.Namespace) -> TrustStore:
    from attestation.contracts import MAX_CERTIFICATE_BYTES
    from attestation.endorsement.trust import TrustStore  # raw mode only

    store = TrustStore.amd()
    if args.simulated_root is not None:
        root = read_input(
            args.simulated_root, MAX_CERTIFICATE_BYTES, "simulated root", wait=args.input_timeout
        )
        store = store.with_simulated_root(root)
    return store


def load_policy_file(path: Path | None, *, wait: float = DEFAULT_INPUT_WAIT) -> Policy:
    from attestation.contracts import MAX_POLICY_BYTES
    from attestation.verify.policy import Policy, load_policy  # raw mode only

    if path is None:
        return Policy()
    return load_policy(read_input(path, MAX_POLICY_BYTES, "policy", wait=wait))


def _run_report(args: argparse.Namespace) -> VerificationResult:
    if args.endorsement is None:
        raise UsageError("--report needs --endorsement")
    now = parse_now(args.now)  # a usage error before any input is read
    wait = args.input_timeout
    from attestation.contracts import MAX_CERTIFICATE_BYTES, MAX_CRL_BYTES, MAX_REPORT_FILE_BYTES

    report = read_input(args.report, MAX_REPORT_FILE_BYTES, "report", wait=wait)
    endorsement = read_input(args.endorsement, MAX_CERTIFICATE_BYTES, "endorsement", wait=wait)
    policy = load_policy_file(args.policy, wait=wait)
    crl = None if args.crl is None else read_input(args.crl, MAX_CRL_BYTES, "CRL", wait=wait)
    from attestation.verify.verifier import Verifier  # raw mode only

    verifier = Verifier(trust_store(args), policy=policy, crl=crl)
    return verifier.verify(report, endorsement, now=now)


def _run_envelope(args: argparse.Namespace) -> VerificationResult:
    if args.expected is None:
        raise UsageError("--envelope needs --expected")
    for option, value in (
        ("--endorsement", args.endorsement),
        ("--policy", args.policy),
        ("--simulated-root", args.simulated_root),
    ):
        if value is not None:
            raise UsageError(
                f"{option} does not apply to --envelope: the envelope carries its endorsement "
                "and the expected-values file holds the policy and any simulatedRoots"
            )
    now = parse_now(args.now)  # a usage error before any input is read
    wait = args.input_timeout
    from attestation.contracts import MAX_CRL_BYTES, MAX_ENVELOPE_BYTES, MAX_EXPECTED_BYTES
    from attestation.envelope.expected import load_expected  # envelope mode only
    from attestation.envelope.verification import verify_envelope

    envelope = read_input(args.envelope, MAX_ENVELOPE_BYTES, "envelope", wait=wait)
    expected = load_expected(
        read_input(args.expected, MAX_EXPECTED_BYTES, "expected-values file", wait=wait)
    )
    crl = None if args.crl is None else read_input(args.crl, MAX_CRL_BYTES, "CRL", wait=wait)
    return verify_envelope(envelope, expected, now=now, crl=crl)


def run_mode(args: argparse.Namespace) -> VerificationResult:
    """Dispatch to the selected mode (the options of the required mutually exclusive group)."""
    if args.envelope is not None:
        return _run_envelope(args)
    if args.expected is not None:
        raise UsageError("--expected applies only to --envelope")
    return _run_report(args)


def _input_failure(error: AttestationError) -> VerificationResult:
    from attestation.verify.checks import Check, VerificationResult

    return VerificationResult.from_checks([Check.from_error("input", error)])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (never calls ``sys.exit``)."""
    if sys.stdout is None or sys.stderr is None:
        # Started with stdout or stderr closed: no verdict could be delivered, and a failure
        # could not even be reported. Nothing is verified (9), whatever the input.
        return EXIT_CODES[FailureClass.USAGE]
    want_json = "--json" in (sys.argv[1:] if argv is None else argv)
    try:
        with warnings.catch_warnings(), _without_pydantic_plugins():
            # AMD's VCEK/VLEK serial number is 0; cryptography warns on each parse (expected).
            warnings.filterwarnings("ignore", message=_SERIAL_ZERO_WARNING)
            args = build_parser().parse_args(argv)
            result = run_mode(args)
            output = (
                json.dumps(result.to_json_dict(), indent=2) + "\n"
                if args.json
                else result.summary()
            )
        code = result.exit_code
    except _InformationShown:
        return 0
    except AttestationError as error:
        code = exit_code_for(error)
        output = ""
        if want_json and code != EXIT_CODES[FailureClass.USAGE]:
            output = json.dumps(_input_failure(error).to_json_dict(), indent=2) + "\n"
        sys.stderr.write(f"{PROG}: {error.failure_class.value}: {error}\n")
    except Exception:  # noqa: BLE001 - any unexpected failure is "could not decide" (9), never 0
        sys.stderr.write(f"{PROG}: internal error\n{traceback.format_exc()}")
        return EXIT_CODES[FailureClass.USAGE]
    return _deliver(output, code)


@contextlib.contextmanager
def _without_pydantic_plugins() -> Iterator[None]:
    """Run the verification with pydantic's plugins off (and the environment as it was after).

    A pydantic plugin is code any installed distribution registers (entry point group
    ``pydantic``); pydantic imports it into the process and calls it on every validation, so it
    would see, and could change, what the verifier reads from the envelope and the expected
    values. The verifier runs only its own code. Finding the plugins also reads the metadata of
    every installed distribution when the first model is built: tens of milliseconds of a
    one-shot verification.
    """
    previous = os.environ.get(_PYDANTIC_PLUGINS)
    os.environ[_PYDANTIC_PLUGINS] = "__all__"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[_PYDANTIC_PLUGINS]
        else:
            os.environ[_PYDANTIC_PLUGINS] = previous


def _deliver(output: str, code: int) -> int:
    """Write the verdict; ``code`` only when it reached stdout, else 9.

    A verdict that could not be written (the reader closed the pipe, the disk is full) must not
    exit with its own code: a caller would take "0" as a verified result it never received, and
    an escaping BrokenPipeError would exit 1, which means "malformed input".
    """
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except OSError as error:
        _discard_stdout()
        sys.stderr.write(f"{PROG}: cannot write the verdict to stdout: {error}\n")
        return EXIT_CODES[FailureClass.USAGE]
    return code


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind stdout (embedded, tests)
        pass


if __name__ == "__main__":
    raise SystemExit(main())
