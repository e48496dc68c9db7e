"""``attested-replay``: the operator and pod command line.

Each subcommand lives in its own module under ``runner.commands`` and registers itself
through ``register(subparsers)``; handlers return an exit code or raise a ``RunnerError``
that ``runner.exit_codes`` maps to one. This is the only module that exits.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import structlog

from runner import __version__
from runner.errors import RunnerError, UsageError
from runner.exit_codes import INTERNAL, exit_code_for
from runner.log import configure_logging
from tenant.errors import TenantError

#: Subcommand modules, in the order they appear in ``--help``.
COMMAND_MODULES: tuple[str, ...] = (
    "runner.commands.run",
    "runner.commands.merge",
    "runner.commands.demo",
    "runner.commands.corpus",
    "runner.commands.score",
    "runner.commands.expected",
    "runner.commands.simulate",
    "runner.commands.evidence",
    "runner.commands.k8s",
    "runner.commands.publish",
    "runner.commands.export",
    "runner.commands.contract",
)

Handler = Callable[[argparse.Namespace], int]
#: The shell's status for a process ended by SIGPIPE (128 + 13).
SIGPIPE_EXIT = 141


class ArgumentParser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage; we raise instead so usage maps to exit 9."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="attested-replay",
        description="Run backtest replays bound into SEV-SNP attestation reports.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="structlog level (JSON on stderr when it is not a terminal)",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=ArgumentParser
    )
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0) if isinstance(exc.code, int) else 0
    configure_logging(level=args.log_level)
    log = structlog.get_logger("attested-replay")
    handler: Handler = args.handler
    try:
        return handler(args)
    except (RunnerError, TenantError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        log.debug("command_failed", error=str(exc), error_type=type(exc).__name__)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``... | head``): not an internal error. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return SIGPIPE_EXIT
    except Exception as exc:  # nothing unexpected may ever exit 0 or 1
        log.exception("internal_error", error=str(exc))
        print(f"internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return INTERNAL
