"""configfs-tsm provider against the emulated kernel tree (see emulators.py)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from attestation.simulated_amd import SimulatedAmd
from runner.errors import EvidenceError, EvidenceUnavailableError
from runner.evidence.certtable import GUID_ARK, GUID_ASK, GUID_VCEK
from runner.evidence.common import ReportDataMismatchError
from runner.evidence.configfs_tsm import ConfigfsAccess, ConfigfsTsmProvider
from runner.evidence.sev_guest import PAGE_SIZE
from runner.exit_codes import exit_code_for
from tests.evidence.emulators import EmulatedConfigfs, assert_chain_signs


def _provider(tmp_path: Path, fs: EmulatedConfigfs, attempts: int = 3) -> ConfigfsTsmProvider:
    root = tmp_path / "tsm" / "report"
    root.mkdir(parents=True)
    return ConfigfsTsmProvider(root, attempts=attempts, access=fs)


def test_report_over_sha512_of_binding_with_chain(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    fs = EmulatedConfigfs(sim_amd)
    evidence = _provider(tmp_path, fs).obtain(binding)
    assert evidence.provider == "configfs-tsm"
    assert evidence.report_data_encoding == "sha512"
    assert evidence.report[0x50:0x90] == hashlib.sha512(binding).digest()
    assert_chain_signs(evidence.report, evidence.cert_chain, sim_amd)
    assert len(fs.removed) == 1
    assert not fs.removed[0].exists()  # the entry was removed


def test_generation_race_retries_with_a_fresh_entry(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    fs = EmulatedConfigfs(sim_amd, concurrent_writes=1)
    evidence = _provider(tmp_path, fs).obtain(binding)
    assert evidence.report[0x50:0x90] == hashlib.sha512(binding).digest()
    assert len(fs.removed) == 2  # first entry discarded, second used


def test_generation_race_every_time_is_an_error(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    fs = EmulatedConfigfs(sim_amd, concurrent_writes=5)
    with pytest.raises(EvidenceError, match="during each of 2 attempts") as info:
        _provider(tmp_path, fs, attempts=2).obtain(binding)
    assert type(info.value) is EvidenceError
    assert not isinstance(info.value, EvidenceUnavailableError)
    assert exit_code_for(info.value) == 3
    assert len(fs.removed) == 2


def test_missing_tree_is_unavailable(tmp_path: Path, binding: bytes) -> None:
    provider = ConfigfsTsmProvider(tmp_path / "absent")
    with pytest.raises(EvidenceUnavailableError, match="does not exist") as caught:
        provider.obtain(binding)
    assert type(caught.value) is EvidenceUnavailableError


def test_no_provider_registered_is_unavailable(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    fs = EmulatedConfigfs(sim_amd, register_provider=False)
    with pytest.raises(EvidenceUnavailableError, match="no TSM provider registered") as caught:
        _provider(tmp_path, fs).obtain(binding)
    assert type(caught.value) is EvidenceUnavailableError


def test_wrong_provider_is_unavailable_and_entry_removed(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    fs = EmulatedConfigfs(sim_amd, provider="tdx_guest")
    with pytest.raises(EvidenceUnavailableError, match="provider is 'tdx_guest'") as caught:
        _provider(tmp_path, fs).obtain(binding)
    assert type(caught.value) is EvidenceUnavailableError
    assert len(fs.removed) == 1


def test_empty_auxblob_gives_empty_chain(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    fs = EmulatedConfigfs(sim_amd, certs=[])
    assert _provider(tmp_path, fs).obtain(binding).cert_chain == ()


def test_auxblob_table_with_page_padding(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    fs = EmulatedConfigfs(
        sim_amd, certs=[(GUID_ARK, b"ark"), (GUID_ASK, b"ask"), (GUID_VCEK, b"v")]
    )
    evidence = _provider(tmp_path, fs).obtain(binding)
    assert evidence.cert_chain == (b"v", b"ask", b"ark")
    assert PAGE_SIZE == 4096


def test_malformed_auxblob_is_an_error(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    class BadAux(EmulatedConfigfs):
        def read(self, path: Path) -> bytes:
            data = super().read(path)
            return b"\x01" * 30 if path.name == "auxblob" else data

    with pytest.raises(EvidenceError, match="auxblob: certificate table") as caught:
        _provider(tmp_path, BadAux(sim_amd)).obtain(binding)
    assert type(caught.value) is EvidenceError


def test_report_over_other_data_is_refused(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    class Liar(EmulatedConfigfs):
        def write(self, path: Path, data: bytes) -> None:
            super().write(path, bytes(64) if path.name == "inblob" else data)

    with pytest.raises(
        ReportDataMismatchError, match=r"REPORT_DATA .* is not what was requested"
    ) as caught:
        _provider(tmp_path, Liar(sim_amd)).obtain(binding)
    assert type(caught.value) is ReportDataMismatchError


def test_kernel_without_auxblob_gives_empty_chain(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    class NoAux(EmulatedConfigfs):
        def read(self, path: Path) -> bytes:
            if path.name == "auxblob":
                raise FileNotFoundError(path)
            return super().read(path)

    assert _provider(tmp_path, NoAux(sim_amd)).obtain(binding).cert_chain == ()


def test_unreadable_generation_is_an_error(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    class BadGeneration(EmulatedConfigfs):
        def read(self, path: Path) -> bytes:
            return b"many\n" if path.name == "generation" else super().read(path)

    with pytest.raises(EvidenceError, match="generation 'many' is not a number") as caught:
        _provider(tmp_path, BadGeneration(sim_amd)).obtain(binding)
    assert type(caught.value) is EvidenceError


class _Tampered(EmulatedConfigfs):
    """The emulated kernel, except that one attribute is swapped for something hostile just
    before the provider reads it; the provider's own (real) read then meets it."""

    target: str = ""
    swap: Callable[[Path], None] = staticmethod(lambda _path: None)

    def read(self, path: Path) -> bytes:
        if path.name != self.target:
            return super().read(path)
        path.unlink()
        self.swap(path)
        return ConfigfsAccess.read(self, path)


