// Settings > API keys, Inboxes, Templates: a confirmation before a destructive form (`data-confirm`).
// The Copy button of a key shown once is app.js's, as on every page. No inline script: the CSP forbids it.
"use strict";

(function () {
  document.addEventListener("submit", (event) => {
    const form = event.target instanceof HTMLFormElement ? event.target.closest("form[data-confirm]") : null;
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });
})();
