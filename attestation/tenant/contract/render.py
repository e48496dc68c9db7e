"""Renderings of the verification contract: Markdown (the docs page) and plain text (the CLI).

The trust panel renders the JSON form itself, the same way
(``runner/service/panel/static/contract.js``). Every rendering shows every part of the
contract, headings and labels included, all taken from it; a cross-reference ``{row:ID}``
becomes the row's claim and current number, ``Claim (row N)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from attestation.tenant.contract.model import ROW_REFERENCE, Contract, Reference, Row

_CODE: Final = re.compile(r"`([^`]+)`")
SOURCE_NOTE: Final = (
    "<!-- Generated from attestation/tenant/contract/data.py by scripts/gen_contract_doc.py: "
    "edit the source, not this page (a test fails when they differ). -->"
)


def row_anchor(row_id: str) -> str:
    """The anchor of a matrix row, on the docs page and in the panel."""
    return f"row-{row_id}"


def cross_reference(contract: Contract, row_id: str) -> str:
    """How ``{row:ID}`` reads: the row's claim and its number now."""
    return f"{contract.row(row_id).claim} (row {contract.row_number(row_id)})"


def _resolve(contract: Contract, text: str, show: Callable[[str, str], str]) -> str:
    """``text`` with each ``{row:ID}`` replaced by ``show(ID, its cross-reference text)``."""
    return ROW_REFERENCE.sub(
        lambda match: show(match[1], cross_reference(contract, match[1])), text
    )


def plain(text: str) -> str:
    """``text`` without its backticks."""
    return _CODE.sub(r"\1", text)


def plain_text(contract: Contract, text: str) -> str:
    """A contract text as every rendering shows it: references resolved, no backticks."""
    return plain(_resolve(contract, text, lambda _row_id, shown: shown))


def reference_text(reference: Reference) -> str:
    """A reference to another page, as the text and panel renderings show it."""
    target = f"docs/{reference.doc}" + (f"#{reference.anchor}" if reference.anchor else "")
    return f"{reference.label} ({target})"


# ---- Markdown ------------------------------------------------------------------------------


def _md(contract: Contract, text: str) -> str:
    return _resolve(contract, text, lambda row_id, shown: f"[{shown}](#{row_anchor(row_id)})")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _link(reference: Reference) -> str:
    target = reference.doc + (f"#{reference.anchor}" if reference.anchor else "")
    return f"[{reference.label}]({target})"


def _with_links(text: str, references: tuple[Reference, ...]) -> str:
    if not references:
        return text
    return text + " (" + ", ".join(_link(reference) for reference in references) + ")"


def _table_row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _claim(contract: Contract, row: Row) -> str:
    anchor = f'<a id="{row_anchor(row.id)}"></a>'
    return anchor + _with_links(f"**{row.claim}**: {_md(contract, row.statement)}", row.see)


def render_markdown(contract: Contract) -> str:
    """``docs/verification-contract.md``."""
    headings, labels = contract.headings, contract.labels
    out: list[str] = [SOURCE_NOTE, "", f"# {contract.title}", ""]
    for paragraph in contract.summary:
        out += [_md(contract, paragraph), ""]
    out += [
        f"{labels.see}: " + ", ".join(_link(reference) for reference in contract.see) + ".",
        "",
        f"## {headings.terms}",
        "",
    ]
    out += [f"* **{term.name}**: {_md(contract, term.meaning)}." for term in contract.terms]
    out += ["", f"## {headings.matrix}", ""]
    head = (labels.claim, labels.artifact, labels.command, labels.who, labels.assumption)
    out += [_table_row(("#", *head, labels.hosted)), "|---" * (len(head) + 2) + "|"]
    for number, row in enumerate(contract.rows, start=1):
        commands = "; ".join(f"`{command}`" for command in row.commands)
        cells = (
            str(number),
            _claim(contract, row),
            _md(contract, row.artifact),
            f"{commands} ({_md(contract, row.command_note)})",
            _md(contract, row.who_detail),
            f"**{row.assurance.value}.** {_md(contract, row.assumption)}",
            labels.availability[row.hosted],
        )
        out.append(_table_row(cells))
    if contract.threats:
        out += ["", f"## {headings.threat_model}", ""]
        for paragraph in contract.threat_model:
            out += [_md(contract, paragraph), ""]
        out += [_table_row((labels.controls, labels.attempts, labels.defence)), "|---|---|---|"]
        for threat in contract.threats:
            threat_cells = (
                _md(contract, threat.controls),
                _md(contract, threat.attempts),
                _with_links(_md(contract, threat.defence), threat.see),
            )
            out.append(_table_row(threat_cells))
    if contract.checklist:
        out += ["", f"## {headings.checklist}", ""]
        for paragraph in contract.checklist_intro:
            out += [_md(contract, paragraph), ""]
        columns = (labels.link, labels.pin, labels.proves, labels.without)
        out += [_table_row(("#", *columns)), "|---" * (len(columns) + 1) + "|"]
        for number, link in enumerate(contract.checklist, start=1):
            link_cells = (
                str(number),
                _md(contract, link.link),
                _with_links(_md(contract, link.pin), link.see),
                _md(contract, link.proves),
                _md(contract, link.without),
            )
            out.append(_table_row(link_cells))
    out += ["", f"## {headings.not_verifiable}", ""]
    out += [
        f"* **{item.title}.** {_md(contract, item.detail)} *{labels.revisit}* "
        f"{_md(contract, item.revisit)}."
        for item in contract.not_verifiable
    ]
    out += ["", f"## {headings.comparison}", ""]
    out += [_table_row(("", labels.self_host, labels.hosted_tenant)), "|---|---|---|"]
    out += [
        _table_row((row.aspect, _md(contract, row.self_host), _md(contract, row.hosted)))
        for row in contract.comparison
    ]
    out.append("")
    for paragraph in contract.comparison_note:
        out += [_md(contract, paragraph), ""]
    if contract.panel_limits:
        out += [f"## {headings.panel_limits}", ""]
        out += [f"* {_md(contract, limit)}" for limit in contract.panel_limits]
        out.append("")
    return "\n".join(out)


