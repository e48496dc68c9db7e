"""``attested-replay`` subcommands: one module each, registered by ``runner.cli``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    #: What ``register(subparsers)`` receives (argparse keeps the class private).
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]  # noqa: SLF001
