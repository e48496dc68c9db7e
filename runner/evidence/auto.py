"""``--evidence auto``: the first real interface this guest offers.

Order: configfs-tsm, sev-guest, coco-aa. Only "does not exist here"
(:class:`~runner.errors.EvidenceUnavailableError`) moves on to the next one; an interface that
exists but fails stops the search, because its error is the one the operator must see. The
simulated provider is never part of the search.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.errors import EvidenceUnavailableError
from runner.evidence.base import Evidence, EvidenceProvider


class AutoProvider:
    """Try each real provider in turn; fail with one message listing every reason."""

    name = "auto"

    def __init__(self, providers: Sequence[EvidenceProvider]) -> None:
        if not providers:
            raise ValueError("auto needs at least one provider")
        self.providers = tuple(providers)

    def check_available(self) -> None:
        reasons: list[str] = []
        for provider in self.providers:
            try:
                provider.check_available()
            except EvidenceUnavailableError as exc:
                reasons.append(f"{provider.name}: {exc}")
            else:
                return
        raise self._none_available(reasons)

    def obtain(self, canonical_binding: bytes) -> Evidence:
        reasons: list[str] = []
        for provider in self.providers:
            try:
                return provider.obtain(canonical_binding)
            except EvidenceUnavailableError as exc:
                reasons.append(f"{provider.name}: {exc}")
        raise self._none_available(reasons)

    def _none_available(self, reasons: list[str]) -> EvidenceUnavailableError:
        tried = ", ".join(p.name for p in self.providers)
        return EvidenceUnavailableError(
            f"no SEV-SNP evidence interface on this machine (tried {tried}):\n  - "
            + "\n  - ".join(reasons)
        )
