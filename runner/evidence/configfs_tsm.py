"""Evidence from Linux configfs-tsm (``/sys/kernel/config/tsm/report/<entry>/``, Linux >= 6.7).

One fresh entry directory per request: write the 64 REPORT_DATA bytes to ``inblob``, read
``outblob`` (the bare 1184-byte report for ``sev_guest``) and ``auxblob`` (the certificate
table), then check that ``generation`` equals the number of writes we made. A larger value
means another writer changed the entry between our write and our read, so the report may be
over someone else's data: we retry with a new entry, then give up. The entry is always removed.

All filesystem access goes through :class:`ConfigfsAccess` so tests can run the provider on a
temporary directory whose emulator reacts to writes the way the kernel does.

Every attribute is the kernel's regular file: it is opened without following symbolic links
and without blocking, checked to be a regular file, and read with a cap, so an entry whose
``outblob`` points at ``/dev/zero`` or whose ``generation`` is a FIFO is refused, not read
forever. The caps are the kernel's own: ``outblob`` and ``auxblob`` are configfs binary
attributes of at most ``TSM_OUTBLOB_MAX`` (``SZ_32K``, include/linux/tsm.h, Linux 6.7;
``TSM_REPORT_OUTBLOB_MAX`` later), the others text attributes of at most a page.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Final

import structlog

from attestation.envelope.binding import report_data_from_canonical
from attestation.files import read_regular
from runner.errors import EvidenceError, EvidenceUnavailableError
from runner.evidence.base import Evidence
from runner.evidence.certtable import CertTableError, chain_from_table, parse_cert_table
from runner.evidence.common import check_report

DEFAULT_ROOT: Final = Path("/sys/kernel/config/tsm/report")
EXPECTED_PROVIDER: Final = "sev_guest"
DEFAULT_ATTEMPTS: Final = 3
#: ``TSM_OUTBLOB_MAX``: the kernel never returns a larger ``outblob`` or ``auxblob``.
MAX_BLOB_BYTES: Final = 32 * 1024
#: configfs text attributes (``provider``, ``generation``) fit in one page.
MAX_TEXT_ATTRIBUTE_BYTES: Final = 4096
_BLOBS: Final = frozenset({"outblob", "auxblob", "manifestblob"})
_log = structlog.get_logger(__name__)


class ConfigfsAccess:
    """The syscalls the provider makes; the real kernel interface by default."""

    def make_entry(self, root: Path) -> Path:
        path = root / f"attested-replay-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir(mode=0o700)
        return path

    def write(self, path: Path, data: bytes) -> None:
        # Not blocking on a FIFO (ENXIO without a reader), not following a link, and only
        # into a regular file; then one write(2) call: configfs binary attributes take the
        # whole blob at once.
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
        fd = os.open(path, flags)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(path))
            os.set_blocking(fd, True)
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):
            raise OSError(errno.EIO, f"short write to {path}: {written} of {len(data)} bytes")

    def read(self, path: Path) -> bytes:
        limit = MAX_BLOB_BYTES if path.name in _BLOBS else MAX_TEXT_ATTRIBUTE_BYTES
        return read_regular(path, limit, follow_symlinks=False)

    def remove_entry(self, path: Path) -> None:
        path.rmdir()


class ConfigfsTsmProvider:
    """SEV-SNP evidence through configfs-tsm; REPORT_DATA = SHA-512 of the binding."""

    name = "configfs-tsm"

    def __init__(
        self,
        root: Path = DEFAULT_ROOT,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        access: ConfigfsAccess | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.root = root
        self.attempts = attempts
        self.access = access or ConfigfsAccess()

    def check_available(self) -> None:
        if not self.root.is_dir():
            raise EvidenceUnavailableError(
                f"configfs-tsm: {self.root} does not exist (needs Linux >= 6.7 with "
                "CONFIG_TSM_REPORTS and configfs mounted at /sys/kernel/config)"
            )

    def obtain(self, canonical_binding: bytes) -> Evidence:
        report_data = report_data_from_canonical(canonical_binding, "sha512")
        self.check_available()
        for attempt in range(1, self.attempts + 1):
            result = self._one_request(report_data)
            if result is not None:
                report, aux = result
                return Evidence(
                    report=check_report(report, report_data, provider=self.name),
                    cert_chain=self._chain(aux),
                    provider=self.name,
                    report_data_encoding="sha512",
                )
            _log.warning("configfs_tsm_generation_race", attempt=attempt)
        raise EvidenceError(
            f"configfs-tsm: another writer changed the report entry during each of "
            f"{self.attempts} attempts (generation moved); no trustworthy report"
        )

    def _one_request(self, report_data: bytes) -> tuple[bytes, bytes] | None:
        try:
            entry = self.access.make_entry(self.root)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                raise EvidenceUnavailableError(
                    f"configfs-tsm: no TSM provider registered under {self.root} "
                    "(the sev-guest driver is not loaded: not an SEV-SNP guest?)"
                ) from exc
            raise EvidenceError(
                f"configfs-tsm: cannot create an entry in {self.root}: {exc}"
            ) from exc
        try:
            provider = self._read(entry / "provider").decode("ascii", "replace").strip()
            if provider != EXPECTED_PROVIDER:
                raise EvidenceUnavailableError(
                    f"configfs-tsm: provider is {provider!r}, not {EXPECTED_PROVIDER!r} "
                    "(this guest is not SEV-SNP)"
                )
            try:
                self.access.write(entry / "inblob", report_data)
            except OSError as exc:
                raise EvidenceError(f"configfs-tsm: writing inblob failed: {exc}") from exc
            writes = 1
            report = self._read(entry / "outblob")
            aux = self._read_optional(entry / "auxblob")
            generation_text = self._read(entry / "generation").decode("ascii", "replace").strip()
            try:
                generation = int(generation_text)
            except ValueError as exc:
                raise EvidenceError(
                    f"configfs-tsm: generation {generation_text!r} is not a number"
                ) from exc
            if generation != writes:
                return None
            return report, aux
        finally:
            try:
                self.access.remove_entry(entry)
            except OSError as exc:
                _log.warning("configfs_tsm_rmdir_failed", entry=str(entry), error=str(exc))

    def _read(self, path: Path) -> bytes:
        try:
            return self.access.read(path)
        except OSError as exc:
            raise EvidenceError(
                f"configfs-tsm: reading {path.name} failed: {exc.strerror or exc}"
            ) from exc

    def _read_optional(self, path: Path) -> bytes:
        """An attribute older kernels may lack (``auxblob``): absent means empty."""
        try:
            return self.access.read(path)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise EvidenceError(
                f"configfs-tsm: reading {path.name} failed: {exc.strerror or exc}"
            ) from exc

    def _chain(self, aux: bytes) -> tuple[bytes, ...]:
        try:
            return chain_from_table(parse_cert_table(aux))
        except CertTableError as exc:
            raise EvidenceError(f"configfs-tsm: auxblob: {exc}") from exc
