// Settings > API keys, Inboxes, Templates: a confirmation before a destructive form (`data-confirm`)
// and a Copy button for a key shown once. No inline script: the CSP forbids it.
"use strict";

(function () {
  document.addEventListener("submit", (event) => {
    const form = event.target instanceof HTMLFormElement ? event.target.closest("form[data-confirm]") : null;
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", () => {
    for (const button of document.querySelectorAll("button[data-copy]")) {
      const source = document.getElementById(button.dataset.copy);
      // The clipboard is there on https and localhost only; elsewhere the key is selected with a click.
      if (!source || !navigator.clipboard) continue;
      button.hidden = false;
      button.addEventListener("click", () => {
        navigator.clipboard.writeText(source.textContent.trim()).then(
          () => { button.textContent = "Copied"; },
          () => { button.textContent = "Select it and copy"; }
        );
      });
    }
  });
})();
