"""What the trust panel checks in the browser, in Debian's Chromium: verdicts per run under the
tenant's pins, a tampered envelope, every page of 1, 200 and 1,000 runs, a 390 px screen, the
keyboard, JavaScript off, witness cosignatures, and the verify command it prints."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from attestation.cli import main as verify_main
from attestation.endorsement.trust import fingerprint
from attestation.envelope.expected import ExpectedValues
from attestation.envelope.verification import verify_envelope
from attestation.transparency.entries import LogEntry
from runner.cli import main as runner_main
from runner.evidence.simulated import load_or_create_simulated_amd
from runner.pipeline import RunRequest, run
from runner.publish.client import publish_envelope
from runner.service.corpus_store import open_corpus_store
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.sequencer import AppendRequest, PublicationLog
from runner.service.log.shard_sets import PartShape
from runner.service.log.storage import Role, SqliteStorage
from runner.service.panel import panel_routes
from runner.service.server import create_app
from runner.service.tokens import create_token
from tests.panel.conftest import (
    EXAMPLE_CORPUS,
    Panel,
    browser_errors,
    load_file,
    page_json,
    sign_in,
    wait_for_verdicts,
)
from tests.panel.test_panel import _axe_violations
from tests.publish.conftest import LOG_NAME, LiveServer, make_envelope, make_service

OpenPanel = Callable[[], webdriver.Chrome]
#: A whole, unsharded run's envelope.
UNSHARDED = PartShape("unsharded", None)


def _cells(browser: webdriver.Chrome, row: int) -> list[str]:
    line = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")[row]
    return [c.text for c in line.find_elements(By.CSS_SELECTOR, "th, td")]


def _expand_all(browser: webdriver.Chrome) -> None:
    for summary in browser.find_elements(By.CSS_SELECTOR, "details.run summary"):
        summary.click()


# ---- the session panel: one genuine simulated run, one with an all-zero report -------------------


def test_the_tenants_simulated_root_makes_the_genuine_run_verified(
    open_panel: OpenPanel, panel: Panel
) -> None:
    browser = open_panel()
    status = load_file(browser, "simulated-root", panel.simulated_root)
    assert status.startswith("Simulated root sha256:")
    fingerprint = status.split()[2]
    sign_in(browser, panel.tokens["acme"])

    assert wait_for_verdicts(browser) == (
        "Checked in this browser, this page: 1 verified, 1 failed, 0 not checked."
    )
    assert _cells(browser, 0)[2] == "verified (simulated root you loaded)"
    assert _cells(browser, 1)[2] == "failed: malformed (exit 1)"
    _expand_all(browser)
    first = browser.find_elements(By.CSS_SELECTOR, "details.run")[0].text
    assert "Corpus checksum (bound: checked in this browser)" in first
    # Without expected values the page says what it did not check, never only "verified".
    assert "MEASUREMENT (measurements not pinned)" in first
    assert "HOST_DATA (hostData not pinned)" in first
    assert "your expected run, corpus, evaluation and workload (load your expected values)" in first
    assert "platform policy (the defaults)" in first
    second = browser.find_elements(By.CSS_SELECTOR, "details.run")[1].text
    assert "(bound" not in second
    assert "Result digest (as the envelope states it: not checked)" in second
    commands = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "details.run pre code")]
    assert f"--simulated-root {fingerprint} --out" in commands[1]
    assert browser_errors(browser) == []


def test_the_printed_verify_commands_verify_the_simulated_run(
    open_panel: OpenPanel, panel: Panel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's copy-paste commands, with the tenant's own files put in for the placeholders,
    exit 0 on the genuine simulated run; the verdict names what was not pinned."""
    browser = open_panel()
    load_file(browser, "simulated-root", panel.simulated_root)
    sign_in(browser, panel.tokens["acme"])
    wait_for_verdicts(browser)
    _expand_all(browser)
    verify_line = browser.find_elements(By.CSS_SELECTOR, "details.run pre code")[1].text
    genuine = panel.runs[0]
    envelope = tmp_path / f"acme-store/envelopes/sha256-{genuine.digest[7:]}.json"
    envelope.parent.mkdir(parents=True)
    stored = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {headers: {Authorization: 'Bearer ' + arguments[1]}})"
        ".then(r => r.text()).then(done);",
        f"/v1/tenants/acme/envelopes/{genuine.digest}",
        panel.tokens["acme"],
    )
    envelope.write_text(stored)
    policy = tmp_path / "policy.json"
    policy.write_text("{}")
    text = verify_line.replace("YOUR_CORPUS_DIR", str(EXAMPLE_CORPUS))
    text = text.replace("YOUR_POLICY.json", str(policy)).replace(" \\\n", " ")
    expected_command, verify_command = text.split("\n")
    with contextlib.chdir(tmp_path):
        assert runner_main(shlex.split(expected_command)[1:]) == 0
        capsys.readouterr()
        assert verify_main(shlex.split(verify_command)[1:]) == 0
    out = capsys.readouterr().out
    # Never a plain VERIFIED: the verdict names what the expected values did not pin.
    assert out.startswith("VERIFIED (SIMULATED")
    assert out.endswith("; MEASUREMENT and HOST_DATA not checked (not pinned)\n")

    # The expected file the command wrote, loaded into the page, checks the same run.
    written = tmp_path / f"expected-{genuine.run_id}.json"
    assert load_file(browser, "expected-file", written).startswith(
        f"Expected values for run {genuine.run_id} loaded"
    )
    assert wait_for_verdicts(browser).startswith("Checked in this browser, this page: 1 verified")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(written.read_text()), "runId": "someone-else"}))
    load_file(browser, "expected-file", other)
    wait_for_verdicts(browser)
    assert _cells(browser, 0)[2] == "failed: expectation (exit 8)"


