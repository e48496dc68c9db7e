"""The trust panel in Debian's Chromium: each state, what it shows, what it never shows, and its
accessibility (landmarks and labels from Chromium's accessibility tree; axe-core when present)."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from selenium import webdriver
from selenium.webdriver.common.by import By

from attestation.tenant.contract import CONTRACT
from attestation.tenant.contract.render import plain
from tests.panel.conftest import (
    WITNESS_NAME,
    Panel,
    accessibility_tree,
    browser_errors,
    page_json,
    role_and_name,
    sign_in,
    wait_for_verdicts,
)
from tests.publish.conftest import LOG_NAME, running_in_ci

OpenPanel = Callable[[], webdriver.Chrome]
Screenshot = Callable[[str], Path]


def _text(browser: webdriver.Chrome, element_id: str) -> str:
    return str(browser.find_element(By.ID, element_id).text)


def test_signed_out_the_page_shows_the_contract_and_its_limits(
    open_panel: OpenPanel, screenshot: Screenshot
) -> None:
    browser = open_panel()

    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#contract article.row h4")]
    assert headings == [f"{n}. {row.claim}" for n, row in enumerate(CONTRACT.rows, start=1)]
    limits = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#limits li")]
    assert limits == [plain(limit) for limit in CONTRACT.panel_limits]
    not_verifiable = browser.find_elements(By.CSS_SELECTOR, "#contract-not-verifiable ~ ul > li")
    assert len(not_verifiable) == len(CONTRACT.not_verifiable)
    assert not browser.find_element(By.ID, "runs-section").is_displayed()
    assert browser.find_element(By.ID, "token").get_attribute("type") == "password"
    assert browser_errors(browser) == []
    screenshot("signed-out")


def test_a_wrong_token_is_refused_and_nothing_is_shown(
    open_panel: OpenPanel, screenshot: Screenshot
) -> None:
    browser = open_panel()
    status = sign_in(browser, "arp_not-a-token")

    assert status == "This token was not accepted. Check that you pasted the whole tenant token."
    assert not browser.find_element(By.ID, "runs-section").is_displayed()
    assert not browser.find_element(By.ID, "checkpoint-section").is_displayed()
    assert browser.find_element(By.ID, "token").get_attribute("value") == ""
    screenshot("wrong-token")


def test_signed_in_the_tenant_sees_its_runs_checkpoint_and_commands(
    open_panel: OpenPanel, panel: Panel, screenshot: Screenshot
) -> None:
    browser = open_panel()
    assert sign_in(browser, panel.tokens["acme"]) == "Signed in as tenant acme: 2 run(s)."

    assert _text(browser, "session-text") == "Signed in as tenant acme."
    # Focus moves to the results, so a screen reader continues there.
    assert browser.switch_to.active_element.get_attribute("id") == "runs-heading"
    # No simulated root is loaded: the genuine simulated run is not checked (never "verified"),
    # and the second run's evidence (an all-zero report) fails as verify-attested-run fails it.
    assert wait_for_verdicts(browser) == (
        "Checked in this browser, this page: 0 verified, 1 failed, 1 not checked."
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    cells = [[c.text for c in row.find_elements(By.CSS_SELECTOR, "th, td")] for row in rows]
    genuine, second = panel.runs
    assert genuine.published_at is not None
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", genuine.published_at)
    assert cells == [
        [
            "0",
            genuine.run_id,
            "not checked",
            "simulated (proves nothing about hardware)",
            genuine.published_at,
            genuine.digest,
            genuine.corpus_export,
        ],
        [
            "1",
            second.run_id,
            "failed: malformed (exit 1)",
            "simulated (proves nothing about hardware)",
            "not recorded",
            second.digest,
            "none held",
        ],
    ]

    for details in browser.find_elements(By.CSS_SELECTOR, "details.run summary"):
        details.click()
    commands = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "details.run pre code")]
    envelope = f"acme-store/envelopes/sha256-{genuine.digest.removeprefix('sha256:')}.json"
    export = f"acme-store/corpora/sha256-{genuine.corpus_export.removeprefix('sha256:')}.tar.gz"  # type: ignore[union-attr]
    assert commands[:3] == [
        (
            f"attested-replay tenant fetch --server {panel.url} --token-file TENANT_TOKEN_FILE \\\n"
            "  --tenant acme --out acme-store --corpus"
        ),
        (
            f"attested-replay expected --run-id {genuine.run_id} --tenant acme \\\n"
            "  --corpus YOUR_CORPUS_DIR --this-workload --policy YOUR_POLICY.json \\\n"
            f"  --simulated-root SIMULATED_ROOT_FINGERPRINT --out expected-{genuine.run_id}.json\n"
            f"verify-attested-run --envelope {envelope} --expected expected-{genuine.run_id}.json"
        ),
        f"attested-replay tenant reproduce --envelope {envelope} --corpus {export}",
    ]
    assert commands[5].endswith("--corpus YOUR_CORPUS_DIR")

    checkpoint = _text(browser, "checkpoint")
    assert f"Origin\n{LOG_NAME}/t/acme\nTree size\n2\n" in checkpoint
    signers = [
        [c.text for c in row.find_elements(By.CSS_SELECTOR, "th, td")]
        for row in browser.find_elements(By.CSS_SELECTOR, "#checkpoint tbody tr")
    ]
    log_name, log_key_id = panel.log_key.split("+")[:2]
    assert signers == [
        [log_name, log_key_id, "the log's own key (as this server announces it)"],
        [
            WITNESS_NAME,
            panel.witness_key_id,
            "another signer: a witness cosignature, if you trust this key",
        ],
    ]
    assert "1 cosignature(s) besides the log's own." in checkpoint
    assert browser_errors(browser) == []
    screenshot("signed-in")


def test_another_tenants_token_sees_nothing_of_the_first(
    open_panel: OpenPanel, panel: Panel, screenshot: Screenshot
) -> None:
    browser = open_panel()
    assert sign_in(browser, panel.tokens["bravo"]) == "Signed in as tenant bravo: 0 run(s)."

    assert _text(browser, "runs") == "No envelope has been published for tenant bravo yet."
    page = str(browser.find_element(By.TAG_NAME, "body").text)
    for published in panel.runs:
        assert published.run_id not in page
        assert published.digest not in page
        assert published.digest.removeprefix("sha256:") not in page
    assert "/t/acme" not in page
    screenshot("other-tenant")

    # The API behind the page answers bravo's token on acme's paths as on a missing object.
    bearer = {"Authorization": f"Bearer {panel.tokens['bravo']}"}
    for path in ("panel/runs", "log/checkpoint", "corpora"):
        answer = requests.get(f"{panel.url}/v1/tenants/acme/{path}", headers=bearer, timeout=10)
        assert answer.status_code == 404


def test_the_token_lives_in_the_tab_only(open_panel: OpenPanel, panel: Panel) -> None:
    browser = open_panel()
    sign_in(browser, panel.tokens["acme"])

    stored = page_json(
        browser,
        "{cookie: document.cookie, local: localStorage.length, session: sessionStorage.length,"
        " url: location.href, field: document.getElementById('token').value,"
        " named: document.querySelectorAll('input[name]').length}",
    )
    assert stored == {
        "cookie": "",
        "local": 0,
        "session": 0,
        "url": panel.url + "/panel/",
        "field": "",
        "named": 0,
    }
    # Every request went to this origin: no third-party script, style, font or beacon.
    resources = page_json(browser, "performance.getEntriesByType('resource').map(e => e.name)")
    assert resources
    assert all(name.startswith(panel.url + "/") for name in resources)

    browser.find_element(By.ID, "sign-out").click()
    assert _text(browser, "status") == "Signed out."
    assert not browser.find_element(By.ID, "runs-section").is_displayed()
    assert _text(browser, "runs") == ""
    browser.refresh()
    assert not browser.find_element(By.ID, "runs-section").is_displayed()


def test_the_page_is_served_with_a_strict_policy(panel: Panel) -> None:
    for path in ("/panel/", "/panel/panel.js", "/panel/panel.css"):
        answer = requests.get(panel.url + path, timeout=10)
        assert answer.status_code == 200
        policy = answer.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self'" in policy
        assert "connect-src 'self'" in policy
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Referrer-Policy"] == "no-referrer"
    assert requests.get(panel.url + "/panel/other.js", timeout=10).status_code == 404
    whoami = requests.get(panel.url + "/v1/whoami", timeout=10)
    assert whoami.status_code == 401


def _check_landmarks_and_labels(browser: webdriver.Chrome) -> None:
    nodes = [role_and_name(node) for node in accessibility_tree(browser)]
    roles = [role for role, _ in nodes]
    for landmark in ("banner", "navigation", "main", "contentinfo"):
        assert roles.count(landmark) == 1, landmark
    assert ("navigation", "Sections") in nodes
    for role, name in nodes:
        if role in {"textbox", "button", "link", "combobox", "checkbox", "region", "table"}:
            assert name.strip(), f"a {role} without an accessible name"
    headings = page_json(
        browser,
        "Array.from(document.querySelectorAll('h1,h2,h3')).filter(h => h.offsetParent !== null)"
        ".map(h => Number(h.tagName[1]))",
    )
    assert headings.count(1) == 1
    assert all(later - earlier <= 1 for earlier, later in itertools.pairwise(headings))
    assert page_json(browser, "document.documentElement.lang") == "en"
    assert page_json(
        browser,
        "Array.from(document.querySelectorAll('table')).every(t => t.querySelector('caption'))",
    )
    assert page_json(browser, "document.getElementById('status').getAttribute('role')") == "status"


def _axe_violations(browser: webdriver.Chrome) -> list[object]:
    script_path = os.environ.get("ATTESTED_REPLAY_AXE_JS")
    if not script_path or not Path(script_path).is_file():
        if running_in_ci(os.environ):
            pytest.fail("CI is set but ATTESTED_REPLAY_AXE_JS is unset: .ci/browser.sh did not run")
        pytest.skip("axe-core is not installed: run `. .ci/browser.sh`")
    browser.execute_script(Path(script_path).read_text(encoding="utf-8"))
    result = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a',"
        " 'wcag21aa', 'best-practice']}})"
        ".then(r => done(r.violations.map(v => [v.id, v.impact, v.nodes.map(n => n.target)])))"
        ".catch(e => done([['axe-error', String(e)]]));"
    )
    assert isinstance(result, list)
    return result


def test_landmarks_and_labels_signed_out_and_signed_in(open_panel: OpenPanel, panel: Panel) -> None:
    browser = open_panel()
    _check_landmarks_and_labels(browser)
    sign_in(browser, panel.tokens["acme"])
    wait_for_verdicts(browser)  # the runs are drawn again once checked
    for details in browser.find_elements(By.CSS_SELECTOR, "details.run summary"):
        details.click()
    _check_landmarks_and_labels(browser)
    copy_buttons = browser.find_elements(By.CSS_SELECTOR, "button.copy")
    assert copy_buttons  # loopback http is a secure context
    labels = {button.get_attribute("aria-label") for button in copy_buttons}
    assert len(labels) == len(copy_buttons)  # each says which command of which run


def test_axe_core_finds_no_violations(open_panel: OpenPanel, panel: Panel) -> None:
    browser = open_panel()
    assert _axe_violations(browser) == []
    sign_in(browser, panel.tokens["acme"])
    wait_for_verdicts(browser)  # the runs are drawn again once checked
    for details in browser.find_elements(By.CSS_SELECTOR, "details.run summary"):
        details.click()
    assert _axe_violations(browser) == []
