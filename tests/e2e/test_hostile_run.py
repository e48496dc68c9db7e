"""``run`` against inputs the operator made hostile (the corpus, its server, the files in
its directory, the process environment): every attack ends with a specific error, exit 1
(input), 8 (transient) or 9 (refused), and no envelope.

The archives are built in the test (no tool or file from elsewhere); the servers are
tests/hostile_server.py. Peak memory is the tracemalloc peak of the whole run in-process.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
import shutil
import tarfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.cli import main as runner_main
from runner.corpus.runs_index import MAX_RUNS_INDEX_BYTES, RUNS_INDEX_FILE
from runner.pipeline.environment import ProcessEnvironment, process_environment
from runner.pipeline.replay import replay_corpus, write_runs_index
from tests import hostile_server as hs
from tests.e2e.conftest import EXAMPLE_CORPUS
from tests.fifo_guard import fifo

CORPUS_FILES = ("cases.jsonl", "runs.jsonl", "marks.json", "plan.json")
MiB = 1024 * 1024


def _run(state_dir: Path, corpus: str, out: Path, *extra: str) -> int:
    return runner_main(
        [
            "run",
            "--corpus",
            corpus,
            "--run-id",
            "hostile-1",
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


def _tar_gz(blocks: bytes) -> bytes:
    return gzip.compress(blocks + b"\0" * 1024, compresslevel=6)


def _file_entry(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    padding = b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + padding


def _honest_entries() -> bytes:
    return b"".join(
        _file_entry(name, (EXAMPLE_CORPUS / name).read_bytes()) for name in CORPUS_FILES
    )


def _bomb() -> bytes:
    """cases.jsonl declaring 1 GiB of newlines: a 1 MiB .tar.gz that unpacks to 1 GiB."""
    info = tarfile.TarInfo("cases.jsonl")
    info.size = 1 << 30
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        block = b"\n" * MiB
        for _ in range(1024):
            gz.write(block)
        gz.write(b"\0" * 1024)
    return out.getvalue()


def _sparse() -> bytes:
    """One GNU sparse entry whose real size is 64 GiB (the archive is about 150 bytes)."""
    info = tarfile.TarInfo("cases.jsonl")
    info.type = tarfile.GNUTYPE_SPARSE
    block = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    realsize = 64 << 30
    # old GNU sparse header: map at 386 (offset, numbytes), realsize at 483; then the checksum
    block[386:398] = f"{realsize:011o}\0".encode()
    block[398:410] = b"00000000000\0"
    block[483:495] = f"{realsize:011o}\0".encode()
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return _tar_gz(bytes(block))


def _many_entries() -> bytes:
    """400,000 directory entries (about 1 MiB compressed)."""
    info = tarfile.TarInfo("d")
    info.type = tarfile.DIRTYPE
    return gzip.compress(info.tobuf() * 400_000 + b"\0" * 1024, compresslevel=1)


def _pax_chain() -> bytes:
    info = tarfile.TarInfo("g")
    info.type = tarfile.XGLTYPE
    info.pax_headers = {"comment": "a"}
    return _tar_gz(info.tobuf(format=tarfile.PAX_FORMAT) * 20_000)


def _long_name() -> bytes:
    """A GNU long-name header declaring a 1 GiB file name."""
    info = tarfile.TarInfo("././@LongLink")
    info.type = tarfile.GNUTYPE_LONGNAME
    info.size = 1 << 30
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(8):
            gz.write(b"a" * MiB)
    return out.getvalue()


def _special(kind: bytes) -> bytes:
    info = tarfile.TarInfo("cases.jsonl")
    info.type = kind
    info.linkname = "/dev/zero"
    return _tar_gz(info.tobuf(format=tarfile.GNU_FORMAT))


def _oversized_plan() -> bytes:
    info = tarfile.TarInfo("plan.json")
    info.size = 2 * MiB
    return _tar_gz(info.tobuf(format=tarfile.GNU_FORMAT) + b" " * (2 * MiB))


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (_bomb, "declares 1073741824 bytes, more than 200 times the"),
        (_sparse, "entry 'cases.jsonl' is a sparse file"),
        (_many_entries, "has more than 8 entries"),
        (_pax_chain, "header .* is over 65536 bytes"),
        (_long_name, "header .* is over 65536 bytes"),
        (lambda: _special(tarfile.SYMTYPE), "is a symbolic link, not a regular file"),
        (lambda: _special(tarfile.LNKTYPE), "is a hard link, not a regular file"),
        (lambda: _special(tarfile.CHRTYPE), "is a device, not a regular file"),
        (lambda: _special(tarfile.FIFOTYPE), "is a FIFO, not a regular file"),
        (_oversized_plan, "declares 2097152 bytes; plan.json is at most 1048576"),
        (
            lambda: _tar_gz(_honest_entries() + _file_entry("corpus/cases.jsonl", b"{}")),
            "holds cases.jsonl twice",
        ),
    ],
    ids=[
        "gzip-bomb",
        "sparse-64GiB",
        "400k-entries",
        "pax-header-chain",
        "1GiB-long-name",
        "symlink",
        "hard-link",
        "device",
        "fifo",
        "oversized-plan",
        "duplicate",
    ],
)
def test_a_hostile_archive_is_refused_while_unpacking(
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    archive: Callable[[], bytes],
    message: str,
) -> None:
    data = archive()
    out = tmp_path / "envelope.json"
    with hs.HostileServer(hs.answer(200, data)) as server:
        tracemalloc.start()
        try:
            code = _run(state_dir, server.url + "/corpus.tar.gz", out)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert code == 1
    err = capsys.readouterr().err
    assert re.search(r"corpus archive corpus\.tar\.gz: .*" + message, err), err
    assert not out.exists()
    assert peak < len(data) + 32 * MiB


def test_a_file_other_than_the_corpus_files_is_refused(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _tar_gz(_file_entry("README", b"hello") + _honest_entries())
    with hs.HostileServer(hs.answer(200, data)) as server:
        assert _run(state_dir, server.url + "/corpus.tar.gz", tmp_path / "envelope.json") == 1
    assert "corpus archive corpus.tar.gz: entry 'README' is not a corpus file (an archive " in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "envelope.json").exists()


def test_an_honest_archive_still_unpacks(state_dir: Path, tmp_path: Path) -> None:
    with hs.HostileServer(hs.answer(200, _tar_gz(_honest_entries()))) as server:
        assert _run(state_dir, server.url + "/corpus.tar.gz", tmp_path / "envelope.json") == 0


def _indexed_entries(tmp_path: Path, *, stale_block: int | None = None) -> bytes:
    corpus = tmp_path / "indexed"
    shutil.copytree(EXAMPLE_CORPUS, corpus)
    write_runs_index(corpus)
    index = (corpus / RUNS_INDEX_FILE).read_bytes()
    if stale_block is not None:
        document = json.loads(index)
        leaves = document["runs"][0]["leaves"]
        at = 64 * stale_block
        document["runs"][0]["leaves"] = leaves[:at] + "0" * 64 + leaves[at + 64 :]
        index = json.dumps(document).encode()
    return _honest_entries() + _file_entry(RUNS_INDEX_FILE, index)


def test_a_shard_takes_the_runs_index_from_the_archive(state_dir: Path, tmp_path: Path) -> None:
    """The index travels in the archive; a shard checks it against the blocks it hashes
    (here block 4 of 12, shard 1 of 3's first, is wrong in the archive's index)."""
    shard = ("--shard-index", "1", "--shard-count", "3")
    good = _tar_gz(_indexed_entries(tmp_path / "good"))
    with hs.HostileServer(hs.answer(200, good)) as server:
        out = tmp_path / "shard.json"
        assert _run(state_dir, server.url + "/corpus.tar.gz", out, *shard) == 0
    bound = json.loads(out.read_text())["binding"]
    assert bound["evaluationDigest"] == replay_corpus(EXAMPLE_CORPUS).evaluation_digest
    stale = _tar_gz(_indexed_entries(tmp_path / "stale", stale_block=4))
    with hs.HostileServer(hs.answer(200, stale)) as server:
        code = _run(state_dir, server.url + "/corpus.tar.gz", tmp_path / "stale.json", *shard)
    assert code == 1
    assert not (tmp_path / "stale.json").exists()


def test_an_oversized_runs_index_is_refused_while_unpacking(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    info = tarfile.TarInfo(RUNS_INDEX_FILE)
    info.size = MAX_RUNS_INDEX_BYTES + 1
    # A second gzip member of stored random bytes after the tar's end (never reached), so
    # that the archive's size allows the entry's declared size by the ratio bound: the
    # index's own bound is what refuses it.
    padding = gzip.compress(random.Random(5).randbytes(512 * 1024), compresslevel=0)
    data = _tar_gz(_honest_entries() + info.tobuf(format=tarfile.GNU_FORMAT)) + padding
    with hs.HostileServer(hs.answer(200, data)) as server:
        assert _run(state_dir, server.url + "/corpus.tar.gz", tmp_path / "envelope.json") == 1
    assert (
        f"declares {MAX_RUNS_INDEX_BYTES + 1} bytes; runs.index.json is at most "
        f"{MAX_RUNS_INDEX_BYTES}"
    ) in capsys.readouterr().err


@pytest.mark.parametrize(
    "case",
    [
        (hs.drip_body(0.05), ("--corpus-deadline", "1"), 8, "within the 1 s deadline"),
        (hs.drip_headers(0.05), ("--corpus-deadline", "1"), 8, "within the 1 s deadline"),
        (
            hs.answer(503, headers={"Retry-After": "86400"}),
            (),
            8,
            r"asked to wait 86400 s \(more than 120 s\)",
        ),
        (
            hs.answer(302, headers={"Location": "http://203.0.113.7/corpus.tar.gz"}),
            (),
            1,
            "plain http:// is allowed only for loopback hosts, not 203.0.113.7",
        ),
        (hs.declared(5 * 1024**3), (), 1, "exceeds 4294967296 bytes"),
    ],
    ids=["slow-body", "slow-headers", "retry-after-a-day", "redirect-off-loopback", "5GiB"],
)
def test_a_hostile_corpus_server_is_bounded(
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: tuple[hs.Behaviour, tuple[str, ...], int, str],
) -> None:
    behaviour, extra, code, message = case
    out = tmp_path / "envelope.json"
    with hs.HostileServer(behaviour) as server:
        assert _run(state_dir, server.url + "/corpus.tar.gz", out, *extra) == code
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()
    if extra:  # a drip: what it sent before the run hung up (1 s at 0.05 s a byte, 3x slack)
        assert server.sent <= 3 * 1 / 0.05


def test_an_untrusted_corpus_server_is_refused_not_transient(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1, which the Job does not retry: a TLS failure is an answer, not an outage."""
    context, ca = hs.mint_tls(tmp_path)
    out = tmp_path / "envelope.json"
    archive = _tar_gz(_honest_entries())
    with hs.HostileServer(hs.answer(200, archive), tls=context) as server:
        assert _run(state_dir, server.url + "/corpus.tar.gz", out) == 1
        assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err
        assert not out.exists()
        # Named explicitly, the same server is trusted, and the run records it.
        assert _run(state_dir, server.url + "/c.tar.gz", out, "--ca-bundle", str(ca)) == 0
    assert f"CA bundle {ca} (--ca-bundle)" in capsys.readouterr().out


