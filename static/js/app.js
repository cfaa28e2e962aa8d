// Behaviour every page shares, in a file rather than inline handlers, so the Content
// Security Policy can forbid inline script and eval (htmx's hx-on needs eval).
(function () {
  "use strict";

  // Helpers the pages' own scripts share (chat.js, attachments.js), which load after this.
  window.Hermes = {
    newId: function () {
      if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
      var b = crypto.getRandomValues(new Uint8Array(16));
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      var h = Array.from(b, function (x) { return x.toString(16).padStart(2, "0"); }).join("");
      return [h.slice(0, 8), h.slice(8, 12), h.slice(12, 16), h.slice(16, 20), h.slice(20)].join("-");
    },
    // The CSRF header htmx sends (set on <body> by base.html), for fetch() and XHR calls.
    csrfHeaders: function () {
      try {
        return JSON.parse(document.body.getAttribute("hx-headers") || "{}");
      } catch (err) {
        return {};
      }
    },
  };

  // <section data-swap-statuses="400 409">: error answers with these statuses carry a
  // partial to show (a refusal, a stale decision), so htmx swaps them like a success.
  document.addEventListener("htmx:beforeSwap", function (e) {
    var holder = e.detail.elt && e.detail.elt.closest("[data-swap-statuses]");
    if (!holder) return;
    var statuses = holder.dataset.swapStatuses.split(/\s+/);
    if (statuses.indexOf(String(e.detail.xhr.status)) !== -1) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
})();