def test_witness_cosignatures_are_verified_under_the_keys_the_tenant_pins(
    open_panel: OpenPanel, panel: Panel
) -> None:
    browser = open_panel()
    sign_in(browser, panel.tokens["acme"])
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#cosigned td"))
    row = browser.find_element(By.CSS_SELECTOR, "#cosigned tbody tr")
    cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "th, td")]
    assert cells == [
        "witness.example",
        panel.witness_key_id,
        "2023-11-14T22:13:20.000Z",
        "not checked: you pinned no key of this name and ID",
    ]

    keys = browser.find_element(By.ID, "witness-keys")
    keys.send_keys(panel.witness_key + "\nnot-a-key\n")
    WebDriverWait(browser, 30).until(
        lambda d: "verifies" in d.find_element(By.CSS_SELECTOR, "#cosigned tbody tr").text
    )
    assert browser.find_element(By.ID, "witness-keys-status").text == (
        "1 witness key(s) pinned; not Ed25519 witness keys, ignored: not-a-key"
    )
    assert browser.find_element(By.CSS_SELECTOR, "#cosigned tbody td:last-child").text == (
        "verifies under the key you pinned"
    )
    # A cosignature changed by one bit does not verify under that key.
    forged = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "(async () => {"
        "  const note = await (await fetch('/v1/tenants/acme/log/checkpoint/cosigned',"
        f"    {{headers: {{Authorization: 'Bearer {panel.tokens['acme']}'}}}})).text();"
        "  const lines = note.split('\\n');"
        "  const last = lines.length - 2;"
        "  const [dash, name, blob] = lines[last].split(' ');"
        "  const raw = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0)); raw[40] ^= 1;"
        "  lines[last] = [dash, name, btoa(String.fromCharCode(...raw))].join(' ');"
        "  const key = await AttestedReplayVerify.parseWitnessKey("
        f"    {json.dumps(panel.witness_key)}, 4);"
        "  return (await AttestedReplayVerify.checkCosignatures(lines.join('\\n'), [key]))"
        "    .map((c) => c.status);"
        "})().then(done, (e) => done(String(e)));",
    )
    assert forged == ["not-checked", "does-not-verify"]  # the log's own line, the witness's


def test_with_javascript_off_the_page_says_what_it_cannot_check(
    browser: webdriver.Chrome, panel: Panel
) -> None:
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        browser.get(panel.url + "/panel/")
        box = browser.find_element(By.ID, "noscript")
        assert box.is_displayed()
        text = box.text
    finally:
        browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
    assert text.startswith("JavaScript is off, so this page checks nothing.")
    for claim in ("report signature", "AMD's pinned roots", "REPORT_DATA", "the log's own"):
        assert claim in text


