"""The panel's in-browser verifier (static/verify.js) against the Python verifier, in Chromium:
the same verdict class on every real SEV-SNP vector of tests/assets and on bit flips of each.

The Python side is ``verify_endorsement`` (stages 1-4 of ``verify-attested-run``: parse,
chain to a pinned AMD root at ``now``, report signature, the certificate describes the
report), and ``verify_report`` under the default policy for the unflipped vectors (stages 1-6,
cases.json's secure_default); then whole envelopes against ``verify_envelope``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from cryptography import x509
from selenium import webdriver

from attestation.abi.report import LAYOUT
from attestation.endorsement.trust import TrustStore, fingerprint
from attestation.envelope.expected import ExpectedValues
from attestation.envelope.verification import verify_envelope
from attestation.verify.policy import Policy
from attestation.verify.verifier import verify_endorsement, verify_report
from tests.panel.conftest import Panel

ASSETS = Path(__file__).resolve().parents[1] / "assets"
CASES: list[dict[str, Any]] = json.loads((ASSETS / "cases.json").read_text())["cases"]
#: Certificate bytes flipped: one in this many (each a different bit), across the whole DER.
CERTIFICATE_STRIDE = 7

#: Verdicts asked of the page per script call.
BATCH = 400

OpenPanel = Callable[[], webdriver.Chrome]


def _python_policy_verdict(report: bytes, certificate: bytes, now: str) -> str:
    """``verify-attested-run --report --endorsement`` under the default policy ({})."""
    result = verify_report(
        report,
        certificate,
        policy=Policy(),
        trust=TrustStore.amd(),
        now=datetime.fromisoformat(now),
    )
    return "verified" if result.failure_class is None else result.failure_class.value


def _python_verdict(report: bytes, certificate: bytes, now: str) -> str:
    result = verify_endorsement(
        report,
        certificate,
        trust=TrustStore.amd(),
        now=datetime.fromisoformat(now),
    )
    return "verified" if result.failure_class is None else result.failure_class.value


def _flip(data: bytes, offset: int, bit: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 1 << bit
    return bytes(out)


def _variants(case: dict[str, Any]) -> Iterator[tuple[str, bytes, bytes]]:
    report = (ASSETS / "real" / case["report"]).read_bytes()
    certificate = (ASSETS / "real" / case["cert"]).read_bytes()
    name = f"{case['report']}+{case['cert']}"
    yield name, report, certificate
    for spec in LAYOUT:  # the first and the last byte of every field, reserved ones included
        for offset, bit in ((spec.offset, 0), (spec.end - 1, 7)):
            yield (
                f"{name} report[{offset:#x}] bit {bit} ({spec.name})",
                _flip(report, offset, bit),
                certificate,
            )
    for index, offset in enumerate(range(0, len(certificate), CERTIFICATE_STRIDE)):
        bit = index % 8
        yield f"{name} cert[{offset}] bit {bit}", report, _flip(certificate, offset, bit)


def _browser_verdicts(
    browser: webdriver.Chrome, jobs: list[dict[str, Any]]
) -> list[dict[str, str]]:
    script = """
