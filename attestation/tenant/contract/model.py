"""The shape of the verification contract (the data is in :mod:`attestation.tenant.contract.data`).

Text fields use two marks only: `backticks` around commands, files and field names, and
``{row:ID}`` for a cross-reference to the matrix row ``ID``, which every renderer resolves to
the row's claim and its current number (a reference by identifier cannot drift when rows are
added or reordered; one naming no row is refused when the contract is built). References to
other documents are structured (:class:`Reference`), so each renderer shows them its own way.
Headings and field labels are data too (:class:`Headings`, :class:`Labels`): every rendering
shows the same words.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Final, Self

from pydantic import StringConstraints, model_validator

from attestation.contracts import WireModel

Text = Annotated[str, StringConstraints(min_length=1)]
Slug = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,47}$")]

#: A cross-reference to a matrix row, inside any text field: ``{row:ID}``.
ROW_REFERENCE: Final = re.compile(r"\{row:([^}]*)\}")


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
    anchor: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{1,96}$")] | None = None
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
    see: tuple[Reference, ...] = ()


class Comparison(WireModel):
    aspect: Text
    self_host: Text
    hosted: Text


class Headings(WireModel):
    """The heading of each section, in every rendering (the docs page's anchors follow them)."""

    terms: Text
    matrix: Text
    threat_model: Text
    checklist: Text
    not_verifiable: Text
    comparison: Text
    panel_limits: Text


class Labels(WireModel):
    """The words beside the data: column heads in the docs, field names in the CLI and panel."""

    claim: Text
    artifact: Text
    command: Text
    who: Text
    assumption: Text
    hosted: Text
    availability: dict[Availability, Text]  # the answer to ``hosted``, for each availability
    controls: Text
    attempts: Text
    defence: Text
    link: Text
    pin: Text
    proves: Text
    without: Text
    revisit: Text
    self_host: Text
    hosted_tenant: Text
    see: Text  # introduces the contract's own references

    @model_validator(mode="after")
    def _every_availability_named(self) -> Self:
        missing = [value.value for value in Availability if value not in self.availability]
        if missing:
            raise ValueError(f"labels.availability names no label for {', '.join(missing)}")
        return self


class Contract(WireModel):
    version: Text
    title: Text
    summary: tuple[Text, ...]
    headings: Headings
    labels: Labels
    terms: tuple[Term, ...]
    rows: tuple[Row, ...]
    not_verifiable: tuple[NotVerifiable, ...]
    #: The operator threat model: why inputs are hostile, and what bounds each.
    threat_model: tuple[Text, ...] = ()
    threats: tuple[Threat, ...] = ()
    #: The tenant's checklist: every link of the chain, in order (each proves the next).
    checklist: tuple[ChainLink, ...] = ()
    checklist_intro: tuple[Text, ...] = ()
    comparison: tuple[Comparison, ...]
    comparison_note: tuple[Text, ...]
    panel_limits: tuple[Text, ...]
    see: tuple[Reference, ...]

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Every assurance is defined, and every cross-reference names a row."""
        defined = {term.name for term in self.terms}
        undefined = [value.value for value in Assurance if value.value not in defined]
        if undefined:
            raise ValueError(f"terms define no {', '.join(undefined)}")
        ids = {row.id for row in self.rows}
        for text in _strings(self.model_dump(mode="json")):
            # Code is shown as it is: a reference there would be a link inside code.
            if any(ROW_REFERENCE.search(code) for code in text.split("`")[1::2]):
                raise ValueError(f"a {{row:ID}} reference inside `code`, in: {text}")
            for target in ROW_REFERENCE.findall(text):
                if target not in ids:
                    raise ValueError(f"{{row:{target}}} names no row of the matrix, in: {text}")
        return self

    def row(self, row_id: str) -> Row:
        for row in self.rows:
            if row.id == row_id:
                return row
        raise KeyError(row_id)

    def row_number(self, row_id: str) -> int:
        """The row's number in the matrix, from 1 (what renderers show beside a reference)."""
        for number, row in enumerate(self.rows, start=1):
            if row.id == row_id:
                return number
        raise KeyError(row_id)


def _strings(value: object) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _strings(item)]
    return []
