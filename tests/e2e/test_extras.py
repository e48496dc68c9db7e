"""Dependencies by role: the base install runs the tenant's tools and the replay; the
``kubernetes`` and ``server`` extras add the operator's other commands, and a command whose
extra is missing exits 9 naming the extra to install."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.extras import EXTRA_MODULES, MissingExtraError, extra_required

REPO = Path(__file__).resolve().parents[2]
REAL = REPO / "tests" / "assets" / "real"
IMAGE = "registry.example/attested-replay@sha256:" + "0" * 64
SUBMIT = [
    *("submit", "--corpus", "https://corpora.example/c.tar.gz", "--checksum", "sha256:" + "1" * 64),
    *("--run-id", "r-1", "--tenant", "acme", "--image", IMAGE, "--overlay", "coco-dev"),
]

_CLI_WITHOUT = """
import importlib.abc
import sys

BLOCKED = frozenset(sys.argv[1].split(","))


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
from runner.cli import main

sys.exit(main(sys.argv[2:]))
"""


def _cli_without(blocked: set[str], *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CLI_WITHOUT, ",".join(sorted(blocked)), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ATTESTED_REPLAY_STATE_DIR": str(cwd / "state")},
    )


@pytest.mark.parametrize(
    ("blocked", "argv", "message"),
    [
        (
            {"kubernetes"},
            SUBMIT,
            (
                "attested-replay submit needs the Kubernetes extra: "
                "pip install 'attested-replay[kubernetes]' (no module named 'kubernetes')"
            ),
        ),
        (
            {"kubernetes"},
            ["status", "r-1", "--tenant", "acme"],
            "attested-replay status needs the Kubernetes extra",
        ),
        (
            {"kubernetes"},
            ["collect", "r-1", "--tenant", "acme", "--expected", "e.json"],
            "attested-replay collect needs the Kubernetes extra",
        ),
        (
            {"starlette"},
            ["serve", "--state-dir", "server"],
            (
                "attested-replay serve needs the publication-service extra: "
                "pip install 'attested-replay[server]' (no module named 'starlette')"
            ),
        ),
        (
            {"psycopg"},
            ["token", "create", "--tenant", "acme", "--role", "tenant", "--db", "t.sqlite3"],
            (
                "attested-replay token create needs the publication-service extra: "
                "pip install 'attested-replay[server]' (no module named 'psycopg')"
            ),
        ),
    ],
    ids=["submit", "status", "collect", "serve", "token-create"],
)
def test_a_command_whose_extra_is_missing_exits_9_naming_the_extra(
    tmp_path: Path, blocked: set[str], argv: list[str], message: str
) -> None:
    (tmp_path / "e.json").write_text("{}")
    result = _cli_without(blocked, *argv, cwd=tmp_path)
    assert result.returncode == 9, result.stderr
    assert f"error: {message}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "server").exists()  # refused before any work


def test_the_base_commands_need_no_extra(tmp_path: Path) -> None:
    blocked = set().union(*EXTRA_MODULES.values())
    result = _cli_without(blocked, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    expected = _cli_without(
        blocked,
        *("expected", "--run-id", "r-1", "--corpus-checksum", "sha256:" + "1" * 64),
        *("--evaluation-digest", "sha256:" + "2" * 64, "--measurement", "ab" * 48),
        *("--out", str(tmp_path / "expected.json")),
        cwd=tmp_path,
    )
    assert expected.returncode == 0, expected.stderr
    assert (tmp_path / "expected.json").is_file()


def test_only_the_extras_own_modules_are_mapped() -> None:
    with (
        pytest.raises(MissingExtraError, match=r"needs the Kubernetes extra"),
        extra_required("submit", "kubernetes"),
    ):
        raise ModuleNotFoundError("No module named 'kubernetes.client'", name="kubernetes.client")
    # Any other missing module is a bug, not a missing extra: it is not disguised.
    with (
        pytest.raises(ModuleNotFoundError, match="fastapi") as raised,
        extra_required("submit", "kubernetes"),
    ):
        raise ModuleNotFoundError("No module named 'fastapi'", name="fastapi")
    assert type(raised.value) is ModuleNotFoundError


@pytest.mark.slow
def test_a_fresh_install_without_extras_verifies_and_runs_the_demo(tmp_path: Path) -> None:
    """``pip install attested-replay`` (no extras) into a new virtual environment: none of the
    operator's optional packages is there, and the tenant's verifier and the README's demo
    work. Needs PyPI (or pip's cache); CI has it."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for package in ("attestation", "runner"):
        shutil.copytree(
            REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(source)],
        env={**os.environ, "PIP_RETRIES": os.environ.get("PIP_RETRIES", "10")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    probe = textwrap.dedent(
        """
        import importlib.util, json
        print(json.dumps({m: importlib.util.find_spec(m) is not None
                          for m in ("kubernetes", "starlette", "uvicorn", "psycopg")}))
        """
    )
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found == (
        '{"kubernetes": false, "starlette": false, "uvicorn": false, "psycopg": false}'
    )
    clean_env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    verify = subprocess.run(
        [
            str(venv / "bin" / "verify-attested-run"),
            *("--report", str(REAL / "virtee-milan-v2-report.bin")),
            *("--endorsement", str(REAL / "virtee-milan-v2-vcek.der")),
            *("--now", "2026-11-29T00:00:00Z"),
        ],
        env=clean_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout == (
        "VERIFIED (report version 2, Milan, vcek); "
        "MEASUREMENT and HOST_DATA not checked (not pinned)\n"
    )
    demo = subprocess.run(
        [
            str(venv / "bin" / "attested-replay"),
            *("demo", "--out-dir", str(tmp_path / "demo"), "--state-dir", str(tmp_path / "state")),
        ],
        env=clean_env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert (
        "demo complete: genuine envelope verified (0), tampered copy rejected (7)," in demo.stdout
    )
    assert importlib.util.find_spec("kubernetes") is not None  # this (test) environment has it