const [jobs, done] = [arguments[0], arguments[arguments.length - 1]];
const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
(async () => {
  const data = await (await fetch("/panel/verifier-data.json")).json();
  const trust = await AttestedReplayVerify.loadTrust(data);
  const out = [];
  for (const job of jobs) {
    const args = [bytes(job.report), [bytes(job.cert)], trust, new Date(job.now)];
    out.push(job.policy
      ? await AttestedReplayVerify.reportVerdict(...args)
      : await AttestedReplayVerify.endorsementVerdict(...args));
  }
  return out;
})().then(done, (e) => done([{verdict: "script-error", detail: String(e)}]));
"""
    browser.set_script_timeout(110)  # below the driver's own 120 s read timeout
    out: list[dict[str, str]] = []
    for start in range(0, len(jobs), BATCH):
        result = browser.execute_async_script(script, jobs[start : start + BATCH])
        assert isinstance(result, list)
        out.extend(result)
    return out


def test_every_real_vector_and_bit_flip_gets_the_python_verdict_class(
    open_panel: OpenPanel, panel: Panel
) -> None:
    del panel  # the server the page comes from
    browser = open_panel()
    names: list[str] = []
    jobs: list[dict[str, Any]] = []
    expected: list[str] = []
    for case in CASES:
        for name, report, certificate in _variants(case):
            names.append(name)
            jobs.append(
                {
                    "report": base64.b64encode(report).decode(),
                    "cert": base64.b64encode(certificate).decode(),
                    "now": case["now"],
                }
            )
            expected.append(_python_verdict(report, certificate, case["now"]))
        # The whole raw verdict, platform policy included (cases.json's secure_default).
        report = (ASSETS / "real" / case["report"]).read_bytes()
        certificate = (ASSETS / "real" / case["cert"]).read_bytes()
        names.append(f"{case['report']}+{case['cert']} under the default policy")
        jobs.append(
            {
                "report": base64.b64encode(report).decode(),
                "cert": base64.b64encode(certificate).decode(),
                "now": case["now"],
                "policy": True,
            }
        )
        expected.append(_python_policy_verdict(report, certificate, case["now"]))
    got = _browser_verdicts(browser, jobs)

    differ = [
        (name, want, answer)
        for name, want, answer in zip(names, expected, got, strict=True)
        if answer["verdict"] != want
    ]
    assert differ == [], f"{len(differ)} of {len(jobs)} differ: " + "\n".join(map(str, differ))
    # Every class the vectors reach is exercised, not only "verified".
    assert {"verified", "malformed", "untrusted-chain", "bad-signature", "platform-policy"} <= set(
        expected
    )


def test_the_python_reference_reaches_the_verdicts_cases_json_records() -> None:
    # The reference the browser is compared with is itself right on the unflipped vectors.
    for case in CASES:
        report = (ASSETS / "real" / case["report"]).read_bytes()
        certificate = (ASSETS / "real" / case["cert"]).read_bytes()
        recorded = case["crypto"]
        verdict = _python_verdict(report, certificate, case["now"])
        if recorded == "pass":
            assert verdict == "verified", case
        elif recorded.startswith("fail:") and recorded.count("_or_") == 0:
            assert verdict == recorded.removeprefix("fail:").replace("_", "-"), case
        else:
            assert verdict in {"endorsement-mismatch", "bad-signature"}, case


# ---- whole envelopes: the genuine simulated run of the panel fixture and changes of it ---------


def _envelope_variants(genuine: bytes) -> Iterator[tuple[str, bytes]]:
    document = json.loads(genuine)
    yield "genuine", genuine

    def changed(path: tuple[str, ...], value: object) -> bytes:
        copy = json.loads(genuine)
        target = copy
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return json.dumps(copy).encode()

    zero = "sha256:" + "0" * 64
    yield "binding.runId", changed(("binding", "runId"), "another-run")
    yield "binding.resultDigest", changed(("binding", "resultDigest"), zero)
    yield "binding.corpusChecksum", changed(("binding", "corpusChecksum"), zero)
    yield "measurement", changed(("measurement",), "0" * 96)
    yield "hostData", changed(("hostData",), "1" * 64)
    yield "reportData", changed(("reportData",), "2" * 128)
    yield "platform", changed(("platform",), "sev-snp")
    yield "runId", changed(("runId",), "another-run")
    yield "certChain", changed(("evidence", "certChain"), "not PEM")
    report = base64.b64decode(document["evidence"]["report"])
    for spec in LAYOUT:
        for offset, bit in ((spec.offset, 0), (spec.end - 1, 7)):
            flipped = base64.b64encode(_flip(report, offset, bit)).decode()
            yield (
                f"report[{offset:#x}] bit {bit} ({spec.name})",
                changed(("evidence", "report"), flipped),
            )


def test_envelopes_and_changes_of_them_get_the_python_verdict_class(
    open_panel: OpenPanel, panel: Panel
) -> None:
    genuine_run = panel.runs[0]
    bearer = {"Authorization": f"Bearer {panel.tokens['acme']}"}
    genuine = requests.get(
        f"{panel.url}/v1/tenants/acme/envelopes/{genuine_run.digest}", headers=bearer, timeout=10
    ).content
    binding = json.loads(genuine)["binding"]
    root = panel.simulated_root.read_bytes()
    pinned = fingerprint(x509.load_pem_x509_certificate(root))
    mine = {
        "runId": binding["runId"],
        "corpusChecksum": binding["corpusChecksum"],
        "tenant": "acme",
        "evaluationDigest": binding["evaluationDigest"],
    }
    expectations = {
        "mine": mine,
        "another run": {**mine, "runId": "backtest-1999-01"},
        "evaluation unpinned": {k: v for k, v in mine.items() if k != "evaluationDigest"},
    }
    jobs: list[dict[str, Any]] = []
    wanted: list[tuple[str, str]] = []
    for label, expected in expectations.items():
        values = ExpectedValues.model_validate({**expected, "simulatedRoots": [pinned]})
        for name, envelope in _envelope_variants(genuine):
            result = verify_envelope(envelope, values, now=datetime.now(UTC))
            verdict = "verified" if result.failure_class is None else result.failure_class.value
            wanted.append((f"{label}: {name}", verdict))
            jobs.append({"envelope": base64.b64encode(envelope).decode(), "expected": expected})
    browser = open_panel()
    browser.set_script_timeout(110)
    got = browser.execute_async_script(
        """
const [jobs, root, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
(async () => {
  const data = await (await fetch("/panel/verifier-data.json")).json();
  const [der] = AttestedReplayVerify.pemCertificates(root, "root");
  const trust = await AttestedReplayVerify.loadTrust(data, [der]);
  const out = [];
  for (const job of jobs) {
    const v = await AttestedReplayVerify.verifyEnvelope(bytes(job.envelope), trust, {expected: job.expected});
    out.push(v.status === "verified" ? "verified" : v.failureClass || v.status);
  }
  return out;
})().then(done, (e) => done([String(e)]));
""",
        jobs,
        root.decode(),
    )
    differ = [
        (name, want, answer)
        for (name, want), answer in zip(wanted, got, strict=True)
        if answer != want
    ]
    assert differ == []
    assert {"verified", "binding", "expectation", "malformed", "bad-signature"} <= {
        want for _, want in wanted
    }
