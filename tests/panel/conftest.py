"""The trust panel in a real browser: Debian's Chromium driven by chromedriver through Selenium.

``.ci/browser.sh`` installs Chromium, ChromeDriver and axe-core (CI sources it); locally::

    apt-get install -y chromium chromium-driver && . .ci/browser.sh

Without the browser these tests skip, and fail when ``CI`` is set (as the PostgreSQL tests do).
Screenshots of every state are written to ``test-artifacts/panel/`` (or
``$ATTESTED_REPLAY_SCREENSHOT_DIR``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from attestation.transparency.checkpoint import COSIGNATURE_V1_ALGORITHM, VerifierKey
from attestation.transparency.cosignature import cosignature_line
from runner.cli import main as runner_main
from runner.evidence.simulated import load_or_create_simulated_amd
from runner.pipeline import RunRequest, run
from runner.publish.client import publish_envelope
from runner.service.corpus_routes import corpus_routes
from runner.service.corpus_store import open_corpus_store
from runner.service.log.checkpoint import CheckpointSigner
from runner.service.log.storage import Role, SqliteStorage
from runner.service.panel import panel_routes
from runner.service.server import create_app
from runner.service.tokens import create_token
from tests.publish.conftest import (
    LOG_NAME,
    LiveServer,
    make_envelope,
    make_service,
    running_in_ci,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CORPUS = Path(str(resources.files("runner") / "examples" / "corpus"))
CHROMIUM = os.environ.get("ATTESTED_REPLAY_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ATTESTED_REPLAY_CHROMEDRIVER", "/usr/bin/chromedriver")
WITNESS_NAME = "witness.example"


def require_browser() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).is_file()]
    if not missing:
        return
    message = (
        f"{', '.join(missing)} missing: run `. .ci/browser.sh` (installs chromium, chromium-driver)"
    )
    if running_in_ci(os.environ):
        pytest.fail(f"CI is set but {message}")
    pytest.skip(message)


@dataclass(frozen=True)
class Published:
    run_id: str
    digest: str
    corpus_export: str | None
    published_at: str | None  # None: stored by an older service, which kept no time


@dataclass(frozen=True)
class Panel:
    url: str
    tokens: dict[str, str]
    runs: tuple[Published, ...]
    log_key: str
    witness_key_id: str
    witness_key: str  # the witness's verifier key, as a tenant pins it
    simulated_root: Path  # PEM of the simulated root the genuine run chains to


def _witness_cosigned(app: Any, witness: Ed25519PrivateKey) -> Any:  # ASGI app
    """The app, with checkpoints carrying one more signature line, as a witness adds it.

    ``.../log/checkpoint`` and ``.../log/checkpoint/cosigned`` both answer the log's latest
    checkpoint with a C2SP ``cosignature/v1`` line by ``witness`` (the service itself submits
    to no witness in these tests).
    """
    key = VerifierKey(
        WITNESS_NAME, witness.public_key().public_bytes_raw(), COSIGNATURE_V1_ALGORITHM
    )
    timestamp = 1700000000

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if path.endswith("/log/checkpoint/cosigned"):
            path = path.removesuffix("/cosigned")
            scope = {**scope, "path": path, "raw_path": path.encode()}
        elif not path.endswith("/log/checkpoint"):
            await app(scope, receive, send)
            return
        start: dict[str, Any] = {}

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            body = message["body"]
            if start["status"] == 200:
                note = body.decode()
                signed = f"cosignature/v1\ntime {timestamp}\n{note.split(chr(10) * 2)[0]}\n"
                line = cosignature_line(key, timestamp, witness.sign(signed.encode()))
                body = (note + line).encode()
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await app(scope, receive, capture)

    return wrapped


@pytest.fixture(scope="session")
def panel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Panel]:
    """A publication service with the panel: tenant acme has a genuine simulated run of the
    example corpus (its export held) and a second run; tenant bravo has nothing."""
    base = tmp_path_factory.mktemp("panel")
    storage = SqliteStorage(base / "publish.sqlite3")
    storage.initialize()
    store = open_corpus_store(str(base / "publish.sqlite3"))
    signer = CheckpointSigner(LOG_NAME, Ed25519PrivateKey.generate())
    service = make_service(storage, signer, state_dir=base / "server-state")
    routes = [*corpus_routes(service, store, max_bytes=64 << 20), *panel_routes(service, store)]
    app = create_app(service, extra_routes=routes)
    witness = Ed25519PrivateKey.generate()
    server = LiveServer(_witness_cosigned(app, witness)).start()
    tokens = {
        "acme": create_token(storage, "acme", Role.TENANT),
        "bravo": create_token(storage, "bravo", Role.TENANT),
    }
    operator = create_token(storage, "acme", Role.OPERATOR)
    try:
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
        second = make_envelope("acme", "backtest-2026-12", seed=7)
        for data, run_id in (
            (genuine.envelope_bytes, "backtest-2026-11"),
            (second, "backtest-2026-12"),
        ):
            publish_envelope(
                server.url,
                data,
                tenant="acme",
                run_id=run_id,
                token=operator,
                spool_dir=base / "spool",
            )
        with sqlite3.connect(storage.path) as db:  # as an older service would have stored it
            db.execute("UPDATE envelopes SET published_at = NULL WHERE log_index = 1")
        published_at = storage.listing("acme", 0, 1)[0].published_at
        archive = base / "corpus.tar.gz"
        assert runner_main(["corpus", "export", str(EXAMPLE_CORPUS), "--out", str(archive)]) == 0
        token_file = base / "operator.token"
        token_file.write_text(operator)
        upload = ["corpus", "upload", str(archive), "--server", server.url, "--tenant", "acme"]
        assert runner_main([*upload, "--token-file", str(token_file)]) == 0
        export = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
        simulated_root = base / "simulated-root.pem"
        simulate = ["simulate", "root", "--state-dir", str(state)]
        assert runner_main([*simulate, "--out", str(simulated_root)]) == 0
        witness_key = VerifierKey(
            WITNESS_NAME, witness.public_key().public_bytes_raw(), COSIGNATURE_V1_ALGORITHM
        )
        yield Panel(
            url=server.url,
            tokens=tokens,
            runs=(
                Published("backtest-2026-11", genuine.envelope_digest, export, published_at),
                Published(
                    "backtest-2026-12", "sha256:" + hashlib.sha256(second).hexdigest(), None, None
                ),
            ),
            log_key=signer.verifier_key.encode(),
            witness_key_id=witness_key.key_id.hex(),
            witness_key=witness_key.encode(),
            simulated_root=simulated_root,
        )
    finally:
        server.stop()
        storage.close()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # As root on a machine whose network reaches nothing: no sandbox, and none of Chromium's
    # background connections (they would be refused, many at a time).
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=ChromeService(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    directory = Path(
        os.environ.get("ATTESTED_REPLAY_SCREENSHOT_DIR", REPO / "test-artifacts" / "panel")
    )
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


@pytest.fixture
def screenshot(browser: webdriver.Chrome, screenshot_dir: Path) -> Callable[[str], Path]:
    """``screenshot(state)`` writes the whole page as ``<state>.png`` and returns its path."""

    def take(state: str) -> Path:
        height = int(browser.execute_script("return document.documentElement.scrollHeight"))
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {
                "width": 1280,
                "height": min(max(height, 900), 8000),
                "deviceScaleFactor": 1,
                "mobile": False,
            },
        )
        path = screenshot_dir / f"{state}.png"
        try:
            assert browser.save_screenshot(str(path))
        finally:
            browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        assert path.stat().st_size > 10_000
        return path

    return take


@pytest.fixture
def open_panel(browser: webdriver.Chrome, panel: Panel) -> Callable[[], webdriver.Chrome]:
    """Load the page afresh (signed out) and wait until the contract is rendered."""

    def load() -> webdriver.Chrome:
        browser.get_log("browser")  # type: ignore[no-untyped-call]  # drop earlier pages' logs
        browser.get(panel.url + "/panel/")
        WebDriverWait(browser, 10).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#contract article.row")
        )
        return browser

    return load


def sign_in(browser: webdriver.Chrome, token: str) -> str:
    """Type ``token`` into the sign-in form, submit, and return the status message."""
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#signin button[type=submit]").click()
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.ID, "status").text not in ("", "Signing in…")
    )
    return str(browser.find_element(By.ID, "status").text)


def accessibility_tree(browser: webdriver.Chrome) -> list[dict[str, Any]]:
    """Chromium's computed accessibility tree (CDP), the nodes a screen reader is given."""
    nodes = browser.execute_cdp_cmd("Accessibility.getFullAXTree", {})["nodes"]
    return [node for node in nodes if not node.get("ignored")]


