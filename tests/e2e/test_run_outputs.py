"""The run command's other outputs and inputs: demo, corpus URLs, termination log, framing."""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from attestation.cli import main as verify_main
from attestation.contracts import sha256_digest
from runner.cli import main as runner_main
from runner.errors import SourceUnavailableError
from runner.exit_codes import exit_code_for
from runner.pipeline.corpus_source import fetch_corpus
from runner.pipeline.replay import compute_checksum
from runner.pod_output import FRAME_PREFIX
from runner.workload import current_workload
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
            if served.pop(f"fail-once:{self.path}", None) is not None:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
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
    "extra",
    ["corpus/README.md", "corpus/notes/cases.jsonl", "LICENSE"],
)
def test_other_files_in_an_archive_are_refused(
    archive_server: tuple[str, dict[str, bytes]],
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: str,
) -> None:
    # docs/limits.md: an archive holds the corpus files and nothing else.
    base, served = archive_server
    served["/extras.tar.gz"] = _archive({**_corpus_entries(), extra: b"not the corpus\n"})
    out = tmp_path / "envelope.json"
    assert _run(state_dir, f"{base}/extras.tar.gz", out) == 1
    assert f"corpus archive corpus.tar.gz: entry {extra!r} is not a corpus file" in (
        capsys.readouterr().err
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("entries", "reason"),
    [
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


def test_run_publishes_to_a_directory_target(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "published"
    out = tmp_path / "envelope.json"
    capsys.readouterr()
    assert _run(state_dir, str(EXAMPLE_CORPUS), out, "--publish", f"dir://{target}") == 0
    envelope_bytes = out.read_bytes()
    digest = sha256_digest(envelope_bytes).removeprefix("sha256:")
    stored = target / "acme" / "envelopes" / f"sha256-{digest}.json"
    assert stored.read_bytes() == envelope_bytes
    assert (target / "acme" / "runs" / "url-run-1").read_text().strip() == f"sha256:{digest}"
    # The summary says where the envelope went; the log says it once, as fields.
    captured = capsys.readouterr()
    assert f"  published         dir://{target} (created)" in captured.out.splitlines()
    published = [
        record
        for record in map(json.loads, captured.err.splitlines())
        if record["event"] == "envelope_published"
    ]
    assert [(r["digest"], r["status"], r["target"]) for r in published] == [
        (f"sha256:{digest}", "created", f"dir://{target}")
    ]


def test_run_logs_are_json_lines_carrying_the_run_id(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert _run(state_dir, str(EXAMPLE_CORPUS), tmp_path / "envelope.json") == 0
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [record["event"] for record in records] == [
        "http_environment",
        "process_environment",
        "replayed",
        "evidence_obtained",
        "envelope_self_verified",
        "envelope_written",
    ]
    assert {(record["run_id"], record["tenant"]) for record in records} == {("url-run-1", "acme")}
    # What the run's HTTP clients took from outside their options: certifi's bundle only.
    assert records[0]["ca_bundle_source"] == "certifi"
    assert isinstance(records[0]["ignored"], list)


def test_progress_is_drawn_on_a_terminal_stderr_and_never_on_stdout(
    state_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    controller, terminal_fd = os.openpty()
    terminal = os.fdopen(terminal_fd, "w", encoding="utf-8")
    drawn = bytearray()

    def drain() -> None:  # a pseudo-terminal blocks its writer once its buffer is full
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal side was closed
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    capsys.readouterr()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stderr", terminal)
            # An ordinary interactive terminal, whatever the environment running the tests says.
            patch.setenv("TERM", "xterm-256color")
            for variable in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR"):
                patch.delenv(variable, raising=False)
            code = _run(state_dir, str(EXAMPLE_CORPUS), tmp_path / "envelope.json")
    finally:
        terminal.close()
        reader.join()
        os.close(controller)
    assert code == 0
    assert "replaying" in drawn.decode("utf-8", "replace")
    out = capsys.readouterr().out
    assert out.startswith("run url-run-1 for tenant acme: 3000 cases replayed\n")
    assert "\x1b" not in out
    assert "replaying" not in out


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["--corpus", "{tmp}/nowhere"], 9, "error: --corpus {tmp}/nowhere: no such file"),
        (
            ["--corpus-checksum", "sha256:abc"],
            9,
            "error: --corpus-checksum 'sha256:abc': must be 'sha256:' followed by 64 lowercase",
        ),
        (
            ["--corpus-checksum", "{checksum}", "--run-id", "bad id!"],
            9,
            "error: --run-id 'bad id!': must be 1 to 128 letters, digits, '.', '_' or '-'",
        ),
        (
            ["--corpus-checksum", "{checksum}", "--simulated-root", "sha256:zz"],
            9,
            "error: --simulated-root 'sha256:zz': must be 'sha256:' followed by 64",
        ),
        (
            ["--corpus-checksum", "{checksum}", "--policy", "{tmp}/absent.json"],
            9,
            "error: --policy {tmp}/absent.json: no such file",
        ),
        (
            ["--corpus-checksum", "{checksum}", "--policy", "{tmp}/policy.json"],
            1,
            "policy.json: policy is invalid: bogus: Extra inputs are not permitted",
        ),
        ([], 9, "one of the arguments --corpus --corpus-checksum is required"),
        (
            ["--corpus", str(EXAMPLE_CORPUS), "--corpus-checksum", "{checksum}"],
            9,
            "error: --corpus-checksum: not allowed with argument --corpus",
        ),
    ],
    ids=[
        "missing-corpus",
        "malformed-checksum",
        "bad-run-id",
        "bad-simulated-root",
        "unreadable-policy",
        "invalid-policy",
        "no-corpus-source",
        "two-corpus-sources",
    ],
)
def test_expected_refuses_bad_parameters_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    code: int,
    message: str,
) -> None:
    (tmp_path / "policy.json").write_text('{"bogus": 1}')
    values = {"tmp": str(tmp_path), "checksum": "sha256:" + "a" * 64}
    argv = ["expected", "--run-id", "run-1", *(a.format(**values) for a in arguments)]
    if "--run-id" in arguments:
        argv[1:3] = []
    out = tmp_path / "expected.json"
    capsys.readouterr()
    assert runner_main([*argv, "--out", str(out)]) == code
    assert message.format(**values) in capsys.readouterr().err
    assert not out.exists()


def test_expected_merges_the_policy_and_lowercases_measurements(
    state_dir: Path, tmp_path: Path, genuine_run: GenuineRun
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"allowedVmpl": [0, 1], "measurements": ["ab" * 48]}))
    out = tmp_path / "expected.json"
    measurement = "CD" * 48
    code = runner_main(
        [
            *("expected", "--run-id", "run-7", "--corpus", str(EXAMPLE_CORPUS)),
            *("--policy", str(policy), "--measurement", measurement, "--this-workload"),
            *("--trust-local-simulated-root", "--state-dir", str(state_dir), "--out", str(out)),
        ]
    )
    assert code == 0
    written = json.loads(out.read_bytes())
    assert written["runId"] == "run-7"
    assert written["corpusChecksum"] == compute_checksum(EXAMPLE_CORPUS)
    assert written["allowedVmpl"] == [0, 1]
    assert written["measurements"] == ["cd" * 48]  # the option replaces the policy's list
    assert written["simulatedRoots"] == [genuine_run.root_fingerprint]
    assert written["workloadDigest"] == current_workload().digest


