"""One contract, every rendering: the CLI text, the generated docs page, ``GET /v1/contract`` of
the running service and the trust panel in Debian's Chromium each show every part of
``attestation.tenant.contract.CONTRACT``.

What must be shown is derived from the contract's data, not listed here: every text field of
every model in it (title, summary, headings, labels, definitions, rows, threats, checklist
links, not-verifiable items, comparison rows and notes, panel limits), each as a reader sees it
(``{row:ID}`` resolved to ``Claim (row N)``, no code marks), and every reference to another
page as ``label (docs/page#anchor)``. A field added to the model is checked without a change
here; the few fields no rendering shows as text are named in :data:`NOT_SHOWN`, with why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from pydantic import BaseModel
from selenium import webdriver
from selenium.webdriver.common.by import By

from attestation.tenant.contract import CONTRACT, Contract, NotVerifiable, Reference, Row
from attestation.tenant.contract.render import SOURCE_NOTE, plain_text, reference_text
from runner.cli import main as runner_main
from tests.panel.conftest import Panel, browser_errors, page_json

OpenPanel = Callable[[], webdriver.Chrome]
DOC = Path(__file__).resolve().parents[2] / "docs" / "verification-contract.md"

#: Fields that are identifiers or codes rather than text: each is shown through another field.
NOT_SHOWN = {
    (Contract, "version"),  # the JSON's version; readers see the contract itself
    (Row, "id"),  # the row's anchor (checked below: every cross-reference reaches its row)
    (Row, "who"),  # the parties, as words in who_detail
    (Row, "hosted"),  # shown as labels.availability[hosted]
    (NotVerifiable, "id"),
}


@dataclass(frozen=True)
class Part:
    path: tuple[str | int, ...]  # where it is in the JSON form
    raw: object  # the JSON value there
    shown: str  # how every reading rendering shows it


def _parts(value: object, path: tuple[str | int, ...]) -> Iterator[Part]:
    if isinstance(value, Reference):
        yield Part(path, value.to_json_dict(), reference_text(value))
    elif isinstance(value, BaseModel):
        for name, field in type(value).model_fields.items():
            if (type(value), name) not in NOT_SHOWN:
                yield from _parts(getattr(value, name), (*path, field.alias or name))
    elif isinstance(value, tuple):
        for index, item in enumerate(value):
            yield from _parts(item, (*path, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _parts(item, (*path, str(key)))
    elif isinstance(value, str):  # StrEnum values too: an assurance is shown as its name
        yield Part(path, str(value), plain_text(CONTRACT, value))
    else:
        raise TypeError(f"{path}: a {type(value).__name__} the renderings do not know")


PARTS = tuple(_parts(CONTRACT, ()))
HEADINGS = tuple(CONTRACT.headings.model_dump().values())


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def _missing(rendering: str) -> list[str]:
    """The parts a rendering (already read as text) does not show, with where they are."""
    return [
        f"{'.'.join(map(str, part.path))}: {part.shown}"
        for part in PARTS
        if _collapsed(part.shown) not in rendering
    ]


def _assert_in_order(rendering: str) -> None:
    """The matrix rows and the checklist's links appear in the contract's order: the checklist
    is a chain (measurement, HOST_DATA, image, source, corpus, evaluation, result)."""
    for texts in (
        [_collapsed(plain_text(CONTRACT, row.statement)) for row in CONTRACT.rows],
        [_collapsed(plain_text(CONTRACT, link.pin)) for link in CONTRACT.checklist],
    ):
        positions = [rendering.find(text) for text in texts]
        assert -1 not in positions
        assert positions == sorted(positions), texts


def _markdown_as_read(page: str) -> str:
    """The docs page as a reader of the rendered page reads it."""
    page = page.replace(SOURCE_NOTE, "")
    page = re.sub(r'<a id="[^"]+"></a>', "", page)
    page = page.replace("`", "").replace("**", "").replace("\\|", "|")
    page = re.sub(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?!\w)", r"\1", page)  # *emphasis*
    page = re.sub(r"\[([^\]]+)\]\(#[^)]+\)", r"\1", page)  # a link within the page: its text
    page = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1 (docs/\2)", page)  # another page
    return _collapsed(page)


def test_the_derived_parts_cover_every_section() -> None:
    """The walk above reaches every section (a guard against the derivation itself going blind)."""
    sections = {part.path[0] for part in PARTS}
    assert sections == set(CONTRACT.to_json_dict()) - {"version"}
    assert len([p for p in PARTS if p.path[0] == "checklist"]) == 4 * 7 + 2
    assert any("Binding (row 2)" in part.shown for part in PARTS)
    assert not any("{row:" in part.shown or "`" in part.shown for part in PARTS)


def test_the_cli_text_shows_every_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner_main(["contract"]) == 0
    text = capsys.readouterr().out
    assert _missing(_collapsed(text)) == []
    _assert_in_order(_collapsed(text))
    lines = text.splitlines()
    assert lines[:2] == [CONTRACT.title, "=" * len(CONTRACT.title)]
    for heading in HEADINGS:
        assert lines[lines.index(heading) + 1] == "-" * len(heading), heading


def test_the_docs_page_shows_every_part() -> None:
    page = DOC.read_text(encoding="utf-8")
    assert _missing(_markdown_as_read(page)) == []
    _assert_in_order(_markdown_as_read(page))
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert headings[0] == f"# {CONTRACT.title}"
    assert set(headings[1:]) == {f"## {heading}" for heading in HEADINGS}
    # Every cross-reference links to an anchor the page has.
    targets = set(re.findall(r"\]\(#([^)]+)\)", page))
    assert targets
    assert targets <= set(re.findall(r'<a id="([^"]+)"></a>', page))


def test_the_service_serves_every_part(panel: Panel) -> None:
    answer = requests.get(panel.url + "/v1/contract", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "application/json"
    document = answer.json()
    for part in PARTS:
        value: object = document
        for key in part.path:
            value = value[key]  # type: ignore[index]  # JSON: a KeyError fails the test
        assert value == part.raw, part.path
    assert Contract.model_validate(document) == CONTRACT


def _panel_text(browser: webdriver.Chrome) -> str:
    return _collapsed(str(browser.find_element(By.TAG_NAME, "main").text))


def test_the_panel_shows_every_part(open_panel: OpenPanel) -> None:
    browser = open_panel()
    assert _missing(_panel_text(browser)) == []
    _assert_in_order(_panel_text(browser))

    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "main h2, main h3")]
    assert CONTRACT.title in headings
    assert set(HEADINGS) <= set(headings)
    claims = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#contract article.row h4")]
    assert claims == [f"{n}. {row.claim}" for n, row in enumerate(CONTRACT.rows, start=1)]
    # Every cross-reference is a link to the row it names, which is on the page.
    links = page_json(
        browser,
        "Array.from(document.querySelectorAll('#contract a[href^=\"#row-\"], #limits a'))"
        ".map(a => [a.getAttribute('href'), a.textContent,"
        " Boolean(document.getElementById(a.getAttribute('href').slice(1)))])",
    )
    shown = {f"#row-{row.id}": f"{row.claim} (row {n})" for n, row in enumerate(CONTRACT.rows, 1)}
    assert links
    assert all(exists and shown[href] == text for href, text, exists in links)
    referenced = set(re.findall(r"\{row:([^}]+)\}", json.dumps(CONTRACT.to_json_dict())))
    assert {href.removeprefix("#row-") for href, _, _ in links} == referenced
    assert browser_errors(browser) == []


def test_the_panel_contract_fits_a_390_pixel_screen(open_panel: OpenPanel) -> None:
    browser = open_panel()
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True},
    )
    try:
        overflowing = page_json(
            browser,
            "Array.from(document.querySelectorAll('#contract *, #limits *'))"
            ".filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth)"
            ".map(e => e.tagName + ': ' + e.textContent.slice(0, 60))",
        )
        assert overflowing == []
        assert _missing(_panel_text(browser)) == []
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_without_javascript_the_panel_says_where_the_contract_is(
    browser: webdriver.Chrome, panel: Panel
) -> None:
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        browser.get(panel.url + "/panel/")
        shown = _collapsed(str(browser.find_element(By.ID, "contract").text))
    finally:
        browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
    assert shown == (
        "With JavaScript off this page cannot show the contract: read it with attested-replay "
        "contract on your own machine, in docs/verification-contract.md, or as JSON at "
        "/v1/contract."
    )
