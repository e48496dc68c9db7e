"""Finding the command-line tools the test extra installs."""

from __future__ import annotations

import os
import shutil
import sysconfig


def installed_tool(name: str) -> str | None:
    """``name`` from this interpreter's scripts directory (the virtual environment the tests
    run in, activated or not), else from ``PATH``."""
    scripts = sysconfig.get_path("scripts")
    search = os.pathsep.join(filter(None, [scripts, os.environ.get("PATH")]))
    return shutil.which(name, path=search)
