// The bulk send form (issue 46, point 4): its template picker, which follows the inbox part htmx
// swaps in when the inbox changes (so it listens on the form, not on elements that get replaced),
// and the focus after a submit (the refusal, or the preview's heading). No build step.
"use strict";

(function () {
  function update(form) {
    const select = form.querySelector("select[name=template]");
    const preview = form.querySelector("[data-template-preview]");
    if (!select) return;
    for (const set of form.querySelectorAll("[data-variables-for]")) {
      const on = set.dataset.variablesFor === select.value;
      set.hidden = !on;
      set.disabled = !on;
    }
    const option = select.options[select.selectedIndex];
    let text = option ? option.dataset.body || "" : "";
    const set = form.querySelector(`[data-variables-for="${CSS.escape(select.value)}"]`);
    if (set) {
      for (const input of set.querySelectorAll("[data-variable]")) {
        if (input.value) text = text.split(`{{${input.dataset.variable}}}`).join(input.value);
      }
    }
    if (preview) preview.textContent = text;
  }

  function search(form, needle) {
    const select = form.querySelector("select[name=template]");
    if (!select) return;
    let first = null;
    for (const option of select.options) {
      const hit = !needle || option.textContent.toLowerCase().includes(needle) ||
        (option.dataset.body || "").toLowerCase().includes(needle);
      option.hidden = !hit;
      if (hit && !first) first = option;
    }
    const current = select.options[select.selectedIndex];
    if (current && current.hidden && first) select.value = first.value;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.querySelector("[data-bulk-form]");
    if (form) {
      form.addEventListener("change", () => update(form));
      form.addEventListener("input", (event) => {
        if (event.target.matches("[data-template-search]")) search(form, event.target.value.toLowerCase());
        update(form);
      });
      // The inbox part was replaced: its template list and values are the new inbox's.
      document.addEventListener("htmx:after:swap", () => update(form));
      update(form);
    }
    const focus = document.querySelector("[data-focus-on-load]");
    if (focus) focus.focus();
  });
})();
