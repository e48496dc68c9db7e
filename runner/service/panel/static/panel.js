// The trust panel. No framework and no build step: this file is served as it is.
// The tenant token lives in the closure below only: never in a cookie, in storage or in a URL;
// it is sent to this server, and nowhere else, as an Authorization: Bearer header.
"use strict";
(() => {
  let token = null;
  let tenant = null;
  let logKey = null; // {name, keyId} of the log key this server announces

  const $ = (id) => document.getElementById(id);

  const { el } = window.AttestedReplayDom; // dom.js

  // Command labels mark code with `backticks` only; everything else is plain text.
  function richText(text) {
    const fragment = document.createDocumentFragment();
    text.split("`").forEach((part, index) => {
      if (part) fragment.append(index % 2 ? el("code", { text: part }) : document.createTextNode(part));
    });
    return fragment;
  }

  function announce(message, isError) {
    const status = $("status");
    status.textContent = message;
    status.classList.toggle("error", Boolean(isError));
  }

  async function api(path, { auth = true, as = "json" } = {}) {
    const headers = { Accept: as === "json" ? "application/json" : "text/plain" };
    if (auth) headers.Authorization = "Bearer " + token;
    const response = await fetch(path, { headers, cache: "no-store", credentials: "omit", redirect: "error" });
    if (!response.ok) {
      const error = new Error("HTTP " + response.status);
      error.status = response.status;
      throw error;
    }
    return as === "json" ? response.json() : response.text();
  }

  // ---- checking in this browser ---------------------------------------------------------------

  const PAGE_SIZE = 100; // runs shown per page (the server's page size too)
  const MAX_PAGES = 100000; // a server whose `next` never ends is refused, not followed forever
  const Verify = window.AttestedReplayVerify;
  let verifierData = null;
  let trust = null; // Promise of the trust store (AMD's pinned roots, and the tenant's simulated root)
  const tenantInputs = { simulatedRoot: null, simulatedFingerprint: null, expected: null, expectedName: null, witnessKeys: [] };
  let allRuns = [];
  let page = 0;
  const verdicts = new Map(); // envelope digest -> verdict (from verifyEnvelope)

  function bytesOf(buffer) {
    return new Uint8Array(buffer);
  }

  async function hexSha256(bytes) {
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
    return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function resetTrust() {
    trust = Verify.loadTrust(verifierData, tenantInputs.simulatedRoot ? [tenantInputs.simulatedRoot] : []);
    verdicts.clear();
  }

  async function envelopeBytes(run) {
    const path = `/v1/tenants/${encodeURIComponent(tenant)}/envelopes/${encodeURIComponent(run.digest)}`;
    const response = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store", credentials: "omit", redirect: "error" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return bytesOf(await response.arrayBuffer());
  }

  async function verdictFor(run) {
    if (run.problem) return { status: "failed", failureClass: "malformed", detail: run.problem, checked: [], notChecked: [] };
    const bytes = await envelopeBytes(run);
    const verdict = await Verify.verifyEnvelope(bytes, await trust, { expected: tenantInputs.expected });
    const actual = "sha256:" + (await hexSha256(bytes));
    if (actual !== run.digest) {
      // The log names one envelope; the server returned another (rewritten where it is stored).
      const why = `the server returned an envelope whose digest is ${actual}, not the ${run.digest} the log names`;
      if (verdict.status === "failed") return { ...verdict, detail: `${verdict.detail}; ${why}` };
      return { status: "failed", failureClass: "log-mismatch", detail: why, checked: [], notChecked: verdict.notChecked };
    }
    if (verdict.status === "failed" && verdict.failureClass === "untrusted-chain" && run.platform === "simulated" && !tenantInputs.simulatedRoot) {
      return { status: "not-checked", detail: "simulated evidence: load the simulated root you pinned (below) to check it; without it the chain is untrusted (verify-attested-run exits 2)", checked: [], notChecked: verdict.notChecked };
    }
    return verdict;
  }

  function verdictText(verdict) {
    if (!verdict) return "checking…";
    if (verdict.status === "verified") return verdict.simulated ? "verified (simulated root you loaded)" : "verified";
    if (verdict.status === "not-checked") return "not checked";
    const code = verifierData.failureClasses[verdict.failureClass];
    return `failed: ${verdict.failureClass}` + (code === undefined ? "" : ` (exit ${code})`);
  }

  function verdictClass(verdict) {
    return verdict ? "verdict verdict-" + verdict.status : "verdict";
  }

  // ---- runs --------------------------------------------------------------------------------

  function shellQuote(value) {
    return /^[A-Za-z0-9._:\/@+=-]+$/.test(value) ? value : "'" + value.replace(/'/g, "'\\''") + "'";
  }

  function commandsFor(run) {
    const server = shellQuote(window.location.origin);
    const store = shellQuote(tenant + "-store");
    const envelope = `${tenant}-store/envelopes/sha256-${run.digest.slice(7)}.json`;
    const expected = shellQuote(`expected-${run.runId}.json`);
    const fetch = [
      `attested-replay tenant fetch --server ${server} --token-file TENANT_TOKEN_FILE`,
      `  --tenant ${shellQuote(tenant)} --out ${store} --corpus`,
    ].join(" \\\n");
    const shards = run.kind === "merged" ? ` --shards ${run.shardCount}` : "";
    // Simulated evidence verifies only under a simulated root the tenant pins; hardware needs the
    // MEASUREMENT values it accepts, or the verdict cannot speak for the guest that ran.
    const pin = run.platform === "simulated"
      ? `  --simulated-root ${tenantInputs.simulatedFingerprint || "SIMULATED_ROOT_FINGERPRINT"}`
      : "  --measurement YOUR_MEASUREMENT --host-data YOUR_HOST_DATA";
    const verify = [
      `attested-replay expected --run-id ${shellQuote(run.runId)} --tenant ${shellQuote(tenant)}${shards}`,
      `  --corpus YOUR_CORPUS_DIR --this-workload --policy YOUR_POLICY.json`,
      `${pin} --out ${expected}`,
    ].join(" \\\n") + `\nverify-attested-run --envelope ${envelope} --expected ${expected}`;
    const verifyLabel = run.platform === "simulated"
      ? "Verify the envelope's evidence and binding (simulated: pin the root you were given; `attested-replay simulate root` prints its fingerprint where the run was made; without the pin verify-attested-run exits 2)"
      : "Verify the envelope's SEV-SNP evidence and binding (pin the MEASUREMENT from `attested-replay measure` and your HOST_DATA; unpinned, the verdict says they were not checked)";
    const corpus = run.corpusExport
      ? `${tenant}-store/corpora/sha256-${run.corpusExport.slice(7)}.tar.gz`
      : "YOUR_CORPUS_DIR";
    const reproduce = `attested-replay tenant reproduce --envelope ${envelope} --corpus ${corpus}`;
    if (run.kind === "shard") {
      // A shard binds its share of the run: it is verified as that shard by tenant fetch
      // --expected, and as part of the whole run through the run's merged envelope.
      return [
        ["Fetch and check the log (first fetch: add --log-key with the key you received out of band)", fetch],
        ["Re-derive this shard's result from the corpus (trusts no hardware)", reproduce],
      ];
    }
    return [
      ["Fetch and check the log (first fetch: add --log-key with the key you received out of band)", fetch],
      [verifyLabel, verify],
      ["Re-derive the result from the corpus (trusts no hardware)", reproduce],
    ];
  }

  function commandBlock(label, text, runId) {
    const code = el("code", { text });
    const block = el("div", { class: "command" }, el("p", {}, richText(label)), el("pre", {}, code));
    if (navigator.clipboard && window.isSecureContext) {
      const button = el("button", { type: "button", class: "copy", "aria-label": `Copy: ${label.split(" (")[0]} (run ${runId})`, text: "Copy" });
      button.addEventListener("click", async () => {
        try {
          await navigator.clipboard.writeText(text);
          announce("Command copied.");
        } catch {
          announce("Could not copy; select the command and copy it by hand.", true);
        }
      });
      block.append(button);
    }
    return block;
  }

  function partOf(run) {
    if (run.kind === "shard") return ` (shard ${run.shardIndex} of ${run.shardCount})`;
    if (run.kind === "merged") return ` (merged, ${run.shardCount} shards)`;
    return "";
  }

  // What a digest is worth depends on the verdict: bound only when this browser checked it.
  function digestLabel(name, verdict) {
    if (verdict && verdict.status === "verified") return `${name} (bound: checked in this browser)`;
    return `${name} (as the envelope states it: not checked)`;
  }

  function resultName(run) {
    if (run.kind === "shard") return "Shard result digest";
    if (run.kind === "merged") return "Merged result digest";
    return "Result digest";
  }

  const COLUMNS = ["Log index", "Run ID", "Checked in this browser", "Platform", "Published (server clock)", "Envelope digest", "Corpus export"];

  function cell(tag, column, attributes, ...children) {
    return el(tag, { ...attributes, "data-label": COLUMNS[column] }, ...children);
  }

  function runRow(run) {
    const verdict = run.digest ? verdicts.get(run.digest) : null;
    return el("tr", { "data-digest": run.digest || "" },
      cell("td", 0, { text: String(run.logIndex) }),
      cell("th", 1, { scope: "row", text: run.runId ? run.runId + partOf(run) : "(unreadable entry)" }),
      cell("td", 2, { class: verdictClass(verdict), text: verdictText(verdict) }),
      cell("td", 3, { text: run.problem ? run.problem : run.platform === "simulated" ? "simulated (proves nothing about hardware)" : run.platform }),
      cell("td", 4, {}, run.publishedAt ? el("time", { datetime: run.publishedAt, text: run.publishedAt }) : "not recorded"),
      cell("td", 5, {}, run.digest ? el("code", { class: "digest", text: run.digest }) : "unknown"),
      cell("td", 6, {}, run.corpusExport ? el("code", { class: "digest", text: run.corpusExport }) : "none held"));
  }

  function runDetails(run) {
    const verdict = verdicts.get(run.digest);
    const checks = [];
    if (verdict) {
      checks.push(el("dt", { text: "Verdict in this browser" }), el("dd", {}, el("strong", { text: verdictText(verdict) }), " ", verdict.detail || ""));
      if (verdict.notChecked && verdict.notChecked.length) {
        checks.push(el("dt", { text: "Not checked here" }), el("dd", {}, el("ul", {}, ...verdict.notChecked.map((item) => el("li", { text: item })))));
      }
    }
    return el("details", { class: "run", "data-digest": run.digest },
      el("summary", {}, `Checks and commands for run ${run.runId}${partOf(run)}`),
      el("dl", {},
        ...checks,
        el("dt", { text: digestLabel("Corpus checksum", verdict) }), el("dd", {}, el("code", { class: "digest", text: run.corpusChecksum })),
        el("dt", { text: digestLabel("Evaluation digest", verdict) }), el("dd", {}, el("code", { class: "digest", text: run.evaluationDigest })),
        el("dt", { text: digestLabel(resultName(run), verdict) }), el("dd", {}, el("code", { class: "digest", text: run.resultDigest }))),
      ...commandsFor(run).map(([label, text]) => commandBlock(label, text, run.runId)));
  }

  function pageCount() {
    return Math.max(1, Math.ceil(allRuns.length / PAGE_SIZE));
  }

  function pager() {
    const first = page * PAGE_SIZE;
    const last = Math.min(allRuns.length, first + PAGE_SIZE);
    const previous = el("button", { type: "button", class: "pager", id: "runs-previous", disabled: page === 0, text: "Previous runs" });
    const next = el("button", { type: "button", class: "pager", id: "runs-next", disabled: page + 1 >= pageCount(), text: "Next runs" });
    previous.addEventListener("click", () => showPage(page - 1));
    next.addEventListener("click", () => showPage(page + 1));
    return el("div", { class: "pages", role: "group", "aria-label": "Pages of runs" },
      previous,
      el("p", { id: "runs-range", text: `Runs ${first + 1}–${last} of ${allRuns.length} (page ${page + 1} of ${pageCount()})` }),
      next);
  }

  function renderRuns() {
    const container = $("runs");
    if (allRuns.length === 0) {
      container.replaceChildren(el("p", { text: `No envelope has been published for tenant ${tenant} yet.` }));
      return;
    }
    const shown = allRuns.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE);
    const table = el("table", { class: "runs" },
      el("caption", { text: `Envelopes published for tenant ${tenant}, in log order` }),
      el("thead", {}, el("tr", {}, ...COLUMNS.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...shown.map(runRow)));
    // What the tenant opened stays open when the verdicts arrive and the page is redrawn.
    const open = new Set(Array.from(container.querySelectorAll("details.run[open]"), (d) => d.dataset.digest));
    const details = shown.filter((run) => !run.problem).map(runDetails);
    for (const detail of details) detail.open = open.has(detail.dataset.digest);
    container.replaceChildren(pager(), el("div", { class: "table-wrap" }, table), ...details);
  }

  let checking = 0; // a newer page or trust setting supersedes the checks under way
  async function checkPage() {
    const generation = ++checking;
    const shown = allRuns.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).filter((run) => run.digest && !verdicts.has(run.digest));
    for (const run of shown) {
      let verdict;
      try {
        verdict = await verdictFor(run);
      } catch (error) {
        verdict = { status: "not-checked", detail: `the envelope could not be fetched (${error.message})`, checked: [], notChecked: [] };
      }
      if (generation !== checking) return;
      verdicts.set(run.digest, verdict);
    }
    if (generation !== checking) return;
    const focused = document.activeElement && document.activeElement.id;
    renderRuns();
    if (focused && $(focused)) $(focused).focus();
    const counts = { verified: 0, failed: 0, "not-checked": 0 };
    for (const run of allRuns.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE)) {
      const verdict = verdicts.get(run.digest);
      if (verdict) counts[verdict.status] += 1;
    }
    $("runs-summary").textContent = `Checked in this browser, this page: ${counts.verified} verified, ${counts.failed} failed, ${counts["not-checked"]} not checked.`;
  }

  function showPage(number) {
    page = Math.min(Math.max(0, number), pageCount() - 1);
    renderRuns();
    $("runs-summary").textContent = "Checking this page's envelopes in this browser…";
    $("runs-heading").focus();
    return checkPage();
  }

  async function loadAllRuns() {
    const runs = [];
    let start = 0;
    for (let pages = 0; start !== null; pages += 1) {
      if (pages >= MAX_PAGES) throw new Error("the server's pages of runs do not end");
      const answer = await api(`/v1/tenants/${encodeURIComponent(tenant)}/panel/runs?start=${start}&limit=${PAGE_SIZE}`);
      runs.push(...answer.runs);
      if (answer.next !== null && !(Number.isInteger(answer.next) && answer.next > start)) throw new Error("the server's next page does not advance");
      start = answer.next;
    }
    return runs;
  }

  // ---- what the tenant pins, in this tab only ------------------------------------------------

  async function readFile(input) {
    const file = input.files && input.files[0];
    return file ? bytesOf(await file.arrayBuffer()) : null;
  }

  async function onSimulatedRoot(event) {
    const status = $("simulated-root-status");
    try {
      const bytes = await readFile(event.target);
      if (bytes === null) {
        tenantInputs.simulatedRoot = null;
        tenantInputs.simulatedFingerprint = null;
        status.textContent = "No simulated root loaded: simulated runs are not checked.";
      } else {
        const text = new TextDecoder().decode(bytes);
        const ders = text.includes("-----BEGIN") ? Verify.pemCertificates(text, "the simulated root") : [bytes];
        if (ders.length !== 1) throw new Error(`the file holds ${ders.length} certificates, not one`);
        tenantInputs.simulatedFingerprint = await Verify.fingerprint(ders[0]);
        tenantInputs.simulatedRoot = ders[0];
        resetTrust();
        await trust;
        status.textContent = `Simulated root ${tenantInputs.simulatedFingerprint} loaded: simulated runs are checked under it.`;
      }
    } catch (error) {
      tenantInputs.simulatedRoot = null;
      tenantInputs.simulatedFingerprint = null;
      status.textContent = `Not loaded: ${error.message}`;
    }
    resetTrust();
    if (token) await showPage(page);
  }

  async function onExpected(event) {
    const status = $("expected-status");
    try {
      const bytes = await readFile(event.target);
      tenantInputs.expected = null;
      if (bytes === null) status.textContent = "No expected values loaded.";
      else {
        const parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
        if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed) || typeof parsed.runId !== "string") {
          throw new Error("not an expected-values file (a JSON object with runId)");
        }
        tenantInputs.expected = parsed;
        status.textContent = `Expected values for run ${parsed.runId} loaded: every run is checked against them.`;
      }
    } catch (error) {
      status.textContent = `Not loaded: ${error.message}`;
    }
    verdicts.clear();
    if (token) await showPage(page);
  }

  let witnessEdits = 0; // only the latest edit of the keys is applied
  async function onWitnessKeys() {
    const edit = ++witnessEdits;
    const lines = $("witness-keys").value.split("\n").map((line) => line.trim()).filter(Boolean);
    const keys = [];
    const refused = [];
    for (const line of lines) {
      const key = await Verify.parseWitnessKey(line, verifierData.cosignatureType);
      if (edit !== witnessEdits) return;
      if (key) keys.push(key);
      else refused.push(line.slice(0, 40));
    }
    tenantInputs.witnessKeys = keys;
    $("witness-keys-status").textContent = `${keys.length} witness key(s) pinned` + (refused.length ? `; not Ed25519 witness keys, ignored: ${refused.join(", ")}` : ".");
    if (token) await loadCosigned();
  }

  // ---- witness cosignatures -----------------------------------------------------------------------

  const COSIGNATURE_TEXT = {
    verifies: "verifies under the key you pinned",
    "does-not-verify": "does NOT verify under the key you pinned",
    "not-checked": "not checked: you pinned no key of this name and ID",
    unsupported: "not checked: this browser has no Ed25519 in WebCrypto",
  };

  let cosignedLoads = 0; // only the latest load is shown
  async function loadCosigned() {
    const load = ++cosignedLoads;
    const container = $("cosigned");
    let note;
    try {
      note = await api(`/v1/tenants/${encodeURIComponent(tenant)}/log/checkpoint/cosigned`, { as: "text" });
    } catch (error) {
      if (load !== cosignedLoads) return;
      container.replaceChildren(el("p", { text: error.status === 404
        ? "No witness has cosigned a checkpoint of this log yet (or this server submits to no witness)."
        : `The cosigned checkpoint could not be loaded (${error.message}).` }));
      return;
    }
    const [origin, size] = note.split("\n");
    const lines = await Verify.checkCosignatures(note, tenantInputs.witnessKeys);
    if (load !== cosignedLoads) return;
    const witnesses = lines.filter((line) => !(logKey !== null && line.name === logKey.name && line.keyId === logKey.keyId));
    container.replaceChildren(
      el("p", { text: `Checkpoint ${origin}, tree size ${size}, as the witnesses cosigned it.` }),
      el("table", {},
        el("caption", { text: "Witness cosignatures on the latest cosigned checkpoint" }),
        el("thead", {}, el("tr", {}, ...["Witness key name", "Key ID", "Cosigned at (witness clock)", "Cosignature"].map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, ...witnesses.map((line) => el("tr", {},
          el("th", { scope: "row", text: line.name }),
          el("td", {}, el("code", { text: line.keyId })),
          el("td", { text: line.timestamp === null ? "unknown" : new Date(Number(line.timestamp) * 1000).toISOString() }),
          el("td", { class: line.status === "verifies" ? "verdict verdict-verified" : line.status === "does-not-verify" ? "verdict verdict-failed" : "verdict", text: COSIGNATURE_TEXT[line.status] }))))),
      el("p", { text: witnesses.length ? `${witnesses.length} witness cosignature(s); ${witnesses.filter((line) => line.status === "verifies").length} verify under keys you pinned.` : "The cosigned checkpoint carries no witness cosignature." }));
  }

  // ---- checkpoint --------------------------------------------------------------------------

  function parseNote(note) {
    const [body, signatures = ""] = note.split("\n\n");
    const [origin, size, root] = body.split("\n");
    const lines = signatures.split("\n").filter((line) => line.length > 0);
    return {
      origin, size, root,
      signatures: lines.map((line) => {
        const [, name = "?", blob = ""] = line.split(" ");
        let keyId = "?";
        try {
          keyId = Array.from(atob(blob).slice(0, 4), (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join("");
        } catch { /* shown as "?" */ }
        return { name, keyId };
      }),
    };
  }

  function renderCheckpoint(note) {
    const parsed = parseNote(note);
    const isLog = (s) => logKey !== null && s.name === logKey.name && s.keyId === logKey.keyId;
    const rows = parsed.signatures.map((signature) => el("tr", {},
      el("th", { scope: "row", text: signature.name }),
      el("td", {}, el("code", { text: signature.keyId })),
      el("td", { text: isLog(signature) ? "the log's own key (as this server announces it)" : "another signer: a witness cosignature, if you trust this key" })));
    const witnesses = parsed.signatures.filter((s) => !isLog(s)).length;
    $("checkpoint").replaceChildren(
      el("dl", {},
        el("dt", { text: "Origin" }), el("dd", {}, el("code", { text: parsed.origin })),
        el("dt", { text: "Tree size" }), el("dd", { text: parsed.size }),
        el("dt", { text: "Root hash" }), el("dd", {}, el("code", { class: "digest", text: parsed.root }))),
      el("table", {},
        el("caption", { text: "Signatures on this checkpoint (not verified by this page)" }),
        el("thead", {}, el("tr", {}, ...["Key name", "Key ID", "Signer"].map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, ...rows)),
      el("p", { text: witnesses > 0
        ? `${witnesses} cosignature(s) besides the log's own. Check them with your own verifier and the witness keys you trust.`
        : "No witness has cosigned this checkpoint: only the operator's log key signed it." }),
      el("pre", {}, el("code", { text: note })));
  }

  // ---- session -----------------------------------------------------------------------------

  function signedOut(message, isError) {
    token = null;
    tenant = null;
    $("token").value = "";
    $("signin-section").hidden = false;
    $("session").hidden = true;
    $("runs-section").hidden = true;
    $("checkpoint-section").hidden = true;
    checking += 1; // drop the checks under way
    allRuns = [];
    page = 0;
    verdicts.clear();
    $("runs").replaceChildren();
    $("runs-summary").textContent = "";
    $("checkpoint").replaceChildren();
    $("cosigned").replaceChildren();
    announce(message || "", isError);
  }

  async function signIn(event) {
    event.preventDefault();
    const value = $("token").value.trim();
    $("token").value = "";
    if (!value) {
      announce("Enter your tenant token.", true);
      $("token").focus();
      return;
    }
    token = value;
    announce("Signing in…");
    try {
      const identity = await api("/v1/whoami");
      tenant = identity.tenant;
      const [runs, note] = await Promise.all([
        loadAllRuns(),
        api(`/v1/tenants/${encodeURIComponent(tenant)}/log/checkpoint`, { as: "text" }),
      ]);
      allRuns = runs;
      page = 0;
      renderRuns();
      renderCheckpoint(note);
      $("signin-section").hidden = true;
      $("session-text").textContent = `Signed in as tenant ${tenant}.`;
      $("session").hidden = false;
      $("runs-section").hidden = false;
      $("checkpoint-section").hidden = false;
      announce(`Signed in as tenant ${tenant}: ${runs.length} run(s).`);
      $("runs-heading").focus();
      $("runs-summary").textContent = "Checking this page's envelopes in this browser…";
      loadCosigned();
      checkPage();
    } catch (error) {
      signedOut(error.status === 401
        ? "This token was not accepted. Check that you pasted the whole tenant token."
        : `The server could not answer (${error.message}). Try again later.`, true);
      $("token").focus();
    }
  }

  async function start() {
    $("signin").addEventListener("submit", signIn);
    $("simulated-root").addEventListener("change", onSimulatedRoot);
    $("expected-file").addEventListener("change", onExpected);
    let typing = null; // keys are read once typing pauses, not at every keystroke
    $("witness-keys").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(onWitnessKeys, 300);
    });
    try {
      verifierData = await api("/panel/verifier-data.json", { auth: false });
      resetTrust();
      await trust;
    } catch (error) {
      $("pins-status").textContent = `This browser cannot check envelopes: the pinned roots could not be loaded (${error.message}).`;
    }
    $("sign-out").addEventListener("click", () => { signedOut("Signed out."); $("token").focus(); });
    // The contract is rendered by contract.js.
    try {
      const key = await api("/v1/log/public-key", { auth: false, as: "text" });
      const [name, keyId] = key.trim().split("+");
      logKey = { name, keyId };
    } catch (error) {
      announce(`The log's public key could not be loaded (${error.message}): no signature can be labelled as the log's own.`, true);
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();
