"""The verification contract as data: what a tenant can check, with what, trusting whom.

One source (:data:`CONTRACT`, in :mod:`attestation.tenant.contract.data`) rendered everywhere:
``docs/verification-contract.md`` (:func:`render_markdown`), ``attested-replay contract``
(:func:`render_text`, or ``--json``: ``CONTRACT.to_json_dict()``), ``GET /v1/contract`` of
``attested-replay serve`` (the same JSON) and its trust panel, which renders that JSON
(``runner/service/panel/static/contract.js``).
"""

from attestation.tenant.contract.data import CONTRACT, CONTRACT_VERSION
from attestation.tenant.contract.model import (
    Assurance,
    Availability,
    ChainLink,
    Comparison,
    Contract,
    Headings,
    Labels,
    NotVerifiable,
    Party,
    Reference,
    Row,
    Term,
    Threat,
)
from attestation.tenant.contract.render import render_markdown, render_text

__all__ = [
    "CONTRACT",
    "CONTRACT_VERSION",
    "Assurance",
    "Availability",
    "ChainLink",
    "Comparison",
    "Contract",
    "Headings",
    "Labels",
    "NotVerifiable",
    "Party",
    "Reference",
    "Row",
    "Term",
    "Threat",
    "render_markdown",
    "render_text",
]
