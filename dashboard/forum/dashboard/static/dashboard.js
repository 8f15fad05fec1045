// The dashboard's only script: no library, no build step.
// - refreshes the panel in place: fetches the same page and swaps <main>;
// - pause/resume buttons call the node's API (the same route and checks as
//   any client), with the token cookie the login set;
// - the login form hands the token to /ui/session, which keeps it in a cookie,
//   then goes back to the page that sent the browser to sign in (data-next).
"use strict";

(function () {
  function show(text, bad) {
    const box = document.getElementById("message");
    if (!box) return;
    box.textContent = text;
    box.className = bad ? "bad" : "ok";
    box.hidden = false;
  }

  async function refresh() {
    const panel = document.getElementById("panel");
    if (!panel) return;
    let answer;
    try {
      answer = await fetch(window.location.href, { credentials: "same-origin" });
    } catch (err) {
      show("node unreachable: " + err.message, true);
      return;
    }
    if (!answer.ok) {
      show("refresh failed: HTTP " + answer.status, true);
      return;
    }
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.getElementById("panel");
    // Keep what the operator is typing (the separator field) as it is.
    const active = document.activeElement;
    const typing = active && active.tagName === "INPUT" && panel.contains(active);
    if (fresh && !typing) {
      panel.innerHTML = fresh.innerHTML;
      document.body.dataset.refreshed = String(Date.now());
    }
  }

  async function act(button) {
    const action = button.dataset.action;
    const prefix = button.dataset.prefix;
    // The prefix's bytes percent-encoded in one path segment (job/ is job%2F).
    const url = "/v1/prefixes/" + encodeURIComponent(prefix) + "/" + action;
    button.disabled = true;
    let answer;
    try {
      answer = await fetch(url, { method: "POST", credentials: "same-origin" });
    } catch (err) {
      show(action + " " + prefix + " failed: " + err.message, true);
      button.disabled = false;
      return;
    }
    let body = {};
    try { body = await answer.json(); } catch (err) { body = {}; }
    if (answer.ok) {
      show((action === "pause" ? "paused " : "resumed ") + prefix, false);
    } else {
      show(action + " " + prefix + " refused (" + answer.status + "): " + (body.message || ""), true);
    }
    await refresh();
  }

  async function login(event) {
    event.preventDefault();
    const form = event.target;
    const token = document.getElementById("token").value.trim();
    const error = document.getElementById("login-error");
    const answer = await fetch(form.dataset.root + "/session", {
      headers: { Authorization: "Bearer " + token },
      credentials: "same-origin",
    });
    if (answer.status === 204) {
      window.location.assign(form.dataset.next);
    } else {
      error.textContent = answer.status === 401 ? "wrong token" : "sign-in failed: HTTP " + answer.status;
      error.hidden = false;
    }
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest("button[data-action]");
    if (button) act(button);
  });

  document.addEventListener("DOMContentLoaded", function () {
    const form = document.getElementById("login");
    if (form) form.addEventListener("submit", login);
    const every = Number(document.body.dataset.refreshMs || 0);
    if (every > 0) window.setInterval(refresh, every);
  });
})();
