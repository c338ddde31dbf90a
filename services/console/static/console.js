// Live validation of the policy draft (issue 14): on every change the form is sent to
// the console's JSON endpoint; errors appear beside their fields and the effective-policy
// preview is replaced. Without JavaScript the "Preview" button does the same by reload.
"use strict";
(function () {
  const form = document.getElementById("policy-form");
  if (!form) return;
  const url = form.dataset.validate;
  let timer = null;
  let seq = 0;

  function draft() {
    const out = {};
    for (const [k, v] of new FormData(form).entries()) out[k] = String(v);
    return out;
  }

  async function validate() {
    const mine = ++seq;
    const resp = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
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