def role_and_name(node: dict[str, Any]) -> tuple[str, str]:
    return (
        str(node.get("role", {}).get("value", "")),
        str(node.get("name", {}).get("value", "")),
    )


def browser_errors(browser: webdriver.Chrome) -> list[dict[str, Any]]:
    entries = browser.get_log("browser")  # type: ignore[no-untyped-call]  # selenium: untyped
    return [entry for entry in entries if entry["level"] == "SEVERE"]


def page_json(browser: webdriver.Chrome, script: str) -> Any:  # JSON
    return json.loads(browser.execute_script(f"return JSON.stringify({script})"))


def wait_for_verdicts(browser: webdriver.Chrome) -> str:
    """Wait until the page has checked the envelopes of the page of runs shown; its summary."""
    WebDriverWait(browser, 60).until(
        lambda d: d.find_element(By.ID, "runs-summary").text.startswith("Checked in this browser")
    )
    return str(browser.find_element(By.ID, "runs-summary").text)


def load_file(browser: webdriver.Chrome, input_id: str, path: Path | None) -> str:
    """Choose ``path`` in a file input (None: clear it) and return the status line under it."""
    field = browser.find_element(By.ID, input_id)
    status_id = field.get_attribute("aria-describedby")
    assert status_id
    before = browser.find_element(By.ID, status_id).text
    if path is None:
        browser.execute_script(
            "arguments[0].value = ''; arguments[0].dispatchEvent(new Event('change'))", field
        )
    else:
        field.send_keys(str(path))
    WebDriverWait(browser, 20).until(
        lambda d: d.find_element(By.ID, status_id).text not in ("", before)
    )
    return str(browser.find_element(By.ID, status_id).text)
