// wagate dashboard: times in the browser's zone, the window countdown, live updates over server-sent
// events (with a visible reconnect), the notification sound and the template picker. No build step.
"use strict";

(function () {
  const body = document.body;
  // Scripts run: at phone width the main menu may fold behind its button (app.css).
  document.documentElement.classList.add("js");

  function localTimes(root) {
    for (const el of root.querySelectorAll("time[datetime]")) {
      const at = new Date(el.getAttribute("datetime"));
      if (!isNaN(at)) {
        el.textContent = at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
        el.title = at.toISOString();
      }
    }
  }

  function countdowns() {
    for (const el of document.querySelectorAll("[data-expires-at]")) {
      const left = Math.floor((new Date(el.dataset.expiresAt) - Date.now()) / 1000);
      if (left <= 0) {
        el.textContent = "Window closed";
        el.classList.replace("window-open", "window-closed");
        continue;
      }
      const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
      el.textContent = `Window open: ${h}h ${String(m).padStart(2, "0")}m ${String(s).padStart(2, "0")}s left`;
    }
  }

  // The reply box follows the window: free text while it is open, a template once it is closed.
  function replyMode() {
    const head = document.querySelector("[data-window-open]");
    const text = document.querySelector("[data-reply-text]");
    const picker = document.querySelector("[data-reply-template]");
    if (!head || !text || !picker) return;
    const open = head.dataset.windowOpen === "true";
    text.hidden = !open;
    picker.hidden = open;
  }

  // The live parts of a page are htmx elements (`hx-get`, `hx-trigger="wagate-refresh"`): a change
  // that concerns them triggers their refetch; htmx swaps the fresh HTML in.
  function refresh(id) {
    const el = document.getElementById(id);
    if (el && window.htmx) window.htmx.trigger(el, "wagate-refresh");
  }

  // Lists that follow the live stream (conversations, batches) carry `data-live-refresh`.
  function refreshList() {
    for (const el of document.querySelectorAll("[data-live-refresh]")) {
      if (window.htmx) window.htmx.trigger(el, "wagate-refresh");
    }
  }

  function refreshConversation() {
    refresh("messages");
    refresh("conversation-state");
  }

  document.addEventListener("htmx:after:swap", (event) => {
    // What was swapped is the request's target (a form that posts elsewhere is the event's target).
    const swapped = event.detail && event.detail.ctx && event.detail.ctx.target;
    localTimes(swapped instanceof Element ? swapped : document);
    replyMode();
    countdowns();
    for (const form of document.querySelectorAll("[data-template-picker]")) pickerUpdate(form);
  });
  // A part refused (the session ended, the conversation went away): the whole page says why.
  document.addEventListener("htmx:response:error", () => window.location.reload());

  let unseen = 0;
  function notify() {
    unseen += 1;
    for (const badge of document.querySelectorAll("[data-badge], [data-menu-badge]")) {
      badge.textContent = String(unseen);
      badge.hidden = false;
    }
    const audio = document.querySelector("audio[data-notify]") || new Audio("/static/notify.wav");
    audio.currentTime = 0;
    // Browsers allow sound only after the user interacted with the page; a refusal is not an error.
    const played = audio.play();
    if (played && played.catch) played.catch(() => {});
    window.wagateSounds = (window.wagateSounds || 0) + 1;
  }

  function live() {
    const url = body.dataset.live;
    if (!url || !window.EventSource) return;
    const banner = document.querySelector("[data-connection]");
    const here = Number(body.dataset.conversationId || 0);
    const source = new EventSource(url);
    source.addEventListener("ready", () => {
      if (banner) banner.hidden = true;
      // Catch up on what changed between the page's rendering (or a drop) and this subscription:
      // a batch just sent may have gone out before the stream was open.
      if (here) refreshConversation();
      refreshList();
    });
    source.addEventListener("change", (event) => {
      const change = JSON.parse(event.data);
      if (change.kind === "reset") { if (here) refreshConversation(); refreshList(); return; }
      if (change.inbound && (change.conversation_status === "open" || change.conversation_status === "pending")) {
        notify();
      }
      if (here && change.conversation_id === here) refreshConversation();
      refreshList();
    });
    // The session ended (signed out here or elsewhere, expired): no reconnecting; the page reloads
    // and lands on the sign-in form.
    source.addEventListener("signed_out", () => {
      source.close();
      window.location.reload();
    });
    source.addEventListener("error", () => {
      if (banner) banner.hidden = false;
      if (source.readyState === EventSource.CLOSED) setTimeout(live, 2000);
    });
  }

  // The main menu at phone width: a real button (aria-expanded) opens and closes it; Escape closes it
  // and gives the focus back to the button.
  function menu() {
    const button = document.querySelector("[data-menu-toggle]");
    const nav = button && document.getElementById(button.getAttribute("aria-controls"));
    if (!nav) return;
    function set(open) {
      button.setAttribute("aria-expanded", String(open));
      nav.classList.toggle("open", open);
    }
    button.addEventListener("click", () => set(button.getAttribute("aria-expanded") !== "true"));
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && button.getAttribute("aria-expanded") === "true") {
        set(false);
        button.focus();
      }
    });
  }

  // A Copy button (`<button data-copy="id-of-the-text" hidden>`) for a secret shown once: copies with
  // the clipboard where the browser allows it (https, localhost), else selects the text for Ctrl+C;
  // says what happened in the page's live region (`[data-copy-status]`) for screen readers too.
  function copyButtons() {
    for (const button of document.querySelectorAll("button[data-copy]")) {
      const source = document.getElementById(button.dataset.copy);
      if (!source) continue;
      const status = document.querySelector(`[data-copy-status="${CSS.escape(button.dataset.copy)}"]`);
      const say = (words) => { if (status) status.textContent = words; };
      const select = () => {
        const range = document.createRange();
        range.selectNodeContents(source);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
      };
      button.hidden = false;
      button.addEventListener("click", () => {
        say("");
        const text = source.textContent.trim();
        const copied = navigator.clipboard && window.isSecureContext
          ? navigator.clipboard.writeText(text)
          : Promise.reject(new Error("no clipboard"));
        copied.then(
          () => { say("Copied"); },
          () => { select(); say("Selected: press Ctrl+C (or ⌘C) to copy"); }
        );
      });
    }
  }

  // A template picker (`[data-template-picker]`: the reply box's, the bulk form's): the chosen
  // template's value fields shown and enabled, the others hidden and left out of the post, its body
  // previewed with the values typed, and a search over names and bodies. Its parts are looked up at
  // each event, so a part htmx swaps in (the bulk form's inbox) is followed.
  function pickerUpdate(form) {
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

  function pickerSearch(form, needle) {
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

  function templatePicker() {
    for (const form of document.querySelectorAll("[data-template-picker]")) {
      form.addEventListener("change", () => pickerUpdate(form));
      form.addEventListener("input", (event) => {
        if (event.target.matches("[data-template-search]")) pickerSearch(form, event.target.value.toLowerCase());
        pickerUpdate(form);
      });
      pickerUpdate(form);
    }
  }


  document.addEventListener("DOMContentLoaded", () => {
    localTimes(document);
    countdowns();
    setInterval(countdowns, 1000);
    replyMode();
    menu();
    copyButtons();
    templatePicker();
    live();
  });
})();
