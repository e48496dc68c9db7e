"""The run command's other outputs and inputs: demo, corpus URLs, termination log, framing."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from attestation.binding import sha256_digest
from attestation.cli import main as verify_main
from runner.cli import main as runner_main
from runner.commands.run import FRAME_PREFIX
from runner.replay import compute_checksum
from tests.e2e.conftest import EXAMPLE_CORPUS, GenuineRun

CORPUS_FILES = ("cases.jsonl", "runs.jsonl", "marks.json", "plan.json")


def _archive(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _corpus_entries(prefix: str = "corpus/") -> dict[str, bytes]:
    return {prefix + name: (EXAMPLE_CORPUS / name).read_bytes() for name in CORPUS_FILES}


@pytest.fixture
def archive_server() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A loopback HTTP server serving whatever archives the test puts in the dict."""
    served: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


def _run(state_dir: Path, corpus: str, out: Path, *extra: str) -> int:
    return runner_main(
        [
            "run",
            "--corpus",
            corpus,
            "--run-id",
            "url-run-1",
            "--tenant",
            "acme",
            "--evidence",
            "simulated",
            "--state-dir",
            str(state_dir),
            "--out",
            str(out),
            *extra,
        ]
    )


def test_corpus_from_a_url_replays_like_the_directory(
    archive_server: tuple[str, dict[str, bytes]], state_dir: Path, tmp_path: Path
) -> None:
    base, served = archive_server
    served["/corpus.tar.gz"] = _archive(_corpus_entries())
    checksum = compute_checksum(EXAMPLE_CORPUS)
    out = tmp_path / "envelope.json"
    assert _run(state_dir, f"{base}/corpus.tar.gz", out, "--expect-checksum", checksum) == 0
    envelope = json.loads(out.read_bytes())
    assert envelope["binding"]["corpusChecksum"] == checksum


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
        ({**_corpus_entries(), "corpus/extra.txt": b"x"}, "extra-file"),
        ({"../cases.jsonl": b"{}", **_corpus_entries("")}, "path-traversal"),
        ({k: v for k, v in _corpus_entries().items() if "plan" not in k}, "missing-file"),
        ({**_corpus_entries("a/"), "b/cases.jsonl": b"{}"}, "two-directories"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_bad_corpus_archives_are_refused(
    archive_server: tuple[str, dict[str, bytes]],
    state_dir: Path,
    tmp_path: Path,
    entries: dict[str, bytes],
    reason: str,
) -> None:
    base, served = archive_server
    served[f"/{reason}.tar.gz"] = _archive(entries)
    out = tmp_path / "envelope.json"
    assert _run(state_dir, f"{base}/{reason}.tar.gz", out) == 1
    assert not out.exists()


def test_corpus_url_not_found_and_not_an_archive(
    archive_server: tuple[str, dict[str, bytes]], state_dir: Path, tmp_path: Path
) -> None:
    base, served = archive_server
    served["/garbage.tar.gz"] = b"not gzip at all"
    assert _run(state_dir, f"{base}/absent.tar.gz", tmp_path / "a.json") == 1
    assert _run(state_dir, f"{base}/garbage.tar.gz", tmp_path / "b.json") == 1


def test_plain_http_is_refused_off_loopback(state_dir: Path, tmp_path: Path) -> None:
    assert _run(state_dir, "http://corpus.example/corpus.tar.gz", tmp_path / "e.json") == 9


def test_termination_log_and_framed_envelope(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "envelope.json"
    termination = tmp_path / "termination-log"
    extra = ("--termination-log", str(termination), "--frame-envelope")
    assert _run(state_dir, str(EXAMPLE_CORPUS), out, *extra) == 0
    envelope_bytes = out.read_bytes()
    frames = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith(FRAME_PREFIX)
    ]
    assert [base64.b64decode(line.removeprefix(FRAME_PREFIX)) for line in frames] == [
        envelope_bytes
    ]
    message = json.loads(termination.read_text())
    envelope = json.loads(envelope_bytes)
    assert message == {
        "v": 1,
        "runId": "url-run-1",
        "envelope": sha256_digest(envelope_bytes),
        "result": envelope["binding"]["resultDigest"],
        "corpusChecksum": envelope["binding"]["corpusChecksum"],
    }
    assert len(termination.read_bytes()) < 4096


def test_omit_result_keeps_the_digest_bound(
    state_dir: Path, tmp_path: Path, genuine_run: GenuineRun
) -> None:
    out = tmp_path / "envelope.json"
    assert _run(state_dir, str(EXAMPLE_CORPUS), out, "--omit-result") == 0
    envelope = json.loads(out.read_bytes())
    assert "result" not in envelope
    assert (tmp_path / "envelope.json.result.json").exists()
    expected = json.loads(genuine_run.expected.read_bytes())
    expected["runId"] = "url-run-1"
    expected_path = tmp_path / "expected.json"
    expected_path.write_text(json.dumps(expected))
    assert verify_main(["--envelope", str(out), "--expected", str(expected_path)]) == 0


def test_unknown_evidence_provider_is_a_usage_error(state_dir: Path, tmp_path: Path) -> None:
    code = runner_main(
        [
            *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "r", "--tenant", "t"),
            *("--evidence", "magic", "--out", str(tmp_path / "e.json")),
        ]
    )
    assert code == 9


def test_demo_runs_end_to_end(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert runner_main(["demo", "--out-dir", str(tmp_path), "--state-dir", str(state_dir)]) == 0
    out = capsys.readouterr().out
    assert "VERIFIED" in out
    assert "NOT VERIFIED: binding (exit 7)" in out
    assert "NOT VERIFIED: untrusted-chain (exit 2)" in out
    produced = sorted(path.name for path in tmp_path.iterdir())
    assert produced == [
        "envelope.json",
        "envelope.json.result.json",
        "expected-without-simulated-root.json",
        "expected.json",
        "tampered-envelope.json",
    ]


def test_run_publishes_to_a_directory_target(state_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "published"
    out = tmp_path / "envelope.json"
    assert _run(state_dir, str(EXAMPLE_CORPUS), out, "--publish", f"dir://{target}") == 0
    envelope_bytes = out.read_bytes()
    digest = sha256_digest(envelope_bytes).removeprefix("sha256:")
    stored = target / "acme" / "envelopes" / f"sha256-{digest}.json"
    assert stored.read_bytes() == envelope_bytes
    assert (target / "acme" / "runs" / "url-run-1").read_text().strip() == f"sha256:{digest}"
