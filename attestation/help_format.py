"""The ``--help`` layout shared by ``verify-attested-run`` and ``attested-replay``.

Descriptions and epilogs keep their line breaks (they hold tables and examples); every option
shows its default unless the default is "nothing" (``None``, ``False``, an empty list) or the
help text already states it; the exit codes of a command are rendered from its table, so the
help cannot drift from the code.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterable

#: Width of the epilog tables (descriptions are written pre-wrapped to about this width).
_WIDTH = 92


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Raw description and epilog; ``(default: X)`` appended where a default means something."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text is None or "%(default)" in text or "default:" in text:
            return text
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or default == []:
            return text
        if not action.option_strings and action.nargs not in ("?", "*"):
            return text
        return f"{text} (default: %(default)s)"


def exit_code_epilog(rows: Iterable[tuple[int, str]], *, title: str = "exit codes") -> str:
    """``exit codes:`` followed by one aligned ``  N  meaning`` line per code."""
    lines = [f"{title}:"]
    for code, meaning in rows:
        lines.extend(
            textwrap.wrap(
                meaning, width=_WIDTH, initial_indent=f"  {code}  ", subsequent_indent="     "
            )
        )
    return "\n".join(lines)