def test_demo_refuses_an_out_dir_that_is_a_file(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    occupied = tmp_path / "occupied"
    occupied.write_text("")
    capsys.readouterr()
    assert runner_main(["demo", "--out-dir", str(occupied), "--state-dir", str(state_dir)]) == 9
    err = capsys.readouterr().err
    assert f"error: --out-dir {occupied}: exists and is not a directory" in err
    assert "internal" not in err


def test_demo_fails_when_a_verdict_is_not_the_one_it_shows(
    state_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A verifier that accepted everything would make the demo's tampering step a lie: the
    # demo must then fail (exit 4, verification failed) rather than print "demo complete".
    from attestation.errors import FailureClass
    from attestation.verify.checks import Check, VerificationResult
    from runner.commands import demo  # the demo asks this verifier for each verdict

    accept_all = VerificationResult.from_checks([Check.passed("all", FailureClass.USAGE, "ok")])
    monkeypatch.setattr(demo, "verify_envelope", lambda *_args, **_kwargs: accept_all)
    capsys.readouterr()
    assert runner_main(["demo", "--out-dir", str(tmp_path), "--state-dir", str(state_dir)]) == 4
    captured = capsys.readouterr()
    assert "error: demo verdicts were exit codes (0, 0, 0), expected (0, 7, 2)" in captured.err
    assert "demo complete" not in captured.out


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--run-id", "bad id!", "--run-id 'bad id!': must be 1 to 128 letters, digits"),
        ("--tenant", "ACME", "--tenant 'ACME': must be a DNS label"),
        ("--nonce", "", "--nonce '': String should have at least 1 character"),
        ("--image-digest", "latest", "--image-digest 'latest': must be 'sha256:' followed by"),
        ("--expect-checksum", "abc", "--expect-checksum 'abc': must be 'sha256:' followed by"),
        ("--result-out", "{out}", "--result-out {out}: is the envelope's own path (--out)"),
    ],
    ids=["run-id", "tenant", "nonce", "image-digest", "expect-checksum", "result-out"],
)
def test_run_refuses_parameters_the_envelope_cannot_carry_before_replaying(  # noqa: PLR0917
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    option: str,
    value: str,
    message: str,
) -> None:
    out = tmp_path / "envelope.json"
    argv = [
        *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "run-1", "--tenant", "acme"),
        *("--evidence", "simulated", "--state-dir", str(state_dir), "--out", str(out)),
    ]
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value.format(out=out)]
    capsys.readouterr()
    assert runner_main(argv) == 9
    err = capsys.readouterr().err
    assert f"error: {message.format(out=out)}" in err
    assert '"event": "replayed"' not in err  # refused before any work
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("provider", "interface", "message"),
    [
        ("sev-guest", "/dev/sev-guest", "error: sev-guest: /dev/sev-guest does not exist"),
        (
            "configfs-tsm",
            "/sys/kernel/config/tsm/report",
            "error: configfs-tsm: /sys/kernel/config/tsm/report does not exist",
        ),
    ],
)
def test_real_evidence_without_its_interface_fails_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str, interface: str, message: str
) -> None:
    if Path(interface).exists():
        pytest.skip(f"this machine has {interface}")
    out = tmp_path / "envelope.json"
    argv = [
        *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "run-1", "--tenant", "acme"),
        *("--evidence", provider, "--out", str(out)),
    ]
    capsys.readouterr()
    assert runner_main(argv) == 3
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("provider", "option"),
    [("sev-guest", "--sev-guest-device"), ("configfs-tsm", "--configfs-root")],
)
def test_real_evidence_at_a_missing_configured_interface_fails_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str, option: str
) -> None:
    """Runs on every machine, SEV-SNP guests included: the interface is a path that is absent."""
    out = tmp_path / "out" / "envelope.json"
    out.parent.mkdir()
    missing = tmp_path / "absent"
    argv = [
        *("run", "--corpus", str(EXAMPLE_CORPUS), "--run-id", "run-1", "--tenant", "acme"),
        *("--evidence", provider, option, str(missing), "--out", str(out)),
    ]
    capsys.readouterr()
    assert runner_main(argv) == 3
    assert f"error: {provider}: {missing} does not exist" in capsys.readouterr().err
    assert list(out.parent.iterdir()) == []
    assert not missing.exists()


