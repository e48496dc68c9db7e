"""The shape of the verification contract (the data is in :mod:`attestation.tenant.contract.data`).

Text fields use one markup only: `backticks` around commands, files and field names.
References to other documents are structured (:class:`Reference`), so each renderer shows
them its own way.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import StringConstraints

from attestation.contracts import WireModel

Text = Annotated[str, StringConstraints(min_length=1)]
Slug = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,47}$")]


class Party(StrEnum):
    """Who can run a check."""

    ANYONE = "anyone"  # no account, no contact with the operator
    TENANT = "tenant"  # holds a tenant token or the tenant's own data
    OPERATOR = "operator"  # runs the replays and the publication service


class Assurance(StrEnum):
    """How strong a passed check is."""

    TAMPER_PROOF = "tamper-proof"
    TAMPER_EVIDENT = "tamper-evident"
    RECOMPUTED = "recomputed"


class Availability(StrEnum):
    """Whether a hosted tenant can run a check on its own."""

    YES = "yes"
    WITH_OPERATOR = "with-operator"  # needs something only the operator holds
    NO = "no"


class Reference(WireModel):
    """A pointer into the documentation: ``doc`` relative to ``docs/``."""

    doc: Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+\.md$")]
    anchor: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{1,64}$")] | None = None
    label: Text


class Term(WireModel):
    name: Text
    meaning: Text


class Row(WireModel):
    """One claim of the matrix: claim -> artifact -> command -> who -> trust assumption."""

    id: Slug
    claim: Text  # a short name
    statement: Text  # what is claimed, in one sentence
    artifact: Text
    commands: tuple[Text, ...]
    command_note: Text
    who: tuple[Party, ...]
    who_detail: Text
    assurance: Assurance
    assumption: Text
    hosted: Availability
    see: tuple[Reference, ...] = ()


class NotVerifiable(WireModel):
    id: Slug
    title: Text
    detail: Text
    revisit: Text  # the event that should make us revisit it


class Threat(WireModel):
    """One thing the operator controls, in the operator threat model."""

    controls: Text  # what the operator controls
    attempts: Text  # what it can try with it
    defence: Text  # what attested-replay does about it
    see: tuple[Reference, ...] = ()


class ChainLink(WireModel):
    """One link of the tenant's checklist, from the hardware to the result."""

    link: Text  # what is pinned, in words
    pin: Text  # the expected-values key (or step) that pins it, and where its value comes from
    proves: Text  # what a pinned link proves
    without: Text  # what is lost when it is not pinned


class Comparison(WireModel):
    aspect: Text
    self_host: Text
    hosted: Text


class Contract(WireModel):
    version: Text
    title: Text
    summary: tuple[Text, ...]
    terms: tuple[Term, ...]
    rows: tuple[Row, ...]
    not_verifiable: tuple[NotVerifiable, ...]
    #: The operator threat model: why inputs are hostile, and what bounds each.
    threat_model: tuple[Text, ...] = ()
    threats: tuple[Threat, ...] = ()
    #: The tenant's checklist: every link of the chain, in order (each proves the next).
    checklist: tuple[ChainLink, ...] = ()
    comparison: tuple[Comparison, ...]
    comparison_note: tuple[Text, ...]
    panel_limits: tuple[Text, ...]
    see: tuple[Reference, ...]

    def row(self, row_id: str) -> Row:
        for row in self.rows:
            if row.id == row_id:
                return row
        raise KeyError(row_id)
