"""AMD product lines and signing-key kinds."""

from __future__ import annotations

import enum


class ProductLine(enum.StrEnum):
    """An EPYC generation with its own AMD root of trust and TCB byte layout."""

    MILAN = "Milan"
    GENOA = "Genoa"
    TURIN = "Turin"

    @property
    def uses_turin_tcb_layout(self) -> bool:
        """Turin's TCB_VERSION puts FMC in byte 0 (SEV-SNP ABI specification, publication
        56860, TCB_VERSION)."""
        return self is ProductLine.TURIN


class SignerKind(enum.StrEnum):
    """Which key signed a report: the chip's VCEK or a cloud provider's VLEK."""

    VCEK = "vcek"
    VLEK = "vlek"
