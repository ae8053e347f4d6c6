// wagate dashboard, webhooks settings: a confirmation before a destructive form is sent
// (`<form data-confirm="question">`), and a page answered to a POST (a new webhook's secret, a form
// with its error) put in history as its GET address, so that a reload neither posts the form again
// (a second webhook) nor shows the secret again. No build step; loaded by the webhooks pages only.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
  if (!window.confirm(form.dataset.confirm)) event.preventDefault();
});

if (document.body && document.body.dataset.replaceUrl) {
  window.history.replaceState(null, "", document.body.dataset.replaceUrl);
}