# ---- plain text ----------------------------------------------------------------------------


def _heading(title: str, underline: str = "-") -> list[str]:
    return [title, underline * len(title)]


def _see(references: tuple[Reference, ...], indent: str) -> list[str]:
    if not references:
        return []
    return [f"{indent}see: " + ", ".join(reference_text(reference) for reference in references)]


def render_text(contract: Contract) -> str:
    """The contract for a terminal: every section of the docs page, one block per item."""
    headings, labels = contract.headings, contract.labels

    def text(value: str) -> str:
        return plain_text(contract, value)

    out = [*_heading(contract.title, "="), ""]
    for paragraph in contract.summary:
        out += [text(paragraph), ""]
    references = ", ".join(reference_text(reference) for reference in contract.see)
    out += [f"{labels.see}: {references}", ""]
    out += _heading(headings.terms)
    out += [f"* {term.name}: {text(term.meaning)}." for term in contract.terms]
    out += ["", *_heading(headings.matrix)]
    for number, row in enumerate(contract.rows, start=1):
        out += [
            f"{number}. {row.claim}: {text(row.statement)}",
            *_see(row.see, "   "),
            f"   {labels.artifact}: {text(row.artifact)}",
            *(f"   {labels.command}: {command}" for command in row.commands),
            f"      ({text(row.command_note)})",
            f"   {labels.who}: {text(row.who_detail)}",
            f"   {labels.assumption}: {row.assurance.value}. {text(row.assumption)}",
            f"   {labels.hosted}: {labels.availability[row.hosted]}",
            "",
        ]
    if contract.threats:
        out += _heading(headings.threat_model)
        for paragraph in contract.threat_model:
            out += [text(paragraph), ""]
        for threat in contract.threats:
            out += [
                f"* {labels.controls}: {text(threat.controls)}",
                f"  {labels.attempts}: {text(threat.attempts)}",
                f"  {labels.defence}: {text(threat.defence)}",
                *_see(threat.see, "  "),
            ]
        out.append("")
    if contract.checklist:
        out += _heading(headings.checklist)
        for paragraph in contract.checklist_intro:
            out += [text(paragraph), ""]
        for number, link in enumerate(contract.checklist, start=1):
            out += [
                f"{number}. {labels.link}: {text(link.link)}",
                f"   {labels.pin}: {text(link.pin)}",
                *_see(link.see, "   "),
                f"   {labels.proves}: {text(link.proves)}",
                f"   {labels.without}: {text(link.without)}",
            ]
        out.append("")
    out += _heading(headings.not_verifiable)
    for item in contract.not_verifiable:
        out += [f"* {item.title}: {text(item.detail)}", f"  {labels.revisit} {text(item.revisit)}"]
    out += ["", *_heading(headings.comparison)]
    for comparison in contract.comparison:
        out += [
            f"* {comparison.aspect}",
            f"  {labels.self_host}: {text(comparison.self_host)}",
            f"  {labels.hosted_tenant}: {text(comparison.hosted)}",
        ]
    for paragraph in contract.comparison_note:
        out += ["", text(paragraph)]
    if contract.panel_limits:
        out += ["", *_heading(headings.panel_limits)]
        out += [f"* {text(limit)}" for limit in contract.panel_limits]
    return "\n".join(out) + "\n"