# -- a corpus directory with things other than regular files in it ---------------------------


def _corpus_copy(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in CORPUS_FILES:
        (corpus / name).write_bytes((EXAMPLE_CORPUS / name).read_bytes())
    return corpus


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_a_fifo_in_the_corpus_is_refused_without_blocking(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    corpus = _corpus_copy(tmp_path)
    (corpus / name).unlink()
    out = tmp_path / "envelope.json"
    with fifo(corpus / name):
        assert _run(state_dir, str(corpus), out) == 1
    assert f"{name}: cannot read: is a FIFO, not a regular file" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_dev_zero_in_the_corpus_is_refused_before_reading(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    corpus = _corpus_copy(tmp_path)
    (corpus / name).unlink()
    (corpus / name).symlink_to("/dev/zero")
    out = tmp_path / "envelope.json"
    tracemalloc.start()
    try:
        assert _run(state_dir, str(corpus), out) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert f"{name}: cannot read: is a character device, not a regular file" in err
    assert not out.exists()
    assert peak < 64 * MiB


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_a_byte_order_mark_is_refused(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """docs/replay.md: corpus files are plain UTF-8. A BOM would be skipped by some readers
    and not others."""
    corpus = _corpus_copy(tmp_path)
    (corpus / name).write_bytes(b"\xef\xbb\xbf" + (EXAMPLE_CORPUS / name).read_bytes())
    out = tmp_path / "envelope.json"
    assert _run(state_dir, str(corpus), out) == 1
    assert (
        f"{name}:1: starts with a UTF-8 byte order mark; corpus files are plain UTF-8 "
        "without one" in capsys.readouterr().err
    )
    assert not out.exists()


def test_a_fifo_as_termination_log_does_not_block_the_run(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "envelope.json"
    with fifo(tmp_path / "termination-log") as log_path:
        code = _run(state_dir, str(EXAMPLE_CORPUS), out, "--termination-log", str(log_path))
    assert code == 0
    assert out.exists()  # the message is best effort; the envelope is what counts
    assert "termination_log_unwritable" in capsys.readouterr().err


# -- the process environment -------------------------------------------------------------------


def test_code_loading_variables_are_recorded_and_refused_for_genuine_evidence(
    state_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Set after this interpreter started, OPENSSL_CONF acts on nothing here; the run only
    reads it, which is what is under test."""
    monkeypatch.setenv("OPENSSL_CONF", str(tmp_path / "openssl.cnf"))
    monkeypatch.setenv("HTTPS_PROXY", "http://203.0.113.7:3128")
    out = tmp_path / "envelope.json"
    assert _run(state_dir, str(EXAMPLE_CORPUS), out) == 0  # simulated: recorded only
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.err.splitlines()]
    process = next(r for r in records if r["event"] == "process_environment")
    assert process["in_effect"] == ["OPENSSL_CONF"]
    http = next(r for r in records if r["event"] == "http_environment")
    assert "HTTPS_PROXY" in http["ignored"]
    assert "code variables    in effect: OPENSSL_CONF" in captured.out
    genuine = tmp_path / "genuine.json"
    code = runner_main(
        [
            "run",
            "--corpus",
            str(EXAMPLE_CORPUS),
            "--run-id",
            "env-1",
            "--tenant",
            "acme",
            "--evidence",
            "coco-aa",
            "--agent-url",
            f"http://127.0.0.1:{hs.free_port()}",
            "--out",
            str(genuine),
        ]
    )
    assert code == 9
    assert (
        "refusing to attest with --evidence coco-aa while OPENSSL_CONF is set"
        in capsys.readouterr().err
    )
    assert not genuine.exists()


def test_an_isolated_interpreter_ignores_the_python_variables() -> None:
    environ = {"PYTHONPATH": "/tmp/evil", "LD_PRELOAD": "/tmp/evil.so", "PYTHONHASHSEED": "0"}
    assert process_environment(environ, isolated=True) == ProcessEnvironment(
        in_effect=("LD_PRELOAD",), ignored=("PYTHONPATH",), isolated=True
    )
    assert process_environment(environ, isolated=False).in_effect == ("LD_PRELOAD", "PYTHONPATH")
    assert process_environment({"PYTHONPATH": ""}, isolated=False).in_effect == ()
