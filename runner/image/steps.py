"""One build step of ``image build``: a fixed command line, its failure an :class:`ImageBuildError`
quoting the end of what it printed."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from runner.errors import ImageBuildError


def run_step(
    command: Sequence[str],
    *,
    what: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    tail: int = 8,
) -> None:
    """Run ``command`` under umask 022; on a non-zero exit,
    :class:`ImageBuildError` ``"<what> failed (exit N): "`` and its last ``tail`` output lines."""
    result = subprocess.run(  # noqa: S603 - fixed command lines
        list(command),
        env=None if env is None else dict(env),
        umask=0o022,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()[-tail:]
        raise ImageBuildError(f"{what} failed (exit {result.returncode}): " + " | ".join(lines))
