"""The process environment of a run: which variables can change what it does, and which it
refuses. ``docs/environment.md`` lists every variable that can influence a run.

The operator sets the replay pod's environment. The agent policy in init-data pins it (every
variable of the container is part of HOST_DATA), and that is the control a tenant verifies;
the run does not rely on it alone:

* the HTTP clients read none of the variables through which other stacks redirect trust
  (:data:`attestation.tenant.http.TRUST_VARIABLES`: proxies, CA bundles, ``.netrc``, TLS key logs);
* the variables below act before any of our code runs (the dynamic linker, OpenSSL's
  configuration, the interpreter's module path, start-up hooks and number parsing). A run that
  would produce genuine SEV-SNP evidence refuses to start while one of them is in effect; every
  run records which were set, and whether the interpreter ignored the ``PYTHON*`` ones (``-I``
  or ``-E``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: Variables that load other code or change how our code computes, before it runs.
CODE_VARIABLES: Final = (
    # the dynamic linker (glibc): preloaded libraries, other library paths, audit modules
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "GLIBC_TUNABLES",
    # OpenSSL (the ssl module and cryptography): a configuration file can load providers
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "OPENSSL_ENGINES",
    # the interpreter: where modules come from, start-up hooks, dropped assertions, how
    # integers parse, warnings turned into errors, debug allocators
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONPLATLIBDIR",
    "PYTHONSTARTUP",
    "PYTHONINSPECT",
    "PYTHONBREAKPOINT",
    "PYTHONOPTIMIZE",
    "PYTHONINTMAXSTRDIGITS",
    "PYTHONWARNINGS",
    "PYTHONMALLOC",
    "PYTHONDEVMODE",
    "PYTHONEXECUTABLE",
)


@dataclass(frozen=True, slots=True)
class ProcessEnvironment:
    """What the variables of :data:`CODE_VARIABLES` did to this process."""

    #: Set and in effect.
    in_effect: tuple[str, ...]
    #: Set, but ignored by an isolated interpreter (``PYTHON*`` under ``-I`` or ``-E``).
    ignored: tuple[str, ...]
    #: The interpreter ignores ``PYTHON*`` variables (``python -I`` or ``-E``).
    isolated: bool

    def describe(self) -> str:
        parts = [f"in effect: {', '.join(self.in_effect) or 'none'}"]
        if self.ignored:
            parts.append(f"ignored by the isolated interpreter: {', '.join(self.ignored)}")
        return "; ".join(parts)


def process_environment(
    environ: Mapping[str, str], *, isolated: bool | None = None
) -> ProcessEnvironment:
    """Which of :data:`CODE_VARIABLES` are set in ``environ`` and in effect here."""
    isolated = bool(sys.flags.ignore_environment) if isolated is None else isolated
    present = [name for name in CODE_VARIABLES if environ.get(name)]
    ignored = [name for name in present if isolated and name.startswith("PYTHON")]
    return ProcessEnvironment(
        in_effect=tuple(name for name in present if name not in ignored),
        ignored=tuple(ignored),
        isolated=isolated,
    )
