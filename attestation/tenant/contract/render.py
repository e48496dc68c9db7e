"""Renderings of the verification contract: Markdown (the docs page) and plain text (the CLI).

The trust panel renders the JSON form itself (``runner/publish/panel/panel.js``).
"""

from __future__ import annotations

import re
from typing import Final

from attestation.tenant.contract.model import Assurance, Availability, Contract, Reference, Row

_CODE: Final = re.compile(r"`([^`]+)`")
HOSTED: Final = {
    Availability.YES: "yes",
    Availability.WITH_OPERATOR: "with the operator's help",
    Availability.NO: "no",
}
_ASSURANCE: Final = {
    Assurance.TAMPER_PROOF: "Tamper-proof",
    Assurance.TAMPER_EVIDENT: "Tamper-evident",
    Assurance.RECOMPUTED: "Recomputed",
}
SOURCE_NOTE: Final = (
    "<!-- Generated from attestation/tenant/contract/data.py by scripts/gen_contract_doc.py: "
    "edit the source, not this page (a test fails when they differ). -->"
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _link(reference: Reference) -> str:
    target = reference.doc + (f"#{reference.anchor}" if reference.anchor else "")
    return f"[{reference.label}]({target})"


def _claim(row: Row) -> str:
    claim = f"**{row.claim}**: {row.statement}"
    if row.see:
        claim += " (" + ", ".join(_link(reference) for reference in row.see) + ")"
    return claim


def render_markdown(contract: Contract) -> str:
    """``docs/verification-contract.md``."""
    out: list[str] = [SOURCE_NOTE, "", f"# {contract.title}", ""]
    for paragraph in contract.summary:
        out += [paragraph, ""]
    out += [
        "Exit codes: " + ", ".join(_link(reference) for reference in contract.see) + ".",
        "",
        f"{len(contract.terms)} words are used precisely:",
        "",
    ]
    out += [f"* **{term.name}**: {term.meaning}." for term in contract.terms]
    out += [
        "",
        "## Matrix",
        "",
        (
            "| # | claim | artifact | command | who can run it | trust assumption "
            "| hosted tenant can check it |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for number, row in enumerate(contract.rows, start=1):
        commands = "; ".join(f"`{command}`" for command in row.commands)
        cells = (
            str(number),
            _claim(row),
            row.artifact,
            f"{commands} ({row.command_note})",
            row.who_detail,
            f"**{_ASSURANCE[row.assurance]}.** {row.assumption}",
            HOSTED[row.hosted],
        )
        out.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    if contract.threats:
        out += ["", "## Operator threat model", ""]
        for paragraph in contract.threat_model:
            out += [paragraph, ""]
        out += ["| the operator controls | it can try to | attested-replay |", "|---|---|---|"]
        for threat in contract.threats:
            defence = threat.defence
            if threat.see:
                defence += " (" + ", ".join(_link(reference) for reference in threat.see) + ")"
            threat_cells = (threat.controls, threat.attempts, defence)
            out.append("| " + " | ".join(_cell(cell) for cell in threat_cells) + " |")
    if contract.checklist:
        out += [
            "",
            "## The tenant's checklist: from the hardware to the result",
            "",
            (
                "Each link is pinned in the expected-values file (or checked by the step named) "
                "and vouches for the next; a link left unpinned is one the operator chooses."
            ),
            "",
            "| # | link | pin it with | a pinned link proves | without it |",
            "|---|---|---|---|---|",
        ]
        for number, link in enumerate(contract.checklist, start=1):
            link_cells = (str(number), link.link, link.pin, link.proves, link.without)
            out.append("| " + " | ".join(_cell(cell) for cell in link_cells) + " |")
    out += ["", "## Not verifiable (and when to revisit)", ""]
    out += [
        f"* **{item.title}.** {item.detail} *Revisit when* {item.revisit}."
        for item in contract.not_verifiable
    ]
    out += [
        "",
        "## Self-host operator vs hosted tenant",
        "",
        (
            "|  | self-host operator (runs replays, the service and the corpus itself) "
            "| hosted tenant (another party runs them) |"
        ),
        "|---|---|---|",
    ]
    out += [
        f"| {_cell(row.aspect)} | {_cell(row.self_host)} | {_cell(row.hosted)} |"
        for row in contract.comparison
    ]
    out.append("")
    for paragraph in contract.comparison_note:
        out += [paragraph, ""]
    if contract.panel_limits:
        out += ["## What the trust panel cannot check", ""]
        out += [f"* {limit}" for limit in contract.panel_limits]
        out.append("")
    return "\n".join(out)


def plain(text: str) -> str:
    """``text`` without its backticks."""
    return _CODE.sub(r"\1", text)


def render_text(contract: Contract) -> str:
    """The contract for a terminal: one block per row, no tables."""
    out = [contract.title, "=" * len(contract.title), ""]
    for number, row in enumerate(contract.rows, start=1):
        out += [
            f"{number}. {row.claim}: {plain(row.statement)}",
            f"   artifact: {plain(row.artifact)}",
            *(f"   command:  {command}" for command in row.commands),
            f"             ({plain(row.command_note)})",
            f"   who:      {plain(row.who_detail)}",
            f"   trust:    {row.assurance.value}. {plain(row.assumption)}",
            f"   hosted tenant can check it: {HOSTED[row.hosted]}",
            "",
        ]
    if contract.threats:
        out += ["Operator threat model", "---------------------"]
        out += [plain(paragraph) for paragraph in contract.threat_model]
        for threat in contract.threats:
            out += [
                f"* {plain(threat.controls)}",
                f"  can try to: {plain(threat.attempts)}",
                f"  defence:    {plain(threat.defence)}",
            ]
        out.append("")
    if contract.checklist:
        out += ["The tenant's checklist: from the hardware to the result", "-" * 55]
        for number, link in enumerate(contract.checklist, start=1):
            out += [
                f"{number}. {plain(link.link)}",
                f"   pin it with: {plain(link.pin)}",
                f"   proves:      {plain(link.proves)}",
                f"   without it:  {plain(link.without)}",
            ]
        out.append("")
    out += ["Not verifiable", "--------------"]
    for item in contract.not_verifiable:
        out += [f"* {item.title}: {plain(item.detail)}", f"  revisit when {plain(item.revisit)}"]
    out += ["", "Self-host operator vs hosted tenant", "-----------------------------------"]
    for comparison in contract.comparison:
        out += [f"* {comparison.aspect}", f"  self-host: {plain(comparison.self_host)}"]
        out += [f"  hosted:    {plain(comparison.hosted)}"]
    if contract.panel_limits:
        out += ["", "What the trust panel cannot check", "---------------------------------"]
        out += [f"* {plain(limit)}" for limit in contract.panel_limits]
    return "\n".join(out) + "\n"
