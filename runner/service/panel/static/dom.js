// The one DOM helper of the trust panel's scripts (panel.js, contract.js), loaded before them.
// No framework and no build step: this file is served as it is.
"use strict";
(() => {
  // An element `tag` with `attributes` (`text` sets its text; false, null and undefined are
  // left out, true is an empty attribute) and `children` (strings become text nodes, never HTML).
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

  Object.defineProperty(window, "AttestedReplayDom", { value: Object.freeze({ el }) });
})();
