"""Evidence providers: REPORT_DATA in, a raw SEV-SNP report and its endorsement out.

``get_provider(name, **options)`` is the registry. Real providers never fall back to the
simulated one; ``auto`` searches only real interfaces (see :mod:`runner.evidence.auto`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal, get_args

from runner.errors import UsageError
from runner.evidence.auto import AutoProvider
from runner.evidence.base import Evidence, EvidenceProvider
from runner.evidence.bundle import load_endorsement_bundle
from runner.evidence.coco_aa import (
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT,
    DEFAULT_WAIT,
    CocoAgentProvider,
)
from runner.evidence.configfs_tsm import DEFAULT_ROOT, ConfigfsTsmProvider
from runner.evidence.sev_guest import DEFAULT_DEVICE, SevGuestProvider

EvidenceKind = Literal["simulated", "coco-aa", "configfs-tsm", "sev-guest", "auto"]
EVIDENCE_CHOICES: Final[tuple[EvidenceKind, ...]] = get_args(EvidenceKind)
#: How coco-aa passes REPORT_DATA (``auto``: from the agent's /info version).
AgentEncoding = Literal["auto", "sha512", "sha256-hex"]
AGENT_ENCODINGS: Final[tuple[AgentEncoding, ...]] = get_args(AgentEncoding)

#: Options ``get_provider`` understands; each provider uses the ones that concern it.
_OPTION_NAMES: Final = frozenset(
    {
        "state_dir",  # simulated: directory of the simulated PKI
        "agent_url",  # coco-aa: attestation-agent base URL
        "agent_encoding",  # coco-aa: "auto" | "sha512" | "sha256-hex"
        "agent_timeout",  # coco-aa: seconds per HTTP request
        "agent_wait",  # coco-aa: seconds to wait for the agent's REST server to listen
        "configfs_root",  # configfs-tsm: the tsm/report directory
        "sev_guest_device",  # sev-guest: the device node
    }
)

__all__ = [
    "AGENT_ENCODINGS",
    "EVIDENCE_CHOICES",
    "AgentEncoding",
    "Evidence",
    "EvidenceKind",
    "EvidenceProvider",
    "get_provider",
    "load_endorsement_bundle",
]


def _coco(options: dict[str, object], *, default_wait: float) -> CocoAgentProvider:
    encoding = options.get("agent_encoding") or "auto"
    if encoding not in AGENT_ENCODINGS:
        raise UsageError(f"unknown agent encoding {encoding!r} (auto, sha512, sha256-hex)")
    timeout = options.get("agent_timeout") or DEFAULT_TIMEOUT
    if not isinstance(timeout, int | float):
        raise UsageError("agent_timeout must be a number of seconds")
    wait = options.get("agent_wait")
    wait = default_wait if wait is None else wait
    if not isinstance(wait, int | float) or wait < 0:
        raise UsageError("agent_wait must be a number of seconds >= 0")
    return CocoAgentProvider(
        str(options.get("agent_url") or DEFAULT_BASE_URL),
        encoding=encoding,
        timeout=float(timeout),
        wait=float(wait),
    )


def _configfs(options: dict[str, object]) -> ConfigfsTsmProvider:
    return ConfigfsTsmProvider(Path(str(options.get("configfs_root") or DEFAULT_ROOT)))


def _sev_guest(options: dict[str, object]) -> SevGuestProvider:
    return SevGuestProvider(Path(str(options.get("sev_guest_device") or DEFAULT_DEVICE)))


def get_provider(name: str, **options: object) -> EvidenceProvider:
    """The provider called ``name`` (one of :data:`EVIDENCE_CHOICES`)."""
    unknown = sorted(set(options) - _OPTION_NAMES)
    if unknown:
        raise UsageError(f"unknown evidence option(s): {', '.join(unknown)}")
    if name == "simulated":
        # Imported here: only the simulated mode needs the simulated PKI.
        from runner.evidence.simulated import SimulatedProvider

        state_dir = options.get("state_dir")
        return SimulatedProvider(state_dir=Path(str(state_dir)) if state_dir else None)
    if name == "coco-aa":
        return _coco(options, default_wait=DEFAULT_WAIT)
    if name == "configfs-tsm":
        return _configfs(options)
    if name == "sev-guest":
        return _sev_guest(options)
    if name == "auto":
        # ``auto`` cannot tell "not started yet" from "not a CoCo guest": it waits only when
        # asked to (the Job names coco-aa, which waits by default).
        return AutoProvider(
            [_configfs(options), _sev_guest(options), _coco(options, default_wait=0.0)]
        )
    raise UsageError(
        f"unknown evidence provider {name!r} (choose from {', '.join(EVIDENCE_CHOICES)})"
    )
