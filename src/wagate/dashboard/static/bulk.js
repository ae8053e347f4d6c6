// The bulk send form (issue 46, point 4): the focus after a submit (the refusal, or the preview's
// heading). Its template picker is app.js's (`data-template-picker`), which follows the inbox part
// htmx swaps in. No build step.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const focus = document.querySelector("[data-focus-on-load]");
  if (focus) focus.focus();
});
