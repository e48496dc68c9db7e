"""The package map holds: statically (the import graph) and when run (blocked imports).

``docs/architecture.md`` draws the map: two top-level packages. ``attestation`` is the tenant's
side: the pure verifier (``attestation`` outside its two tool subpackages), the tenant's network
tools (``attestation.tenant``) and the simulated AMD (``attestation.simulated_amd``); ``runner``
is the operator's and the pod's side and may import all of it. These tests read every import
statement of both packages (module level and lazy ones) and check the arrows between those
components; then they import and *use* the verifier and ``attestation.tenant`` in a fresh
interpreter where everything they must not need raises on import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from attestation.encoding.json_document import parse_strict_json
from runner.publish.client import publish_envelope
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import Role, SqliteStorage
from runner.service.tokens import create_token
from tests.e2e.conftest import GenuineRun
from tests.publish.conftest import LOG_NAME, make_envelope, running_service

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("attestation", "runner")
#: Third-party modules of the optional extras (``runner.extras``) and what they pull in.
OPTIONAL = frozenset(
    {"kubernetes", "yaml", "uvicorn", "httptools", "uvloop", "psycopg", "starlette", "anyio"}
)
#: What the base install runs: the CLIs (every subcommand module is imported to register it),
#: the library objects, and the pure Job builders the ``expected`` command uses.
BASE_ENTRY_POINTS = (
    "attestation",
    "attestation.cli",
    "attestation.tenant",
    "runner.cli",
    *(f"runner.commands.{path.stem}" for path in (REPO / "runner" / "commands").glob("*.py")),
    "runner.pipeline",
    "runner.k8s.job",
)
#: The components of the map: the two tool subpackages of ``attestation`` are components of
#: their own; the rest of ``attestation`` is the verifier.
COMPONENTS = ("attestation.tenant", "attestation.simulated_amd", "attestation", "runner")
FORBIDDEN = {
    "attestation": frozenset(
        {
            "runner",
            "attestation.tenant",
            "attestation.simulated_amd",
            "requests",
            "urllib3",
            "structlog",
            *OPTIONAL,
        }
    ),
    "attestation.simulated_amd": frozenset(
        {"runner", "attestation.tenant", "requests", "urllib3", "structlog", *OPTIONAL}
    ),
    "attestation.tenant": frozenset({"runner", "attestation.simulated_amd", *OPTIONAL}),
}
REAL = REPO / "tests" / "assets" / "real"


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    """Absolute module names imported by ``path`` (``from x import y`` counts ``x`` and
    ``x.y``); with ``top_level_only``, only statements executed on import (TYPE_CHECKING
    blocks and function bodies excluded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes: list[ast.stmt] = list(tree.body) if top_level_only else list(ast.walk(tree))  # type: ignore[arg-type]
    found: set[str] = set()
    while nodes:
        node = nodes.pop()
        if top_level_only and isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" not in test:
                nodes.extend(node.body + node.orelse)
            continue
        if top_level_only and isinstance(node, ast.Try):
            nodes.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                nodes.extend(handler.body)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _root(module: str) -> str:
    return module.partition(".")[0]


def _component(module: str) -> str:
    """The component of the map ``module`` belongs to (a third-party module: its top level)."""
    for component in COMPONENTS:
        if module == component or module.startswith(component + "."):
            return component
    return _root(module)


def test_the_components_import_only_downwards() -> None:
    problems = [
        f"{name} imports {imported}"
        for name, path in _modules()
        for imported in _imports(path, top_level_only=False)
        if _component(imported) in FORBIDDEN.get(_component(name), frozenset())
    ]
    assert problems == []


def test_the_map_places_each_module_in_its_component() -> None:
    names = {name for name, _path in _modules()}
    assert {"attestation.tenant", "attestation.simulated_amd", "attestation.cli"} <= names
    assert not {"tenant", "simulated_amd"} & {_root(name) for name in names}
    assert _component("attestation.tenant.http") == "attestation.tenant"
    assert _component("attestation.tenants") == "attestation"
    assert _component("attestation.endorsement.chain") == "attestation"
    assert _component("urllib3.poolmanager") == "urllib3"


def test_corpus_never_imports_scoring_and_runner_subpackages_form_no_cycle() -> None:
    known = {name for name, _path in _modules()}
    edges: dict[str, set[str]] = {}
    for name, path in _modules():
        if _root(name) != "runner":
            continue
        node = ".".join(name.split(".")[:2])  # runner.<sub-package or root module>
        for imported in _imports(path, top_level_only=False):
            if _root(imported) == "runner" and imported in known:
                target = ".".join(imported.split(".")[:2])
                if target != node:
                    edges.setdefault(node, set()).add(target)
    assert "runner.scoring" not in edges.get("runner.corpus", set())
    assert "runner.pipeline" not in edges.get("runner.corpus", set())
    lows = ("runner.evidence", "runner.k8s", "runner.publish", "runner.service", "runner.corpus")
    for low in lows:
        assert not edges.get(low, set()) & {"runner.pipeline", "runner.commands", "runner.cli"}, low

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for nxt in edges.get(stack.pop(), set()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    cycles = sorted(node for node in edges if node in reachable(node))
    assert cycles == []


def test_the_base_install_never_imports_an_extra_on_import() -> None:
    """Follow every import executed on import (not lazy ones inside functions) from the base
    entry points: none reaches a package of the ``kubernetes`` or ``server`` extras."""
    paths = dict(_modules())
    parents: dict[str, str] = {}
    queue = [module for module in BASE_ENTRY_POINTS if module in paths]
    seen = set(queue)
    problems = []
    while queue:
        module = queue.pop()
        parts = module.split(".")
        targets = {".".join(parts[:i]) for i in range(1, len(parts))}  # parent packages
        for imported in _imports(paths[module], top_level_only=True):
            if _root(imported) in OPTIONAL:
                chain = [module]
                while chain[-1] in parents:
                    chain.append(parents[chain[-1]])
                problems.append(f"{imported} via {' <- '.join(chain)}")
            targets.add(imported)
        for target in targets:
            if target in paths and target not in seen:
                seen.add(target)
                parents[target] = module
                queue.append(target)
    assert problems == []
    assert "runner.cli" in seen
    assert "runner.pipeline.run" in seen


_BLOCKER = """
import importlib.abc
import json
import sys

BLOCKED = frozenset(sys.argv[1].split(","))


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"{name} is blocked by the package-boundary test", name=name)
        return None


sys.meta_path.insert(0, Blocker())


def loaded():
    return sorted(b for b in BLOCKED if any(m == b or m.startswith(b + ".") for m in sys.modules))
"""


def _run_blocked(blocked: frozenset[str], body: str, *args: str) -> dict[str, object]:
    script = _BLOCKER + textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", script, ",".join(sorted(blocked)), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    # The last line: the tenant package logs (structlog's default) before it.
    last = result.stdout.strip().splitlines()[-1]
    document = parse_strict_json(last.encode(), what="the child's report")
    assert isinstance(document, dict)
    return document


def test_attestation_alone_verifies_a_real_report_and_a_real_envelope(
    genuine_run: GenuineRun,
) -> None:
    blocked = FORBIDDEN["attestation"]
    report = _run_blocked(
        blocked,
        """
        from datetime import UTC, datetime
        from pathlib import Path

        import attestation

        report, vcek, envelope, expected = (Path(p).read_bytes() for p in sys.argv[2:6])
        raw = attestation.verify_report(
            report,
            vcek,
            policy=attestation.Policy(),
            trust=attestation.TrustStore.amd(),
            now=datetime.fromisoformat("2026-11-29T00:00:00+00:00"),
        )
        enveloped = attestation.verify_envelope(
            envelope, attestation.load_expected(expected), now=datetime.now(UTC)
        )
        print(json.dumps({"raw": raw.exit_code, "envelope": enveloped.exit_code,
                          "summary": enveloped.summary(), "loaded": loaded()}))
        """,
        str(REAL / "virtee-milan-v2-report.bin"),
        str(REAL / "virtee-milan-v2-vcek.der"),
        str(genuine_run.envelope),
        str(genuine_run.expected),
    )
    assert report == {
        "raw": 0,
        "envelope": 0,
        "summary": (
            "VERIFIED (SIMULATED \N{EM DASH} not AMD hardware) (report version 5, Milan, vcek); "
            "MEASUREMENT and HOST_DATA not checked (not pinned)\n"
        ),
        "loaded": [],
    }


def test_tenant_alone_fetches_and_proves_a_log(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "publish.sqlite3")
    storage.initialize()
    signer = CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate())
    out = tmp_path / "tenant-store"
    token_file = tmp_path / "tenant.token"
    token_file.write_text(create_token(storage, "acme", Role.TENANT) + "\n")
    operator = create_token(storage, "acme", Role.OPERATOR)
    body = """
    from pathlib import Path

    from attestation import tenant

    server, token_file, out, key = sys.argv[2:6]
    report = tenant.fetch_tenant(
        server=server,
        token=tenant.read_token(Path(token_file)),
        tenant="acme",
        out_dir=Path(out),
        log_key=tenant.load_verifier_key(key),
    )
    print(json.dumps({"size": report.size, "previous": report.previous_size,
                      "new": len(report.new_envelopes), "loaded": loaded()}))
    """
    blocked = FORBIDDEN["attestation.tenant"]
    try:
        with running_service(storage, signer) as service:

            def publish(run: int) -> None:
                publish_envelope(
                    service.url,
                    make_envelope("acme", f"run-{run}", run),
                    tenant="acme",
                    run_id=f"run-{run}",
                    token=operator,
                    spool_dir=tmp_path / "spool",
                )

            args = (service.url, str(token_file), str(out), signer.verifier_key.encode())
            for run in (1, 2):
                publish(run)
            first = _run_blocked(blocked, body, *args)
            publish(3)
            second = _run_blocked(blocked, body, *args)  # consistency proof 2 -> 3
    finally:
        storage.close()
    assert first == {"size": 2, "previous": 0, "new": 2, "loaded": []}
    assert second == {"size": 3, "previous": 2, "new": 1, "loaded": []}
    assert len(list((out / "envelopes").iterdir())) == 3


def test_the_publisher_and_the_log_component_stand_below_the_service() -> None:
    """The publisher runs in the replay's pod and needs none of the service; the log component
    (storage, sequencing, checkpoint signing) needs none of the service's routes, tokens or
    panel: each imports only what is below it."""
    service_modules = (
        "server", "serve", "guard", "combined_writes", "ratelimit", "tokens", "backup",
        "bundles", "corpus_routes", "corpus_store", "witnesses", "panel",
    )  # fmt: skip
    problems = []
    for name, path in _modules():
        if name.startswith("runner.publish"):
            banned: tuple[str, ...] = ("runner.service",)
        elif name.startswith("runner.service.log"):
            banned = tuple(f"runner.service.{module}" for module in service_modules)
        else:
            continue
        problems += [
            f"{name} imports {imported}"
            for imported in _imports(path, top_level_only=False)
            if imported.startswith(banned)
        ]
    assert problems == []
