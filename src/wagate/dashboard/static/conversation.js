// The conversation page (issue 46): it opens at the newest message with the reply box focused;
// Ctrl+Enter (Cmd+Enter on a Mac) sends; the page's forms post through htmx and swap in what changed
// (no reload: the scroll, the focus and the agent's typing stay); new messages are told to screen
// readers; the window counts down in words. app.js keeps the live parts fresh (`wagate-refresh`).
"use strict";

(function () {
  const mac = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);

  function thread() { return document.getElementById("messages"); }
  function head() { return document.querySelector("[data-window]"); }

  // What a swap replaced: its target (htmx 4 names the form that asked as the event's target).
  function swapped(event) {
    let target = event.detail && event.detail.ctx && event.detail.ctx.target;
    if (typeof target === "string") target = document.querySelector(target);
    if (target instanceof Element) return target;
    return event.target instanceof Element ? event.target : null;
  }

  function nearBottom() {
    const page = document.documentElement;
    return window.innerHeight + window.scrollY >= page.scrollHeight - 120;
  }

  function toNewest() { window.scrollTo(0, document.documentElement.scrollHeight); }

  // Where the agent answers: the text box while the window is open, else the template picker.
  function answerField() {
    const text = document.querySelector("[data-reply-text]");
    if (text && !text.hidden) return text.querySelector("textarea");
    const picker = document.querySelector("[data-reply-template]");
    return picker && !picker.hidden ? picker.querySelector("select") : null;
  }

  // --- the window, in words, counting down (the times come from the server: no rule here) ---

  function duration(seconds) {
    const total = Math.max(1, Math.floor(seconds / 60));
    const h = Math.floor(total / 60), m = total % 60;
    if (!h) return `${m} min`;
    return m ? `${h} h ${m} min` : `${h} h`;
  }

  function windowTick() {
    const el = head();
    if (!el || !el.dataset.windowExpires) return;
    const now = Date.now();
    const expires = Date.parse(el.dataset.windowExpires);
    let state, words;
    if (now >= expires) {
      state = "closed";
      words = "Window closed: only templates can be sent";
      delete el.dataset.windowExpires;
      // The server brings the closed state and app.js turns the reply box into the template picker.
      const part = document.getElementById("conversation-state");
      if (part && window.htmx) window.htmx.trigger(part, "wagate-refresh");
    } else {
      state = now >= Date.parse(el.dataset.windowClosingAt) ? "closing" : "open";
      const left = duration((expires - now) / 1000);
      words = state === "closing" ? `Window closes in ${left} — reply now` : `Window open: ${left} left`;
    }
    const urgent = state === "closing" && now >= Date.parse(el.dataset.windowUrgentAt);
    el.dataset.window = state;
    for (const line of document.querySelectorAll("[data-window-words]")) {
      line.textContent = words;
      line.classList.remove("window-open", "window-closing", "window-closed");
      line.classList.add(`window-${state}`);
      line.classList.toggle("urgent", urgent);
    }
  }

  // The reply line follows the head's window after the head was fetched again.
  function windowFromHead() {
    const el = head();
    const pill = el && el.querySelector("[data-window-words]");
    const line = document.querySelector("#reply-box [data-window-words]");
    if (!pill || !line) return;
    line.textContent = pill.textContent;
    line.className = pill.className.replace(/\bpill\b/, "window-line").trim();
  }

  // --- new messages, told to screen readers ---

  let seen = new Set();
  function messageIds() {
    const list = thread();
    return list ? [...list.querySelectorAll("[data-message-id]")] : [];
  }

  function announceNew() {
    const region = document.querySelector("[data-announce]");
    const fresh = messageIds().filter((item) => !seen.has(item.dataset.messageId));
    seen = new Set(messageIds().map((item) => item.dataset.messageId));
    if (!region || !fresh.length) return;
    region.textContent = fresh.slice(-3).map((item) => {
      const author = item.querySelector(".author");
      const body = item.querySelector(".body");
      return `New message from ${author ? author.textContent.trim() : "someone"}: ${body ? body.textContent.trim() : ""}`;
    }).join(". ");
  }

  // --- the page's forms through htmx ---

  let sending = false;
  let keepAtBottom = false;
  let stateHadFocus = false;

  document.addEventListener("htmx:before:request", (event) => {
    if (event.target instanceof Element && event.target.closest("[data-reply-text], [data-template-picker]")) {
      sending = true;
    }
  });
  document.addEventListener("htmx:finally:request", () => { sending = false; });

  // A refusal of a send (the window closed meanwhile, a value missing) is shown above the reply box
  // and the draft stays: not the reload app.js makes for a refused part. A session that ended (401)
  // or a refused form (403) still reloads.
  document.addEventListener("htmx:response:error", (event) => {
    const source = event.target instanceof Element ? event.target : null;
    const status = event.detail && event.detail.ctx && event.detail.ctx.response
      ? event.detail.ctx.response.status : 0;
    if (source && source.closest("[data-own-errors]") && status !== 401 && status !== 403) {
      event.stopPropagation();
    }
  }, true);

  document.addEventListener("htmx:after:request", (event) => {
    const form = event.target instanceof Element ? event.target.closest("form") : null;
    const response = event.detail && event.detail.ctx && event.detail.ctx.response;
    if (!form || !response || response.status >= 300 || !form.closest("#reply-box, #messages")) return;
    // Sent: the box empties and keeps the focus for the next answer; the old refusal goes.
    const error = document.getElementById("reply-error");
    if (error) error.textContent = "";
    keepAtBottom = true;
    if (form.matches("[data-reply-text]")) {
      form.querySelector("textarea").value = "";
    } else if (form.matches("[data-template-picker]")) {
      form.reset();
      form.querySelector("select").dispatchEvent(new Event("change"));
    }
    const field = answerField();
    if (field) field.focus({ preventScroll: true });
    // The head may change with a send (a conversation Meta's agent held comes back).
    const part = document.getElementById("conversation-state");
    if (part && window.htmx) window.htmx.trigger(part, "wagate-refresh");
  });

  document.addEventListener("htmx:before:swap", (event) => {
    const target = swapped(event);
    if (!target) return;
    if (target.id === "messages") keepAtBottom = keepAtBottom || nearBottom();
    if (target.id === "conversation-state") {
      stateHadFocus = target.contains(document.activeElement);
    }
  });

  document.addEventListener("htmx:after:swap", (event) => {
    const target = swapped(event);
    if (!target) return;
    if (target.id === "messages") {
      announceNew();
      if (keepAtBottom) toNewest();
      keepAtBottom = false;
    }
    if (target.id === "conversation-state") {
      windowFromHead();
      windowTick();
      // Resolve became Reopen (or back): the focus moves to the button that took its place.
      if (stateHadFocus) {
        const button = target.querySelector("[data-status-form] button");
        if (button) button.focus({ preventScroll: true });
      }
      stateHadFocus = false;
    }
  });

  function keys() {
    const form = document.querySelector("[data-reply-text]");
    if (!form) return;
    const hint = form.querySelector("[data-reply-keys]");
    if (hint && mac) hint.textContent = "⌘+Enter sends · Enter adds a line";
    form.querySelector("textarea").addEventListener("keydown", (event) => {
      if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return; // Enter alone: a new line
      event.preventDefault();
      if (!sending) form.requestSubmit();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    seen = new Set(messageIds().map((item) => item.dataset.messageId));
    keys();
    windowTick();
    setInterval(windowTick, 15000);
    // Open at the newest message, ready to answer.
    toNewest();
    const field = answerField();
    if (field) field.focus({ preventScroll: true });
  });
})();