def _swap_fifo(path: Path) -> None:
    os.mkfifo(path)


def _swap_link_to_a_file(path: Path) -> None:
    (path.parent / "elsewhere").write_text("sev_guest\n")
    path.symlink_to("elsewhere")


@pytest.mark.parametrize(
    "case",
    [
        (
            "outblob",
            lambda p: p.symlink_to("/dev/zero"),
            "reading outblob failed: is a symbolic link",
        ),
        (
            "outblob",
            lambda p: p.write_bytes(b"\0" * 65536),
            "reading outblob failed: is larger than 32768 bytes",
        ),
        (
            "auxblob",
            lambda p: p.write_bytes(b"\0" * (1 << 20)),
            "reading auxblob failed: is larger than 32768 bytes",
        ),
        ("generation", _swap_fifo, "reading generation failed: is a FIFO, not a regular file"),
        (
            "generation",
            lambda p: p.write_bytes(b"1" * 8192),
            "reading generation failed: is larger than 4096 bytes",
        ),
        (
            "provider",
            _swap_link_to_a_file,
            "reading provider failed: is a symbolic link",
        ),
    ],
    ids=[
        "outblob-dev-zero",
        "outblob-64KiB",
        "auxblob-1MiB",
        "generation-fifo",
        "generation-8KiB",
        "provider-link",
    ],
)
def test_hostile_attributes_are_refused_without_blocking_or_reading_on(
    tmp_path: Path,
    sim_amd: SimulatedAmd,
    binding: bytes,
    case: tuple[str, Callable[[Path], None], str],
) -> None:
    target, swap, message = case
    fs = _Tampered(sim_amd)
    fs.target, fs.swap = target, swap
    with pytest.raises(EvidenceError, match=message) as caught:
        _provider(tmp_path, fs).obtain(binding)
    assert exit_code_for(caught.value) == 3
    assert len(fs.removed) == 1  # the entry is removed all the same


def test_an_inblob_fifo_is_refused_without_blocking(
    tmp_path: Path, sim_amd: SimulatedAmd, binding: bytes
) -> None:
    class FifoInblob(EmulatedConfigfs):
        def write(self, path: Path, data: bytes) -> None:
            path.unlink()
            os.mkfifo(path)  # no reader: a blocking open for writing would wait forever
            ConfigfsAccess.write(self, path, data)

    with pytest.raises(EvidenceError, match=r"writing inblob failed: .*No such device"):
        _provider(tmp_path, FifoInblob(sim_amd)).obtain(binding)
