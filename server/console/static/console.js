// The operator console's one script (the CSP allows no inline script). Without it every
// page still works; with it the pending approvals and the count in the title stay fresh
// without a reload. It fetches the pending table the server rendered (escaped there),
// parses it with DOMParser, which runs no script, and swaps it in; it never builds
// markup from strings.
"use strict";

(function () {
  const POLL_MS = 3000;
  const body = document.body;
  const base = body.dataset.base || "";
  const title = body.dataset.title || document.title;

  async function refresh() {
    let response;
    try {
      response = await fetch(base + "/approvals/pending", {
        credentials: "same-origin",
        cache: "no-store",
        // Signed out or expired: the server redirects to the sign-in page; stop there.
        redirect: "error",
      });
    } catch (error) {
      return;
    }
    if (!response.ok) {
      return;
    }
    const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = parsed.getElementById("pending");
    if (fresh === null) {
      return;
    }
    const count = Number.parseInt(fresh.dataset.count || "0", 10) || 0;
    document.title = (count > 0 ? "(" + count + ") " : "") + title;
    const badge = document.getElementById("pending-count");
    if (badge !== null) {
      badge.textContent = String(count);
    }
    const shown = document.getElementById("pending");
    if (shown !== null && !shown.isEqualNode(fresh)) {
      shown.replaceWith(document.importNode(fresh, true));
    }
  }

  window.setInterval(refresh, POLL_MS);
})();
