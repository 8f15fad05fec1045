// The colour theme the viewer chose in the top bar: light, dark or auto (the
// system's preference, what dashboard.css does with no choice made). Kept in
// this browser's localStorage, which is per origin: each node's address
// (scheme, host and port) remembers its own choice; nothing is sent to it.
//
// Loaded in <head> without defer, after the stylesheet: it runs before the
// body is parsed, so the page is painted in the chosen theme from the start
// (no flash of the other one). A file of its own, not an inline script: the
// pages' Content-Security-Policy stays free of 'unsafe-inline'.
"use strict";

(function () {
  const KEY = "forum.theme";
  const THEMES = ["auto", "light", "dark"];
  const root = document.documentElement;

  function chosen() {
    let theme = null;
    try {
      theme = window.localStorage.getItem(KEY);
    } catch (err) {
      theme = null; // storage turned off: the system's preference
    }
    return THEMES.includes(theme) ? theme : "auto";
  }

  // data-theme="light" or "dark" forces that scheme (dashboard.css); auto
  // leaves the attribute out, and the media query decides.
  function apply(theme) {
    if (theme === "auto") {
      delete root.dataset.theme;
    } else {
      root.dataset.theme = theme;
    }
  }

  apply(chosen());

  document.addEventListener("DOMContentLoaded", function () {
    const select = document.getElementById("theme");
    if (!select) return;
    select.value = chosen();
    select.hidden = false; // of no use without this script
    select.addEventListener("change", function () {
      try {
        window.localStorage.setItem(KEY, select.value);
      } catch (err) {
        // not kept: this page still shows it
      }
      apply(select.value);
    });
  });
})();
