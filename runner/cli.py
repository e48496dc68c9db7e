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

import structlog

from attestation.tenant.errors import TenantError
from runner.commands.parsing import ArgumentParser, check_paths
from runner.errors import RunnerError
from runner.exit_codes import INTERNAL, exit_code_for
from runner.log import DEFAULT_LOG_LEVEL, configure_logging

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
    "runner.commands.image",
    "runner.commands.k8s",
    "runner.commands.publish",
    "runner.commands.serve",
    "runner.commands.token",
    "runner.commands.tenant",
    "runner.commands.witness",
    "runner.commands.export",
    "runner.commands.contract",
)

Handler = Callable[[argparse.Namespace], int]
#: The shell's status for a process ended by SIGPIPE (128 + 13).
SIGPIPE_EXIT = 141


_EPILOG = """\
Every command accepts --log-level and --version, before or after its name. Its --help lists
its options with their defaults and the exit codes of its family (replay, reference values,
cluster, publication); a number means the same thing in every family, and 9 is always a usage
error: a bad option value, a missing input path or an output that cannot be written, found
before any work."""


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="attested-replay",
        description="Run backtest replays bound into SEV-SNP attestation reports.",
        epilog=_EPILOG,
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=ArgumentParser
    )
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def log_level(args: argparse.Namespace, *, terminal: bool) -> str:
    """``--log-level``, else, on a terminal, the level of a command whose summary already
    says what its info events say (``run``: ``warning``, so a person reads the summary once,
    not 13 event lines before it), else the default; pipes and files get every event."""
    given: str | None = getattr(args, "log_level", None)
    if given is not None:
        return given
    quiet: str | None = getattr(args, "terminal_log_level", None)
    return quiet if terminal and quiet is not None else DEFAULT_LOG_LEVEL


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stdout is None or sys.stderr is None:
        # Started with stdout or stderr closed: no result and no error could be reported.
        return INTERNAL
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except (RunnerError, TenantError) as exc:  # bad usage, or a path checked while parsing
        print(f"error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0) if isinstance(exc.code, int) else 0
    configure_logging(level=log_level(args, terminal=sys.stderr.isatty()))
    log = structlog.get_logger("attested-replay")
    handler: Handler = args.handler
    try:
        check_paths(args)
        return handler(args)
    except (RunnerError, TenantError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        log.debug("command_failed", error=str(exc), error_type=type(exc).__name__)
        return exit_code_for(exc, getattr(args, "family", None))
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
