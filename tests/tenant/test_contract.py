"""The verification contract: one source, rendered to the docs page, the CLI and JSON."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from attestation.cli import build_parser as verifier_parser
from attestation.envelope.expected import ExpectedValues
from attestation.tenant.contract import (
    CONTRACT,
    Availability,
    Contract,
    render_markdown,
    render_text,
)
from attestation.tenant.contract.render import SOURCE_NOTE, plain
from attestation.verify.policy import Policy
from runner.cli import build_parser as runner_parser
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
    references = [
        *CONTRACT.see,
        *(ref for row in CONTRACT.rows for ref in row.see),
        *(ref for threat in CONTRACT.threats for ref in threat.see),
        *(ref for link in CONTRACT.checklist for ref in link.see),
    ]
    assert len(references) == 16
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


def test_cross_references_name_rows_by_identifier_and_render_their_number() -> None:
    """A row is referred to as {row:ID}; no text names a row by a number, which would drift."""
    texts = re.findall(r'"((?:[^"\\]|\\.)*)"', json.dumps(CONTRACT.to_json_dict()))
    assert [text for text in texts if re.search(r"\brows? \d", text)] == []
    assert (
        "verdict without changing a digest the tenant pins ({row:binding}, "
        in (CONTRACT.threat_model[0])
    )
    expected = (
        "pins (Binding (row 2), Corpus and result integrity (row 3), Commitment scope (row 9))"
    )
    assert expected in render_text(CONTRACT)
    assert "pins ([Binding (row 2)](#row-binding), " in render_markdown(CONTRACT)
    assert '| 2 | <a id="row-binding"></a>**Binding**: ' in render_markdown(CONTRACT)
    # Reordering the rows renumbers every reference with them.
    reordered = CONTRACT.model_copy(
        update={"rows": (CONTRACT.rows[1], CONTRACT.rows[0], *CONTRACT.rows[2:])}
    )
    assert "pins (Binding (row 1), " in render_text(
        Contract.model_validate(reordered.to_json_dict())
    )


def test_a_reference_to_no_row_is_refused() -> None:
    document = CONTRACT.to_json_dict()
    document["threatModel"] = ["see {row:no-such-row}"]
    with pytest.raises(ValueError, match=r"\{row:no-such-row\} names no row of the matrix"):
        Contract.model_validate(document)
    document["threatModel"] = ["see `{row:binding}`"]
    with pytest.raises(ValueError, match=r"a \{row:ID\} reference inside `code`"):
        Contract.model_validate(document)


def test_every_assurance_is_defined_and_every_availability_labelled() -> None:
    document = CONTRACT.to_json_dict()
    document["terms"] = document["terms"][:2]
    with pytest.raises(ValueError, match="terms define no recomputed"):
        Contract.model_validate(document)
    document = CONTRACT.to_json_dict()
    del document["labels"]["availability"]["no"]
    with pytest.raises(ValueError, match=r"labels\.availability names no label for no"):
        Contract.model_validate(document)


def test_publication_times_are_stated_as_recorded() -> None:
    """The service records publishedAt (storage.py); the contract says so, and what it is not."""
    (limit,) = [text for text in CONTRACT.panel_limits if text.startswith("Publication times")]
    assert "not recorded yet" not in limit
    assert "to the second in UTC" in limit
    assert "in nothing signed" in limit


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _all_options(parser: argparse.ArgumentParser) -> set[str]:
    found = _options(parser)
    for sub in _subcommands(parser).values():
        found |= _all_options(sub)
    return found


def _unknown_options(command: str) -> list[str]:
    """The options of ``command`` (a command line the contract shows) that its command lacks."""
    words = command.split()
    parser = verifier_parser() if words[0] == "verify-attested-run" else runner_parser()
    if words[0] in {"verify-attested-run", "attested-replay"}:
        words = words[1:]
    while words and words[0] in _subcommands(parser):
        parser = _subcommands(parser)[words.pop(0)]
    assert not _subcommands(parser), f"{command}: names no subcommand of {parser.prog}"
    known = _options(parser)
    return [word for word in words if word.startswith("--") and word not in known]


def test_every_command_and_option_the_contract_names_exists() -> None:
    """A claim naming a command that does not exist (or lost an option) is an untrue claim."""
    commands = [command for row in CONTRACT.rows for command in row.commands]
    texts = re.findall(r'"((?:[^"\\]|\\.)*)"', json.dumps(CONTRACT.to_json_dict()))
    spans = {span for text in texts for span in re.findall(r"`([^`]+)`", text)}
    top_level = set(_subcommands(runner_parser()))
    # A command line, not a lone word (`tenant` is also a token role, `run` a verb).
    named = [
        span
        for span in spans
        if span.split()[0] in {"attested-replay", "verify-attested-run"}
        or (span.split()[0] in top_level and len(span.split()) > 1)
    ]
    checked = [c for c in commands if c.split()[0] != "sha256sum"] + named
    assert len(checked) >= 30
    assert [
        (command, _unknown_options(command)) for command in checked if _unknown_options(command)
    ] == []
    every_option = _all_options(runner_parser()) | _options(verifier_parser())
    lone = [span for span in spans if span.startswith("--")]
    assert lone
    assert [option for option in lone if option not in every_option] == []


def test_every_key_the_checklist_pins_is_an_expected_values_key() -> None:
    # The expected-values file: its expectations and, flat beside them, the policy's keys.
    keys = {
        field.alias
        for model in (ExpectedValues, Policy)
        for name, field in model.model_fields.items()
        if name != "policy"
    }
    for link in CONTRACT.checklist:
        named = [
            span
            for span in re.findall(r"`([^`]+)`", link.pin + link.without)
            if re.fullmatch(r"[a-z]+[A-Z][A-Za-z]*|measurements|nonce", span)
        ]
        assert [span for span in named if span not in keys] == [], link.link
    assert {"measurements", "hostData", "imageDigest", "workloadDigest"} <= keys
