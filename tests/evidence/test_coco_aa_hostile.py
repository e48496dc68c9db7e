"""coco-aa when something else answers on the agent's port: endless, giant, slow or deeply
nested answers end as evidence errors (exit 3) within ``--agent-timeout`` and the answer cap."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from runner.errors import EvidenceError, EvidenceUnavailableError
from runner.evidence.coco_aa import (
    MAX_AGENT_EVIDENCE_BYTES,
    MAX_AGENT_INFO_BYTES,
    CocoAgentProvider,
)
from tests import hostile_server as hs
from tests.e2e.conftest import EXAMPLE_CORPUS

BINDING = b'{"runId":"r"}'
MiB = 1024 * 1024
#: A current agent's /info, so that the hostile part is the evidence answer.
INFO = hs.answer(200, b'{"version": "v0.21.0", "tee": "snp"}')


def _agent(evidence: hs.Behaviour) -> hs.Behaviour:
    return hs.route({"/info": INFO}, evidence)


@pytest.mark.parametrize(
    "behaviour",
    [hs.endless_chunked, hs.declared(512 * MiB), hs.undeclared_stream],
    ids=["endless-chunked", "declares-512MiB", "streams-without-length"],
)
def test_an_endless_or_giant_answer_is_cut_off(behaviour: hs.Behaviour) -> None:
    with hs.HostileServer(_agent(behaviour)) as server:
        provider = CocoAgentProvider(server.url, encoding="sha512", timeout=30)
        tracemalloc.start()
        try:
            with pytest.raises(EvidenceError, match=f"{MAX_AGENT_EVIDENCE_BYTES}-byte limit"):
                provider.obtain(BINDING)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * MAX_AGENT_EVIDENCE_BYTES + MiB


@pytest.mark.parametrize(
    "behaviour",
    [hs.drip_headers(0.5), hs.drip_body(0.5), hs.silent],
    ids=["headers", "body", "silent"],
)
def test_a_slow_agent_ends_at_the_agent_timeout(behaviour: hs.Behaviour) -> None:
    """One byte every 0.5 s with --agent-timeout 2: the request ends at 2 s, not never."""
    with hs.HostileServer(_agent(behaviour)) as server:
        provider = CocoAgentProvider(server.url, encoding="sha512", timeout=2)
        with pytest.raises(EvidenceError, match=r"no answer from .* within 2 s") as caught:
            provider.obtain(BINDING)
    assert not isinstance(caught.value, EvidenceUnavailableError)
    assert server.sent <= 3 * 2 / 0.5


def test_deeply_nested_evidence_is_malformed_not_a_crash() -> None:
    with hs.HostileServer(_agent(hs.nested_json(100_000))) as server:  # 200 KB, under the cap
        provider = CocoAgentProvider(server.url, encoding="sha512", timeout=5)
        with pytest.raises(EvidenceError, match="nests deeper than 32 levels"):
            provider.obtain(BINDING)


#: The child limits its own address space, then runs the CLI (no preexec_fn: this process
#: has server threads, and forking them into a preexec hook is unsafe).
_LIMITED_CLI = (
    "import resource, runpy, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
    "sys.argv[0] = 'attested-replay'\n"
    "runpy.run_module('runner', run_name='__main__')\n"
)


def test_an_endless_info_is_cut_off_at_its_own_cap() -> None:
    with hs.HostileServer(hs.endless_chunked) as server:
        provider = CocoAgentProvider(server.url, timeout=30)
        provider.check_available()  # something answers: an agent exists, obtain() says what
        with pytest.raises(EvidenceError, match=f"{MAX_AGENT_INFO_BYTES}-byte limit"):
            provider.obtain(BINDING)


def test_a_run_against_an_endless_agent_exits_3_within_1_gib(tmp_path: Path) -> None:
    """The whole `run` in a process that may not map more than 1 GiB: reading the endless
    answer whole would end in MemoryError (exit 9); the cap makes it exit 3, no envelope."""
    out = tmp_path / "envelope.json"
    with hs.HostileServer(_agent(hs.endless_chunked)) as server:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _LIMITED_CLI,
                "run",
                "--corpus",
                str(EXAMPLE_CORPUS),
                "--run-id",
                "agent-1",
                "--tenant",
                "acme",
                "--evidence",
                "coco-aa",
                "--agent-url",
                server.url,
                "--agent-encoding",
                "sha512",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parents[2],
            timeout=300,
        )
    assert done.returncode == 3, done.stderr
    assert f"more than the {MAX_AGENT_EVIDENCE_BYTES}-byte limit" in done.stderr
    assert not out.exists()
