"""The blocks of one ``cases.jsonl`` scanned by several processes at once.

The corpus checksum's leaves are independent (one per block of 256 cases), so the file can be
cut at block ends and each part validated and hashed by its own :class:`Scanner`, the same
code on the same bytes as a single pass (the chunks only start elsewhere, and every chunk
path hashes the same bytes for the same lines). This process scans the first part; each
other part is scanned in a child made by ``fork`` (the code is already imported, so a child
costs milliseconds), which sends back its leaves, labels and first and last case id.

Only the wall time shrinks: the work (CPU time) is that of one pass, plus one count of the
newlines before each cut and a fork per part. Fork is used only in a process without other
threads (a forked copy of a threaded process can deadlock on a lock another thread held); a
process with threads, a small file, one CPU or ``ATTESTED_REPLAY_CHECKSUM_WORKERS=1`` scans
in one pass.

The result and every error are the single pass's: the parts are joined in order, and if any
part failed (an invalid line, a child that died, a path that no longer names the file open
here) or does not follow its predecessor (ids not ascending across the cut), the children are
stopped and this process scans the whole file again in one pass, which meets the same first
error and writes the same message (which error comes first can depend on how the file was cut
into chunks, so only the single pass says).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from attestation.contracts import EVALUATION_BLOCK_CASES
from runner.corpus.checksum import CHUNK_BYTES, Progress, ScannedPart, Scanner, scan_lines
from runner.corpus.errors import CorpusError
from runner.corpus.jsonio import open_corpus_file
from runner.errors import UsageError

#: The environment variable that sets the number of processes (``1``: one pass, no fork).
WORKERS_VARIABLE: Final = "ATTESTED_REPLAY_CHECKSUM_WORKERS"
#: At most this many processes, whatever the CPUs.
MAX_WORKERS: Final = 16
#: A part smaller than this is not worth a process.
MIN_PART_BYTES: Final = 4 << 20


def worker_count() -> int:
    """The processes a scan may use: ``ATTESTED_REPLAY_CHECKSUM_WORKERS`` if set, else the
    CPUs this process may run on.

    Raises:
        UsageError: the variable is not an integer from 1 to :data:`MAX_WORKERS`.
    """
    text = os.environ.get(WORKERS_VARIABLE)
    if text is None:
        return min(len(os.sched_getaffinity(0)), MAX_WORKERS)
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_WORKERS):
        raise UsageError(
            f"{WORKERS_VARIABLE}={text!r}: expected an integer from 1 to {MAX_WORKERS}"
        )
    return int(text)


def part_count(size: int, workers: int, min_part_bytes: int = MIN_PART_BYTES) -> int:
    """How many parts a file of ``size`` bytes is cut into (1: a single pass)."""
    if threading.active_count() > 1:
        return 1
    return max(1, min(workers, size // max(min_part_bytes, 1)))


def part_starts(handle: BinaryIO, size: int, parts: int) -> list[tuple[int, int]]:
    """Up to ``parts`` (offset, line) pairs where parts of about equal size start, each at the
    start of the line of rank ``line``, a multiple of the block size; the first is (0, 0).

    Only newlines are counted: a line is whatever lies between two of them, as
    :func:`scan_lines` sees it (JSON text holds no raw newline inside a value)."""
    starts = [(0, 0)]
    position = lines = 0
    handle.seek(0)
    for index in range(1, parts):
        target = max(size * index // parts, starts[-1][0] + 1)
        while position < target:
            data = handle.read(min(CHUNK_BYTES, target - position))
            if not data:
                return starts
            lines += data.count(b"\n")
            position += len(data)
        handle.seek(position - 1)
        at_line_start = handle.read(1) == b"\n"
        need = -lines % EVALUATION_BLOCK_CASES
        if need == 0 and (not at_line_start or position == starts[-1][0]):
            need = EVALUATION_BLOCK_CASES  # the next block end (never an empty part)
        while need:
            data = handle.read(CHUNK_BYTES)
            if not data:
                return starts
            found = data.count(b"\n")
            if found < need:
                need -= found
                lines += found
                position += len(data)
                continue
            end = -1
            for _ in range(need):
                end = data.index(b"\n", end + 1)
            lines += need
            position += end + 1
            handle.seek(position)
            need = 0
        if position >= size:
            return starts
        starts.append((position, lines))
    return starts


def scan_part(
    path: Path,
    start: int,
    line: int,
    stop: int | None,
    *,
    collect_labels: bool,
    file_id: tuple[int, int],
) -> ScannedPart:
    """Scan the lines of ``path`` from byte ``start`` (the line of rank ``line``) to byte
    ``stop`` (or the end).

    Raises:
        CorpusError: ``path`` is no longer the file ``file_id`` (device, inode) names, the one
            the parent opened: the operator controls the directory and may have replaced it
            (or repointed a symbolic link) since, and a part of other bytes must not be joined.
    """
    scanner = Scanner(collect_labels=collect_labels, line_base=line)
    with open_corpus_file(path) as handle:
        if _file_id(handle) != file_id:
            raise CorpusError(path.name, "was replaced while it was being read")
        handle.seek(start)
        scan_lines(handle, scanner, size=None if stop is None else stop - start)
    return scanner.part()


def _file_id(handle: BinaryIO) -> tuple[int, int]:
    """The (device, inode) of an open file."""
    status = os.fstat(handle.fileno())
    return status.st_dev, status.st_ino


class _Child:
    """A forked process scanning one part, and the pipe its result comes back on."""

    def __init__(self, pid: int, reader: int) -> None:
        self.pid = pid
        self.reader = reader
        self.reader_open = True
        self.reaped = False

    def result(self) -> ScannedPart | None:
        """The child's part, or None if it failed in any way (the caller scans it itself)."""
        self.reader_open = False  # the file object owns it now, and closes it
        with os.fdopen(self.reader, "rb") as pipe:
            payload = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        self.reaped = True
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or not payload:
            return None
        part = pickle.loads(payload)  # noqa: S301 (our own child's bytes, through our pipe)
        return part if isinstance(part, ScannedPart) else None

    def stop(self) -> None:
        """Close the pipe and kill and reap the child, if its result was not read."""
        if self.reader_open:
            os.close(self.reader)
            self.reader_open = False
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.reaped = True


