// Behaviour every page shares, in a file rather than inline handlers, so the Content
// Security Policy can forbid inline script and eval (htmx's hx-on needs eval).
(function () {
  "use strict";

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
