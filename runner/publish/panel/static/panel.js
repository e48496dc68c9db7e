// The trust panel. No framework and no build step: this file is served as it is.
// The tenant token lives in the closure below only: never in a cookie, in storage or in a URL;
// it is sent to this server, and nowhere else, as an Authorization: Bearer header.
"use strict";
(() => {
  let token = null;
  let tenant = null;
  let logKey = null; // {name, keyId} of the log key this server announces

  const $ = (id) => document.getElementById(id);

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === false || value === null || value === undefined) continue;
      if (name === "text") node.textContent = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
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
    const verify = [
      `attested-replay expected --run-id ${shellQuote(run.runId)} --tenant ${shellQuote(tenant)}${shards}`,
      `  --corpus YOUR_CORPUS_DIR --this-workload --policy YOUR_POLICY.json --out ${expected}`,
    ].join(" \\\n") + `\nverify-attested-run --envelope ${envelope} --expected ${expected}`;
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
      ["Verify the envelope's SEV-SNP evidence and binding", verify],
      ["Re-derive the result from the corpus (trusts no hardware)", reproduce],
    ];
  }

  function commandBlock(label, text, runId) {
    const code = el("code", { text });
    const block = el("div", { class: "command" }, el("p", { text: label }), el("pre", {}, code));
    if (navigator.clipboard && window.isSecureContext) {
      const button = el("button", { type: "button", class: "copy", "aria-label": `Copy: ${label} (run ${runId})`, text: "Copy" });
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

  function resultLabel(run) {
    if (run.kind === "shard") return "Shard result digest (bound: this shard's partial result)";
    if (run.kind === "merged") return "Merged result digest (the whole run's report)";
    return "Result digest (bound)";
  }

  function renderRuns(runs) {
    const container = $("runs");
    if (runs.length === 0) {
      container.replaceChildren(el("p", { text: `No envelope has been published for tenant ${tenant} yet.` }));
      return;
    }
    const table = el("table", {},
      el("caption", { text: `Envelopes published for tenant ${tenant}, in log order` }),
      el("thead", {}, el("tr", {}, ...["Log index", "Run ID", "Published (server clock)", "Envelope digest", "Platform", "Corpus export"]
        .map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, ...runs.map((run) => el("tr", {},
        el("td", { text: String(run.logIndex) }),
        el("th", { scope: "row", text: run.runId ? run.runId + partOf(run) : "(unreadable entry)" }),
        el("td", {}, run.publishedAt ? el("time", { datetime: run.publishedAt, text: run.publishedAt }) : "not recorded"),
        el("td", {}, run.digest ? el("code", { class: "digest", text: run.digest }) : "unknown"),
        el("td", { text: run.problem ? run.problem : run.platform === "simulated" ? "simulated (proves nothing about hardware)" : run.platform }),
        el("td", {}, run.corpusExport ? el("code", { class: "digest", text: run.corpusExport }) : "none held")))));
    const details = runs.filter((run) => !run.problem).map((run) => el("details", { class: "run" },
      el("summary", {}, `Commands for run ${run.runId}${partOf(run)}`),
      el("dl", {},
        el("dt", { text: "Corpus checksum (bound)" }), el("dd", {}, el("code", { class: "digest", text: run.corpusChecksum })),
        el("dt", { text: "Evaluation digest (bound)" }), el("dd", {}, el("code", { class: "digest", text: run.evaluationDigest })),
        el("dt", { text: resultLabel(run) }), el("dd", {}, el("code", { class: "digest", text: run.resultDigest }))),
      ...commandsFor(run).map(([label, text]) => commandBlock(label, text, run.runId))));
    container.replaceChildren(el("div", { class: "table-wrap" }, table), ...details);
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
    $("runs").replaceChildren();
    $("checkpoint").replaceChildren();
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
        api(`/v1/tenants/${encodeURIComponent(tenant)}/panel/runs`),
        api(`/v1/tenants/${encodeURIComponent(tenant)}/log/checkpoint`, { as: "text" }),
      ]);
      renderRuns(runs.runs);
      renderCheckpoint(note);
      $("signin-section").hidden = true;
      $("session-text").textContent = `Signed in as tenant ${tenant}.`;
      $("session").hidden = false;
      $("runs-section").hidden = false;
      $("checkpoint-section").hidden = false;
      announce(`Signed in as tenant ${tenant}: ${runs.runs.length} run(s).`);
      $("runs-heading").focus();
    } catch (error) {
      signedOut(error.status === 401
        ? "This token was not accepted. Check that you pasted the whole tenant token."
        : `The server could not answer (${error.message}). Try again later.`, true);
      $("token").focus();
    }
  }

  async function start() {
    $("signin").addEventListener("submit", signIn);
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