# ---- panels of their own: many runs, a tampered envelope --------------------------------------


@dataclass(frozen=True)
class OwnPanel:
    url: str
    token: str
    storage: SqliteStorage


@contextlib.contextmanager
def _serve(base: Path, runs: int = 0) -> Iterator[tuple[LiveServer, SqliteStorage, str, str]]:
    """A service with the panel; ``runs`` envelopes (``run-0000``...) integrated into acme's
    log before it starts, in the log's own batches (as fast as the sequencer makes them)."""
    storage = SqliteStorage(base / "publish.sqlite3")
    storage.initialize()
    store = open_corpus_store(str(base / "publish.sqlite3"))
    signer = CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate())
    service = make_service(storage, signer, state_dir=base / "server-state")
    requests = []
    for index in range(runs):
        run_id = f"run-{index:04d}"
        data = make_envelope("acme", run_id, seed=index)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        entry = LogEntry(tenant="acme", run_id=run_id, envelope=digest).to_bytes()
        requests.append(AppendRequest("acme", digest, data, run_id, UNSHARDED, entry))
    log = service.log
    assert isinstance(log, PublicationLog)
    for future in log.integrate(requests):
        assert future.result().log_index is not None
    server = LiveServer(create_app(service, extra_routes=panel_routes(service, store))).start()
    try:
        yield (
            server,
            storage,
            create_token(storage, "acme", Role.TENANT),
            create_token(storage, "acme", Role.OPERATOR),
        )
    finally:
        server.stop()
        storage.close()


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, OwnPanel]]:
    """Three services: tenant acme has 1, 200 and 1,000 published envelopes."""
    with contextlib.ExitStack() as stack:
        panels = {}
        for count in (1, 200, 1000):
            base = tmp_path_factory.mktemp(f"runs-{count}")
            server, storage, token, _operator = stack.enter_context(_serve(base, count))
            panels[count] = OwnPanel(server.url, token, storage)
        yield panels


def _open(browser: webdriver.Chrome, url: str) -> None:
    browser.get(url + "/panel/")
    WebDriverWait(browser, 10).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