def test_image_digest_is_bound_and_can_be_expected(
    state_dir: Path, tmp_path: Path, genuine_run: GenuineRun
) -> None:
    image = "sha256:" + "ab" * 32
    out = tmp_path / "envelope.json"
    assert _run(state_dir, str(EXAMPLE_CORPUS), out, "--image-digest", image) == 0
    assert json.loads(out.read_bytes())["binding"]["imageDigest"] == image
    expected = json.loads(genuine_run.expected.read_bytes())
    expected["runId"] = "url-run-1"
    for pinned, code in ((image, 0), ("sha256:" + "cd" * 32, 8)):
        expected["imageDigest"] = pinned
        path = tmp_path / "expected.json"
        path.write_text(json.dumps(expected))
        assert verify_main(["--envelope", str(out), "--expected", str(path)]) == code


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--publish", "ftp://example/"), "must be dir://PATH or https://"),
        (("--publish", "https://publish.example"), "needs --publish-token-file"),
        (
            ("--publish", "https://publish.example", "--publish-token-file", "absent"),
            "error: --publish-token-file absent: no such file",
        ),
        (("--publish-token-file", "{token}"), "--publish-token-file needs --publish"),
    ],
    ids=["bad-scheme", "no-token", "unreadable-token", "token-without-target"],
)
def test_publication_settings_are_checked_before_the_replay(
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    token = tmp_path / "token"
    token.write_text("arp_operator-token\n")
    out = tmp_path / "envelope.json"
    extra = tuple(part.format(token=token) for part in extra)
    assert _run(state_dir, str(EXAMPLE_CORPUS), out, *extra) == 9
    err = capsys.readouterr().err
    assert message in err
    assert '"event": "replayed"' not in err
    assert sorted(tmp_path.iterdir()) == [token]


def test_a_transient_server_error_is_retried(
    archive_server: tuple[str, dict[str, bytes]], state_dir: Path, tmp_path: Path
) -> None:
    base, served = archive_server
    served["/corpus.tar.gz"] = _archive(_corpus_entries())
    served["fail-once:/corpus.tar.gz"] = b""
    assert _run(state_dir, f"{base}/corpus.tar.gz", tmp_path / "envelope.json") == 0
    assert "fail-once:/corpus.tar.gz" not in served  # the 503 was served, then retried


def test_an_unreachable_corpus_source_is_transient_not_invalid_input(tmp_path: Path) -> None:
    """Exit 8 (not 1): a Job retries the pod instead of failing as for a bad corpus."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SourceUnavailableError, match="failed after 1 retries") as caught:
        fetch_corpus(f"http://127.0.0.1:{port}/c.tar.gz", tmp_path, retries=1, backoff=0)
    assert type(caught.value) is SourceUnavailableError
    assert exit_code_for(caught.value) == 8
