// A staff invitation or password-reset link (/staff/accept/<token>, /staff/reset/<token>): set a password,
// then sign in on the admin login page. The token is the link's last path segment.

import { api } from "./api.js";
import { h, mount } from "./dom.js";
import {
  applyDocumentLanguage, browserLanguage, hasStoredLanguage, labelLanguageButton, otherLanguage, setLanguage, t,
} from "./i18n.js";

// the page's words: the catalogs' staff_accept.<key>
const tr = (key) => t(`staff_accept.${key}`);
const token = location.pathname.split("/").filter(Boolean).pop();
const form = document.getElementById("staff-accept-form");
const password = document.getElementById("staff-accept-password");
const error = document.getElementById("staff-accept-error");
const done = document.getElementById("staff-accept-done");
const toggle = document.getElementById("language-toggle");

function render() {
  applyDocumentLanguage();
  document.title = `${tr("title")} · AI Memory Lab`;
  for (const [id, key] of [["staff-accept-brand", "brand"], ["staff-accept-title", "title"],
    ["staff-accept-intro", "intro"], ["staff-accept-password-label", "label"], ["staff-accept-submit", "submit"]]) {
    document.getElementById(id).textContent = tr(key);
  }
  labelLanguageButton(toggle);
}

toggle.addEventListener("click", () => { setLanguage(otherLanguage()); render(); });
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.textContent = "";
  if (!password.value) { error.textContent = tr("missing"); password.focus(); return; }
  try {
    await api.post("/api/admin/staff/accept", { token, password: password.value });
    form.hidden = true;
    done.hidden = false;
    mount(done, tr("done"), " ", h("a#staff-accept-login", { href: "/admin/login" }, tr("login")));
  } catch (err) {
    error.textContent = err.message;
    password.focus();
  }
});

if (!hasStoredLanguage()) setLanguage(browserLanguage());
render();
password.focus();
