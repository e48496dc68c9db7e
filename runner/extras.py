"""Optional dependencies by role, and the one place a missing one becomes an exit code.

Installing the project (from a clone or a release's wheel: it is on no package index)
installs what a tenant needs (``verify-attested-run``,
``expected``, ``tenant fetch``) and what the replay itself needs (``run``, ``demo``). Two extras
add the operator's other roles:

============== ================================ ==========================================
extra          packages                         commands
============== ================================ ==========================================
``kubernetes`` kubernetes, PyYAML               ``submit``, ``status``, ``collect``,
                                                ``cancel``, ``list``
``server``     starlette, uvicorn, httptools,   ``serve``, ``server backup``, ``token``
               uvloop, psycopg
============== ================================ ==========================================

A command imports the modules of its extra inside :func:`extra_required`; if exactly one of
that extra's packages is missing, the command exits 9 naming the extra to install. Any other
import error is a bug and is not disguised.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Final, Literal

from runner.errors import UsageError

Extra = Literal["kubernetes", "server"]

#: The top-level modules each extra provides (as ``ModuleNotFoundError.name`` reports them).
EXTRA_MODULES: Final[Mapping[Extra, frozenset[str]]] = MappingProxyType(
    {
        "kubernetes": frozenset({"kubernetes", "yaml"}),
        "server": frozenset(
            {"starlette", "uvicorn", "httptools", "uvloop", "psycopg", "psycopg_binary"}
        ),
    }
)
_LABELS: Final[Mapping[Extra, str]] = MappingProxyType(
    {"kubernetes": "Kubernetes", "server": "publication-service"}
)


class MissingExtraError(UsageError):
    """A command needs an optional extra that is not installed (exit 9)."""


def install_hint(extra: Extra) -> str:
    # Once the project is installed, pip resolves this to the extra's packages alone (from the
    # index, where they are), without looking for attested-replay itself.
    return f"pip install 'attested-replay[{extra}]'"


@contextmanager
def extra_required(command: str, extra: Extra) -> Iterator[None]:
    """Run the imports of ``command`` that need ``extra``; a missing package of that extra
    becomes :class:`MissingExtraError` naming the extra to install."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EXTRA_MODULES[extra]:
            raise
        raise MissingExtraError(
            f"attested-replay {command} needs the {_LABELS[extra]} extra: {install_hint(extra)}"
            f" (no module named {missing!r})"
        ) from exc
