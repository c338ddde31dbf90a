// The console's only script (its Content-Security-Policy allows no inline script, style
// or handler): live validation of the policy draft, the "open a session" form, and the
// widths of the budget bar.
"use strict";

// Budget bar (call page): each segment's width from its data-width (percent). Set
// through the DOM, which the CSP allows; a style="" attribute it would refuse.
for (const seg of document.querySelectorAll("[data-width]")) {
  seg.style.width = `${Number(seg.dataset.width) || 0}%`;
}

// "Open a session by id" (sessions page): the id becomes a path segment.
(function () {
  const open = document.getElementById("open-session");
  if (!open) return;
  open.addEventListener("submit", function () {
    open.action = "/inspector/sessions/" + encodeURIComponent(open.elements.sid.value);
  });
})();

// Live validation of the policy draft (issue 14): on every change the form is sent to
// the console's JSON endpoint; errors appear beside their fields and the effective-policy
// preview is replaced. Without JavaScript the "Preview" button does the same by reload.
(function () {
  const form = document.getElementById("policy-form");
  if (!form) return;
  const url = form.dataset.validate;
  const token = document.querySelector('meta[name="csrf-token"]');
  let timer = null;
  let seq = 0;

  function draft() {
    const out = {};
    for (const [k, v] of new FormData(form).entries()) {
      if (k !== "csrf_token") out[k] = String(v);
    }
    return out;
  }

  async function validate() {
    const mine = ++seq;
    const resp = await fetch(url, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "X-CSRF-Token": token ? token.content : "",
      },
      body: JSON.stringify(draft()),
      credentials: "same-origin",
    });
    if (!resp.ok || mine !== seq) return; // a newer draft is on its way
    const body = await resp.json();
    for (const el of form.querySelectorAll(".field-error")) {
      const msg = body.errors[el.dataset.field] || "";
      el.textContent = msg;
      const input = form.querySelector(`[name="${el.dataset.field}"]`);
      if (input) {
        if (msg) input.setAttribute("aria-invalid", "true");
        else input.removeAttribute("aria-invalid");
      }
    }
    document.getElementById("preview").innerHTML = body.preview_html;
    form.dataset.validated = String(mine);
  }

  form.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () {
      validate().catch(function (err) { console.warn("validation failed", err); });
    }, 150);
  });
})();
