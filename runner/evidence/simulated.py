"""Simulated evidence: real report layout and signatures from this machine's simulated AMD.

Used only when asked for by name (``--evidence simulated``). A tenant accepts such evidence
only by pinning the simulated root's fingerprint in its expected-values file.

The simulated AMD (:mod:`attestation.simulated_amd`) is kept under ``<state dir>/simulated-amd/``
(see :mod:`runner.statedir`), created on first use and never replaced: a tenant may have pinned it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from attestation.abi.product import ProductLine
from attestation.envelope.binding import report_data_from_canonical
from attestation.simulated_amd import SimulatedAmd
from attestation.simulated_amd import state as simulated_state
from runner.errors import InputError, UsageError
from runner.evidence.base import Evidence
from runner.statedir import default_state_dir
from runner.workload import code_digest

SIMULATED_PROVIDER: Final = "simulated"
SIMULATED_AMD_DIR: Final = "simulated-amd"


def simulated_amd_dir(state_dir: Path | None = None) -> Path:
    """The directory holding the simulated AMD's keys and certificates."""
    return (default_state_dir() if state_dir is None else state_dir) / SIMULATED_AMD_DIR


def load_or_create_simulated_amd(
    state_dir: Path | None = None,
    *,
    factory: Callable[[], SimulatedAmd] | None = None,
) -> SimulatedAmd:
    """The simulated AMD of this state dir, created on first use.

    Raises:
        InputError: the state exists but is incomplete or corrupt (it is never replaced).
        UsageError: the state directory cannot be created.
    """
    directory = simulated_amd_dir(state_dir)
    try:
        return simulated_state.load_or_create(directory, factory=factory)
    except simulated_state.StateError as exc:
        raise InputError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(
            f"cannot create the simulated PKI state in {directory.parent}: {exc.strerror or exc}"
            " (choose another --state-dir or ATTESTED_REPLAY_STATE_DIR)"
        ) from exc


def load_simulated_amd(state_dir: Path | None = None) -> SimulatedAmd:
    """The simulated AMD of this state dir, which must exist already: for commands that pin
    or show its root, where creating a new one would trust a root that signed nothing.

    Raises:
        UsageError: there is no simulated PKI in the state directory.
        InputError: the state exists but is incomplete or corrupt.
    """
    directory = simulated_amd_dir(state_dir)
    if not directory.is_dir():
        where = "the default state directory" if state_dir is None else f"--state-dir {state_dir}"
        raise UsageError(
            f"{where}: no simulated PKI in {directory.parent} (a simulated run or "
            "`attested-replay simulate root` creates one)"
        )
    try:
        return simulated_state.load(directory)
    except simulated_state.StateError as exc:
        raise InputError(str(exc)) from exc


def simulated_root_fingerprint(state_dir: Path | None = None) -> str:
    """``sha256:<hex>`` of the simulated ARK of this state dir (created on first use)."""
    return load_or_create_simulated_amd(state_dir).root_fingerprint


def simulated_measurement() -> bytes:
    """The MEASUREMENT simulated reports carry: SHA-384 over a label and the code digest,
    so that a change of code changes it, as a change of guest image would on hardware."""
    return hashlib.sha384(b"attested-replay simulated launch\0" + code_digest().encode()).digest()


class SimulatedProvider:
    """Signs reports with the simulated PKI kept in the state directory."""

    name = SIMULATED_PROVIDER

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        product_line: ProductLine = ProductLine.MILAN,
        measurement: bytes | None = None,
        host_data: bytes | None = None,
    ) -> None:
        self._state_dir = state_dir
        self._product_line = product_line
        self._measurement = measurement if measurement is not None else simulated_measurement()
        self._host_data = host_data if host_data is not None else bytes(32)

    def check_available(self) -> None:
        """The simulated PKI is always available (it is created on first use)."""

    def obtain(self, canonical_binding: bytes) -> Evidence:
        amd = load_or_create_simulated_amd(self._state_dir)
        report_data = report_data_from_canonical(canonical_binding, "sha512")
        report = amd.sign_report(
            report_data=report_data,
            product_line=self._product_line,
            measurement=self._measurement,
            host_data=self._host_data,
        )
        chain_pem = amd.endorsement_pem(report)
        certificates = x509.load_pem_x509_certificates(chain_pem.encode("ascii"))
        return Evidence(
            report=report,
            cert_chain=tuple(cert.public_bytes(Encoding.DER) for cert in certificates),
            provider=SIMULATED_PROVIDER,
            report_data_encoding="sha512",
        )
