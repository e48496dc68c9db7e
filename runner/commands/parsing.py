"""How every ``attested-replay`` subcommand is declared: one parser class, one help layout,
one exit-code table per family, and option types that check paths while parsing.

* :class:`ArgumentParser` raises :class:`~runner.errors.UsageError` (exit 9) instead of
  argparse's exit 2, and gives every sub-parser ``--log-level`` and ``--version``, so both work
  after the subcommand too.
* :func:`add_command` registers a subcommand with its one-line summary, its description, the
  help layout (:class:`attestation.help_format.HelpFormatter`: defaults shown) and its family's
  exit codes as the epilog.
* :func:`input_file`, :func:`input_dir`, :func:`output_file` and :func:`output_dir` are
  argparse ``type=`` factories; ``runner.cli`` calls :func:`check_paths` on the parsed command
  before its handler (before any work), and a problem is reported as
  ``error: --out results: is a directory`` (exit 9). No option takes a bare ``Path``.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from attestation.help_format import HelpFormatter, exit_code_epilog
from attestation.tenant.paths import (
    check_input_dir,
    check_input_file,
    check_output_dir,
    check_output_file,
)
from runner import __version__
from runner.errors import UsageError
from runner.exit_codes import FAMILY_EXIT_CODES, Family
from runner.log import DEFAULT_LOG_LEVEL
from runner.statedir import STATE_DIR_ENV

if TYPE_CHECKING:
    from runner.commands import Subparsers

LOG_LEVELS = ("debug", "info", "warning", "error")
_ARGUMENT_MESSAGE: Final = re.compile(r"^argument (?P<name>\S+): (?P<problem>.*)$", re.DOTALL)
#: The namespace attribute listing the parsed command's path options (see check_paths).
PATH_CHECKS = "path_checks"


class ArgumentParser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage; we raise instead so usage maps to exit 9."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - argparse's own
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=f"attested-replay {__version__}")
        self.add_argument(
            "--log-level",
            choices=LOG_LEVELS,
            # SUPPRESS: a sub-parser must not overwrite the value given before the subcommand.
            default=argparse.SUPPRESS,
            help=f"log level of the JSON events on stderr (default: {DEFAULT_LOG_LEVEL})",
        )

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --vmpl/-v: 'x' is not an integer": name the option as typed
        # ("--vmpl: ...") and keep the command for errors about the command line as a whole.
        match = _ARGUMENT_MESSAGE.match(message)
        if match is not None:
            raise UsageError(f"{match['name'].split('/')[0]}: {match['problem']}")
        raise UsageError(f"{self.prog}: {message}")

    def parse_known_args(  # type: ignore[override]  # argparse's overloads, one used
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        # The path options of this parser (groups included: they share its action list),
        # before those of the sub-parser that already ran; see check_paths.
        own = [(a.dest, a.type) for a in self._actions if isinstance(a.type, PathArgument)]
        setattr(parsed, PATH_CHECKS, [*own, *getattr(parsed, PATH_CHECKS, [])])
        return parsed, extras


def add_command(
    subparsers: Subparsers,
    name: str,
    *,
    summary: str,
    family: Family,
    description: str = "",
    epilog: str = "",
) -> ArgumentParser:
    """A subcommand parser: ``summary`` (one line, no final period) is its entry in the
    parent's list and the first line of its help; ``description`` follows it; the epilog ends
    with the exit codes of ``family``."""
    text = summary[:1].upper() + summary[1:] + "."
    if description:
        text += "\n\n" + description.strip("\n")
    exit_codes = exit_code_epilog(FAMILY_EXIT_CODES[family], title=f"exit codes ({family.value})")
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=text,
        epilog=(epilog.strip("\n") + "\n\n" if epilog else "") + exit_codes,
    )
    assert isinstance(parser, ArgumentParser)
    # The innermost command's family wins: argparse copies a sub-parser's defaults last.
    parser.set_defaults(family=family)
    return parser


def add_actions(parser: argparse.ArgumentParser, *, metavar: str = "ACTION") -> Subparsers:
    """The sub-subcommands of a command group (``corpus checksum``, ``token create``)."""
    actions = parser.add_subparsers(dest=f"{parser.prog.split()[-1]}_action", metavar=metavar)
    actions.required = True
    return actions


# -- path types ---------------------------------------------------------------------------------


class PathArgument:
    """An argparse ``type=`` for a path, and how to check it before the command runs.

    Parsing only converts (so a Job's command line can be parsed anywhere); :func:`check_paths`
    runs the check on the parsed value (and on a default) before the handler is called.
    """

    def __init__(self, label: str, check: Callable[[Path, str], Path]) -> None:
        self.label = label
        self._check = check
        self.__name__ = "path"  # argparse names the type in its own messages

    def __call__(self, text: str) -> Path:
        return Path(text)

    def check(self, path: Path) -> Path:
        return self._check(path, self.label)


#: The longest wait any option accepts (an hour): every wait ends.
MAX_WAIT_SECONDS: Final = 3600.0


def seconds(*, most: float = MAX_WAIT_SECONDS, zero: bool = False) -> Callable[[str], float]:
    """A finite number of seconds, more than 0 (or from 0, with ``zero``) and at most
    ``most``: an infinite or NaN wait is refused, never a wait forever."""
    bounds = f"from 0 to {most:g}" if zero else f"more than 0 and at most {most:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > most:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds {bounds}")
        return value

    return parse


def tcp_port(text: str) -> int:
    """A TCP port to listen on, 1 to 65535 (the kernel would otherwise take another)."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def input_file(label: str) -> PathArgument:
    """An existing, readable file, named ``label`` (the option, e.g. ``--report``) in errors."""
    return PathArgument(label, check_input_file)


def input_dir(label: str) -> PathArgument:
    """An existing, readable directory."""
    return PathArgument(label, check_input_dir)


def input_file_or_dir(label: str) -> PathArgument:
    """An existing, readable file or directory."""
    return PathArgument(
        label,
        lambda path, name: (check_input_dir if path.is_dir() else check_input_file)(path, name),
    )


def output_file(label: str, *, in_place: bool = False) -> PathArgument:
    """A file the command will write (atomically, unless ``in_place``): see
    :func:`attestation.tenant.paths.check_output_file`."""
    return PathArgument(label, lambda path, name: check_output_file(path, name, in_place=in_place))


def output_dir(label: str, *, create: bool, empty: bool = False) -> PathArgument:
    """A directory the command writes into: see
    :func:`attestation.tenant.paths.check_output_dir`."""
    return PathArgument(
        label, lambda path, name: check_output_dir(path, name, create=create, empty=empty)
    )


def check_paths(args: argparse.Namespace) -> None:
    """Check every path option of the parsed command (its :class:`PathArgument` types), in
    the order they were declared. Raises ``TenantUsageError`` (exit 9) naming the option."""
    for dest, kind in getattr(args, PATH_CHECKS, ()):
        value = getattr(args, dest, None)
        for path in value if isinstance(value, list) else [value]:
            if path is not None:
                kind.check(Path(path))


# -- options shared by several commands ----------------------------------------------------------


def add_state_dir_argument(parser: argparse.ArgumentParser, *, existing: bool = False) -> None:
    """``--state-dir``: where the simulated PKI lives, created on first use (its parent must
    exist: a typo is an error, not a new tree). With ``existing`` the directory must exist
    already (for commands that only read the PKI)."""
    parser.add_argument(
        "--state-dir",
        type=input_dir("--state-dir") if existing else output_dir("--state-dir", create=True),
        metavar="DIR",
        help=f"directory of the simulated PKI (default: ${STATE_DIR_ENV}, else "
        "$XDG_CACHE_HOME/attested-replay, else ~/.cache/attested-replay)",
    )


def interface_path(label: str) -> PathArgument:
    """A device or kernel interface path (``/dev/sev-guest``, the configfs-tsm directory): not
    checked here, since its absence is "no evidence" (exit 3), reported by the provider before
    any work, not a usage error."""
    return PathArgument(label, lambda path, _name: path)


def add_ca_bundle(parser: argparse.ArgumentParser) -> None:
    """``--ca-bundle FILE``: the only way to trust other certificate authorities for https://
    (the HTTP client never reads REQUESTS_CA_BUNDLE, SSL_CERT_FILE or the like)."""
    parser.add_argument(
        "--ca-bundle",
        type=input_file("--ca-bundle"),
        metavar="FILE",
        help="CA certificates (PEM) for https:// instead of certifi's bundle; "
        "REQUESTS_CA_BUNDLE, SSL_CERT_FILE, proxy and netrc variables are never used",
    )
