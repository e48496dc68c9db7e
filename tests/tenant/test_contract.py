"""The verification contract: one source, rendered to the docs page, the CLI and JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attestation.tenant.contract import (
    CONTRACT,
    Availability,
    Contract,
    render_markdown,
    render_text,
)
from attestation.tenant.contract.render import SOURCE_NOTE, plain
from runner.cli import main as runner_main

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_docs_page_is_generated_from_the_contract() -> None:
    page = (DOCS / "verification-contract.md").read_text(encoding="utf-8")
    assert page == render_markdown(CONTRACT), (
        "docs/verification-contract.md is stale or was edited by hand: edit "
        "attestation/tenant/contract/data.py and run `python scripts/gen_contract_doc.py`"
    )
    assert page.startswith(SOURCE_NOTE)


def test_drift_is_detected() -> None:
    edited = CONTRACT.model_copy(update={"title": "Something else"})
    assert render_markdown(edited) != (DOCS / "verification-contract.md").read_text()


def test_every_reference_names_an_existing_doc_and_anchor() -> None:
    references = [*CONTRACT.see, *(ref for row in CONTRACT.rows for ref in row.see)]
    assert references
    for reference in references:
        doc = DOCS / reference.doc
        assert doc.is_file(), reference
        if reference.anchor is not None:
            assert reference.anchor in _anchors(doc.read_text(encoding="utf-8")), reference


def test_rows_and_items_have_unique_ids_and_balanced_code_marks() -> None:
    assert len({row.id for row in CONTRACT.rows}) == len(CONTRACT.rows)
    assert len({item.id for item in CONTRACT.not_verifiable}) == len(CONTRACT.not_verifiable)
    texts = json.dumps(CONTRACT.to_json_dict())
    for value in re.findall(r'"((?:[^"\\]|\\.)*)"', texts):
        assert value.count("`") % 2 == 0, value


def test_contract_covers_what_the_issue_and_the_seed_ask_for() -> None:
    ids = [row.id for row in CONTRACT.rows]
    assert ids == [
        "attested-execution",
        "binding",
        "corpus-and-result",
        "published-numbers",
        "envelope-identity",
        "publication-integrity",
        "witnessed-publication",
        "publish-receipt",
        "commitment-scope",
        "azure-confidential-vm",
    ]
    numbers = CONTRACT.row("published-numbers")
    assert numbers.assurance.value == "recomputed"
    assert any("tenant reproduce" in command for command in numbers.commands)
    assert [item.id for item in CONTRACT.not_verifiable][:2] == ["live-decisions", "ground-truth"]
    assert all(item.revisit for item in CONTRACT.not_verifiable)
    assert CONTRACT.comparison[0].aspect == "Verifies"
    assert CONTRACT.row("publish-receipt").hosted is Availability.WITH_OPERATOR
    assert len(CONTRACT.panel_limits) == 5
    with pytest.raises(KeyError):
        CONTRACT.row("no-such-row")


def test_json_round_trips_through_the_model() -> None:
    document = CONTRACT.to_json_dict()
    assert {"rows", "notVerifiable", "comparison", "panelLimits", "summary"} <= set(document)
    assert Contract.model_validate(document) == CONTRACT


def test_cli_prints_the_same_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner_main(["contract", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == CONTRACT.to_json_dict()

    assert runner_main(["contract"]) == 0
    text = capsys.readouterr().out
    assert text == render_text(CONTRACT)
    for number, row in enumerate(CONTRACT.rows, start=1):
        assert f"{number}. {row.claim}: {plain(row.statement)}\n" in text
    for item in CONTRACT.not_verifiable:
        assert f"* {item.title}: " in text
    assert "`" not in text


def test_the_operator_threat_model_names_every_input_it_bounds() -> None:
    controls = [threat.controls for threat in CONTRACT.threats]
    assert [text.split(":")[0].split(",")[0] for text in controls] == [
        "the corpus",
        "the network",
        "the pod's environment and mounts",
        "the attestation agent's port",
        "the host and hypervisor",
    ]
    page = render_markdown(CONTRACT)
    assert "## Operator threat model" in page
    assert "[HTTP limits](limits.md#http-requests)" in page
    assert "Operator threat model" in render_text(CONTRACT)
    assert (DOCS / "limits.md").read_text(encoding="utf-8").count("\n## HTTP requests\n") == 1


def test_the_checklist_is_the_chain_from_hardware_to_result() -> None:
    """Issue 28: the tenant's checklist, in order, each link naming its pin and what is lost."""
    links = [link.link.split(":")[0] for link in CONTRACT.checklist]
    assert links == [
        "launch measurement",
        "HOST_DATA",
        "image digest",
        "source",
        "corpus",
        "evaluation",
        "result",
    ]
    pins = [link.pin for link in CONTRACT.checklist]
    assert pins[0].startswith("`measurements`: `attested-replay measure`")
    assert pins[5].startswith("`evaluationDigest`: `expected --corpus DIR|ARCHIVE`")
    assert "acceptAnyMeasurement" in CONTRACT.checklist[0].without
    assert "acceptAnyEvaluation" in CONTRACT.checklist[5].without
    text = render_text(CONTRACT)
    assert "The tenant's checklist: from the hardware to the result" in text
    assert "   pin it with: measurements: attested-replay measure" in text
    assert CONTRACT.to_json_dict()["checklist"][0]["link"] == CONTRACT.checklist[0].link
