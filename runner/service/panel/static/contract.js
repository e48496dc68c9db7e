// The verification contract on the trust panel: every section of GET /v1/contract, with the
// headings and labels the contract itself carries. The docs page and `attested-replay contract`
// render the same data (attestation/tenant/contract/render.py), and tests/panel/test_contract_renderings.py
// finds every part of it in all of them. No framework and no build step.
//
// Text in the contract has two marks: `code`, and {row:ID}, a cross-reference to a matrix row,
// shown as "Claim (row N)" linking to that row (numbers are computed here, never stored).
"use strict";
(() => {
  const ROW_REFERENCE = /\{row:([^}]*)\}/g;

  const { el } = window.AttestedReplayDom; // dom.js

  const rowAnchor = (rowId) => "row-" + rowId;

  function render(contract) {
    const rows = new Map(contract.rows.map((row, index) => [row.id, { claim: row.claim, number: index + 1 }]));
    const { headings, labels } = contract;

    // "Claim (row N)" for {row:ID}; a reference to no row (the service validates the contract,
    // so only a broken server sends one) is shown as it is rather than guessed at.
    function referenceText(rowId) {
      const row = rows.get(rowId);
      return row ? `${row.claim} (row ${row.number})` : `{row:${rowId}}`;
    }

    function withReferences(text, inCode) {
      const nodes = [];
      let last = 0;
      for (const match of text.matchAll(ROW_REFERENCE)) {
        if (match.index > last) nodes.push(text.slice(last, match.index));
        const shown = referenceText(match[1]);
        nodes.push(inCode || !rows.has(match[1]) ? shown : el("a", { href: "#" + rowAnchor(match[1]), text: shown }));
        last = match.index + match[0].length;
      }
      if (last < text.length) nodes.push(text.slice(last));
      return nodes;
    }

    // Contract text: `backticks` become <code>, {row:ID} a link to the row.
    function rich(text) {
      const fragment = document.createDocumentFragment();
      text.split("`").forEach((part, index) => {
        if (!part) return;
        if (index % 2) fragment.append(el("code", {}, ...withReferences(part, true)));
        else fragment.append(...withReferences(part, false));
      });
      return fragment;
    }

    // A reference to another page of the documentation (not served here): its label and path.
    function docReference(reference) {
      const target = "docs/" + reference.doc + (reference.anchor ? "#" + reference.anchor : "");
      return [reference.label, " (", el("code", { text: target }), ")"];
    }

    function docReferences(references) {
      const nodes = [];
      references.forEach((reference, index) => {
        if (index > 0) nodes.push(", ");
        nodes.push(...docReference(reference));
      });
      return nodes;
    }

    function fields(...pairs) {
      const list = el("dl", {});
      for (const [label, ...content] of pairs) {
        if (content.length === 0) continue;
        list.append(el("dt", { text: label }), el("dd", {}, ...content));
      }
      return list;
    }

    const seeField = (references) => (references && references.length ? ["see", ...docReferences(references)] : ["see"]);

    function section(key, heading, ...content) {
      const id = "contract-" + key;
      return el("section", { "aria-labelledby": id, class: "contract-section" }, el("h3", { id, text: heading }), ...content);
    }

    const paragraphs = (texts) => texts.map((text) => el("p", {}, rich(text)));

    const terms = section("terms", headings.terms,
      el("dl", {}, ...contract.terms.flatMap((term) => [el("dt", { text: term.name }), el("dd", {}, rich(term.meaning + "."))])));

    const matrix = section("matrix", headings.matrix, ...contract.rows.map((row, index) => {
      const headingId = rowAnchor(row.id);
      return el("article", { class: "row", "aria-labelledby": headingId },
        el("h4", { id: headingId }, `${index + 1}. ${row.claim}`),
        el("p", {}, rich(row.statement)),
        fields(
          seeField(row.see),
          [labels.artifact, rich(row.artifact)],
          [labels.command, ...row.commands.map((command) => el("pre", {}, el("code", { text: command }))),
            el("p", {}, rich("(" + row.commandNote + ")"))],
          [labels.who, rich(row.whoDetail)],
          [labels.assumption, el("strong", { text: row.assurance + "." }), " ", rich(row.assumption)],
          [labels.hosted, labels.availability[row.hosted] || row.hosted]));
    }));

    const threats = section("threat-model", headings.threatModel,
      ...paragraphs(contract.threatModel),
      el("ul", { class: "contract-items" }, ...contract.threats.map((threat) => el("li", {},
        fields(
          [labels.controls, rich(threat.controls)],
          [labels.attempts, rich(threat.attempts)],
          [labels.defence, rich(threat.defence)],
          seeField(threat.see))))));

    const checklist = section("checklist", headings.checklist,
      ...paragraphs(contract.checklistIntro),
      el("ol", { class: "contract-items" }, ...contract.checklist.map((link) => el("li", {},
        fields(
          [labels.link, rich(link.link)],
          [labels.pin, rich(link.pin)],
          seeField(link.see),
          [labels.proves, rich(link.proves)],
          [labels.without, rich(link.without)])))));

    const notVerifiable = section("not-verifiable", headings.notVerifiable,
      el("ul", {}, ...contract.notVerifiable.map((item) => el("li", {},
        el("strong", { text: item.title + "." }), " ", rich(item.detail), " ",
        el("em", { text: labels.revisit }), " ", rich(item.revisit + ".")))));

    const comparison = section("comparison", headings.comparison,
      ...contract.comparison.map((row) => el("article", { class: "aspect" },
        el("h4", { text: row.aspect }),
        fields([labels.selfHost, rich(row.selfHost)], [labels.hostedTenant, rich(row.hosted)]))),
      ...paragraphs(contract.comparisonNote));

    const heading = document.getElementById("contract-heading");
    if (heading) heading.textContent = contract.title;
    const limits = document.getElementById("limits");
    if (limits) {
      limits.replaceChildren(...contract.panelLimits.map((limit) => el("li", {}, rich(limit))));
      const limitsHeading = document.getElementById("limits-heading");
      if (limitsHeading) limitsHeading.textContent = headings.panelLimits;
    }
    document.getElementById("contract").replaceChildren(
      ...paragraphs(contract.summary),
      el("p", {}, labels.see + ": ", ...docReferences(contract.see)),
      terms, matrix, threats, checklist, notVerifiable, comparison);
  }

  async function load() {
    const container = document.getElementById("contract");
    if (!container) return;
    container.replaceChildren(el("p", { text: "Loading the contract…" }));
    try {
      const response = await fetch("/v1/contract", {
        headers: { Accept: "application/json" }, cache: "no-store", credentials: "omit", redirect: "error",
      });
      if (!response.ok) throw new Error("HTTP " + response.status);
      render(await response.json());
    } catch (error) {
      container.replaceChildren(el("p", { text: `The contract could not be loaded (${error.message}).` }));
    }
  }

  document.addEventListener("DOMContentLoaded", load);
})();