def _fork_part(
    path: Path,
    start: int,
    line: int,
    stop: int | None,
    *,
    collect_labels: bool,
    file_id: tuple[int, int],
) -> _Child:
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: scan, send the part (or nothing), never return
        code = 1
        try:
            os.close(reader)
            part = scan_part(
                path, start, line, stop, collect_labels=collect_labels, file_id=file_id
            )
            with os.fdopen(writer, "wb") as pipe:
                pipe.write(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    return _Child(pid, reader)


@contextlib.contextmanager
def _children(
    path: Path, starts: list[tuple[int, int]], *, collect_labels: bool, file_id: tuple[int, int]
) -> Iterator[list[_Child]]:
    children: list[_Child] = []
    try:
        for index in range(1, len(starts)):
            start, line = starts[index]
            stop = starts[index + 1][0] if index + 1 < len(starts) else None
            children.append(
                _fork_part(path, start, line, stop, collect_labels=collect_labels, file_id=file_id)
            )
        yield children
    finally:
        for child in children:
            child.stop()


def scan_in_parts(
    path: Path,
    handle: BinaryIO,
    *,
    collect_labels: bool,
    workers: int,
    progress: Progress | None = None,
    min_part_bytes: int = MIN_PART_BYTES,
) -> Scanner:
    """A scanner fed every line of ``handle`` (``path``, open at its start), in parts scanned
    by up to ``workers`` processes: the scanner one pass leaves, or the error it raises."""
    size = handle.seek(0, 2)
    parts = part_count(size, workers, min_part_bytes)
    starts = part_starts(handle, size, parts) if parts > 1 else [(0, 0)]
    handle.seek(0)
    if len(starts) > 1:
        scanner = _joined_parts(path, handle, starts, collect_labels, progress)
        if scanner is not None:
            return scanner
        handle.seek(0)  # a part failed: one pass meets the same first error, in order
    scanner = Scanner(collect_labels=collect_labels)
    scan_lines(handle, scanner, progress=progress)
    return scanner


def _joined_parts(
    path: Path,
    handle: BinaryIO,
    starts: list[tuple[int, int]],
    collect_labels: bool,
    progress: Progress | None,
) -> Scanner | None:
    """The parts scanned at once and joined in order; None if any failed or does not
    follow the one before."""
    scanner = Scanner(collect_labels=collect_labels)
    # Each child opens ``path`` anew: it scans only if that is still the file open here.
    file_id = _file_id(handle)
    with _children(path, starts, collect_labels=collect_labels, file_id=file_id) as children:
        try:
            scan_lines(handle, scanner, size=starts[1][0], progress=progress)
        except CorpusError:
            return None  # which error comes first is for the single pass to say
        for index, child in enumerate(children, start=1):
            part = child.result()
            if part is None:
                return None
            whole_blocks = index + 1 < len(starts)
            if whole_blocks and part.count != starts[index + 1][1] - starts[index][1]:
                return None
            if not scanner.join(part):
                return None
            if progress is not None:
                progress(scanner.count, None)
    return scanner
