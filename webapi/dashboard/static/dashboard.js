// The dashboard's only script: live refresh of the pages that ask for it, per-second rates of
// the overview's counters, confirmations, and "select all". No inline script is allowed by
// the page's Content-Security-Policy, so everything hooks in from here.
"use strict";

(() => {
  const rates = new Map();

  function showRates(root) {
    const now = Date.now();
    for (const element of root.querySelectorAll("[data-total]")) {
      const total = Number(element.dataset.total);
      const before = rates.get(element.id);
      const rate = root.querySelector(`[data-rate-of="${element.id}"]`);
      if (before && rate && now > before.at) {
        const perSecond = Math.max(0, total - before.total) / ((now - before.at) / 1000);
        rate.textContent = `${perSecond.toFixed(1)}/s now`;
      }
      rates.set(element.id, { total, at: now });
    }
  }

  async function refresh(main) {
    // Not while the operator is typing in a form of the page, nor in a hidden tab.
    if (document.hidden || main.contains(document.activeElement) && document.activeElement.matches("input, select")) {
      return;
    }
    try {
      const response = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!response.ok || response.redirected) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.querySelector("main");
      if (!fresh) return;
      main.replaceChildren(...fresh.childNodes);
      hook(main);
      showRates(main);
    } catch (error) {
      console.warn("dashboard refresh failed", error);
    }
  }

  function hook(root) {
    for (const form of root.querySelectorAll("form[data-confirm]")) {
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    }
    for (const box of root.querySelectorAll("input.select-all")) {
      box.addEventListener("change", () => {
        for (const entry of box.closest("form").querySelectorAll('input[name="entry"]')) entry.checked = box.checked;
      });
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const main = document.querySelector("main");
    hook(document);
    if (!main) return;
    showRates(main);
    const seconds = Number(main.dataset.live);
    if (seconds > 0) setInterval(() => refresh(main), seconds * 1000);
  });
})();
