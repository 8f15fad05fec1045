// The dashboard's only script: no library, no build step.
// - refreshes the panel in place: fetches the same page and swaps <main>;
// - pause/resume buttons call the node's API (the same route and checks as
//   any client), with the token cookie the login set;
// - the Jobs page's bulk form sends the ticked keys, "select all" ticks a page;
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
    // Nor the jobs ticked for a bulk action.
    const picked = panel.querySelector("input.pick:checked");
    if (fresh && !typing && !picked) {
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

  // The Jobs page's bulk actions: the ticked keys go in the query string
  // (a dashboard action reads no body), with the listing to come back to.
  function bulk(event) {
    const form = event.target;
    if (form.id !== "bulk") return;
    const keys = Array.from(form.querySelectorAll("input.pick:checked"), (box) => box.value);
    if (keys.length === 0) {
      event.preventDefault();
      show("tick at least one job first", true);
      return;
    }
    const query = new URLSearchParams();
    query.append("action", event.submitter ? event.submitter.dataset.bulk : "");
    for (const key of keys) query.append("key", key);
    if (form.dataset.app) query.append("app", form.dataset.app);
    query.append("back", form.dataset.back || "");
    form.action = form.dataset.base + "?" + query.toString();
  }

  document.addEventListener("submit", bulk);

  document.addEventListener("change", function (event) {
    if (event.target.id !== "pick-all") return;
    for (const box of document.querySelectorAll("input.pick")) box.checked = event.target.checked;
  });

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