@pytest.mark.parametrize("count", [1, 200, 1000])
def test_every_run_is_reachable_page_by_page(
    browser: webdriver.Chrome, many_runs: dict[int, OwnPanel], count: int
) -> None:
    own = many_runs[count]
    _open(browser, own.url)
    assert sign_in(browser, own.token) == f"Signed in as tenant acme: {count} run(s)."
    pages = -(-count // 100)
    seen: list[str] = []
    for number in range(1, pages + 1):
        wait_for_verdicts(browser)
        first = (number - 1) * 100 + 1
        last = min(count, number * 100)
        assert browser.find_element(By.ID, "runs-range").text == (
            f"Runs {first}\N{EN DASH}{last} of {count} (page {number} of {pages})"
        )
        seen.extend(
            c.text for c in browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr td:first-child")
        )
        following = browser.find_element(By.ID, "runs-next")
        if number == pages:
            assert not following.is_enabled()
        else:
            following.click()
    assert seen == [str(index) for index in range(count)]
    # Every envelope on the last page was checked (their reports are all zero: malformed).
    assert wait_for_verdicts(browser).endswith(
        f"0 verified, {count - (pages - 1) * 100} failed, 0 not checked."
    )


def test_pages_by_keyboard_at_390_px_and_axe_clean(
    browser: webdriver.Chrome, many_runs: dict[int, OwnPanel], screenshot_dir: Path
) -> None:
    own = many_runs[200]
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True},
    )
    try:
        _open(browser, own.url)
        sign_in(browser, own.token)
        wait_for_verdicts(browser)
        # Every cell of the first run, the platform's "simulated" above all, is on screen.
        geometry = page_json(
            browser,
            "Array.from(document.querySelectorAll('#runs tbody tr:first-child th,"
            " #runs tbody tr:first-child td')).map(c => {const r = c.getBoundingClientRect();"
            " return [c.dataset.label, r.left >= 0 && r.right <= 390 && r.width > 0]})",
        )
        assert geometry == [
            [label, True]
            for label in (
                "Log index",
                "Run ID",
                "Checked in this browser",
                "Platform",
                "Published (server clock)",
                "Envelope digest",
                "Corpus export",
            )
        ]
        assert page_json(browser, "document.documentElement.scrollWidth") <= 390
        platform = browser.find_element(By.CSS_SELECTOR, "#runs tbody tr td[data-label=Platform]")
        assert platform.text == "simulated (proves nothing about hardware)"
        label = browser.execute_script(
            "return getComputedStyle(arguments[0], '::before').content", platform
        )
        assert label == '"Platform: "'  # each line says which column it is
        browser.find_element(By.ID, "runs-heading").location_once_scrolled_into_view  # noqa: B018
        assert browser.save_screenshot(str(screenshot_dir / "runs-390px.png"))

        # Tab from the runs heading reaches "Next runs"; Enter turns the page.
        browser.find_element(By.ID, "runs-heading").click()
        browser.execute_script("document.getElementById('runs-heading').focus()")
        for _ in range(10):
            if browser.switch_to.active_element.get_attribute("id") == "runs-next":
                break
            browser.switch_to.active_element.send_keys(Keys.TAB)
        assert browser.switch_to.active_element.get_attribute("id") == "runs-next"
        browser.switch_to.active_element.send_keys(Keys.ENTER)
        wait_for_verdicts(browser)
        assert (
            browser.find_element(By.ID, "runs-range").text
            == "Runs 101\N{EN DASH}200 of 200 (page 2 of 2)"
        )
        assert _axe_violations(browser) == []
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.fixture(scope="module")
def tampered(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[OwnPanel, Path, dict[str, Any]]]:
    """A genuine simulated run, then its stored envelope rewritten in the database (the result
    digest its binding claims changed; the log still names the genuine envelope)."""
    base = tmp_path_factory.mktemp("tampered")
    state = base / "state"
    load_or_create_simulated_amd(state)
    genuine = run(
        RunRequest(
            corpus=str(EXAMPLE_CORPUS),
            run_id="backtest-2026-11",
            tenant="acme",
            evidence="simulated",
            out=base / "envelope.json",
            state_dir=state,
        )
    )
    root = base / "simulated-root.pem"
    assert runner_main(["simulate", "root", "--state-dir", str(state), "--out", str(root)]) == 0
    with _serve(base) as (server, storage, token, operator):
        publish_envelope(
            server.url,
            genuine.envelope_bytes,
            tenant="acme",
            run_id="backtest-2026-11",
            token=operator,
            spool_dir=base / "spool",
        )
        document = json.loads(genuine.envelope_bytes)
        document["binding"]["resultDigest"] = "sha256:" + "0" * 64
        forged = json.dumps(document).encode()
        with sqlite3.connect(storage.path) as db:
            db.execute("UPDATE envelopes SET data = ? WHERE log_index = 0", (forged,))
        yield OwnPanel(server.url, token, storage), root, {"forged": forged, "root": root}


def test_an_envelope_rewritten_in_the_database_fails_with_its_class(
    browser: webdriver.Chrome, tampered: tuple[OwnPanel, Path, dict[str, Any]]
) -> None:
    own, root, parts = tampered
    _open(browser, own.url)
    load_file(browser, "simulated-root", root)
    sign_in(browser, own.token)
    wait_for_verdicts(browser)

    assert _cells(browser, 0)[2] == "failed: binding (exit 7)"
    _expand_all(browser)
    details = browser.find_element(By.CSS_SELECTOR, "details.run").text
    assert "REPORT_DATA" in details
    assert "not the sha256:" in details  # the log names another envelope
    assert "(bound: checked" not in details
    # The Python verifier gives the same class for the same bytes under the same root.
    pinned = fingerprint(x509.load_pem_x509_certificate(root.read_bytes()))
    expected = ExpectedValues.model_validate(
        {
            "runId": "backtest-2026-11",
            "corpusChecksum": "sha256:" + "1" * 64,
            "simulatedRoots": [pinned],
            "acceptAnyEvaluation": True,
        }
    )
    result = verify_envelope(parts["forged"], expected, now=datetime.now(UTC))
    assert result.failure_class is not None
    assert result.failure_class.value == "binding"
