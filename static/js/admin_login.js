// The admins' own sign-in page (/admin/login): in the admin's language (a stored choice, else the
// browser's), with a language toggle and no consent or registration offer. On success it goes to the
// page the admin asked for (?next=/admin...).

import { api, forgetCsrfToken } from "./api.js";
import {
  applyDocumentLanguage, browserLanguage, hasStoredLanguage, labelLanguageButton, language, otherLanguage, setLanguage,
  t,
} from "./i18n.js";

const form = document.getElementById("admin-login-form");
const username = document.getElementById("admin-login-username");
const password = document.getElementById("admin-login-password");
const error = document.getElementById("admin-login-error");
const toggle = document.getElementById("language-toggle");
const totpField = document.getElementById("admin-login-totp-field");
const totp = document.getElementById("admin-login-totp");
// staff sign-in beyond the password (services/participants/staff.py): a second factor, a disabled account
const staffText = (key) => t(`staff_login.${key}`);

function render() {
  applyDocumentLanguage();
  document.title = `${t("admin.login.title")} · AI Memory Lab`;
  labelLanguageButton(toggle);
  document.getElementById("admin-login-totp-label").textContent = staffText("totp");
}

function target() {
  const next = new URLSearchParams(location.search).get("next") || "";
  return next.startsWith("/admin") && !next.startsWith("/admin/login") ? next : "/admin";
}

toggle.addEventListener("click", () => {
  setLanguage(otherLanguage());
  render();
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.textContent = "";
  if (!username.value.trim() || !password.value) {
    error.textContent = t("admin.login.missing");
    (username.value.trim() ? password : username).focus();
    return;
  }
  try {
    const body = { username: username.value.trim(), password: password.value };
    if (!totpField.hidden) body.totp = totp.value.trim();
    const data = await api.post("/api/auth/login", body);
    if (data.user.role !== "admin") {
      await api.post("/api/auth/logout");
      forgetCsrfToken();
      error.textContent = t("admin.login.not_admin");
      return;
    }
    if (data.user.language !== language()) {
      await api.post("/api/auth/language", { language: language() }).catch(() => null);
    }
    location.assign(target());
  } catch (err) {
    if (["totp_required", "totp_invalid", "staff_disabled"].includes(err.code)) {
      error.textContent = staffText(err.code);
      if (err.code !== "staff_disabled") {
        totpField.hidden = false;
        totp.focus();
        return;
      }
    } else if (err.status === 401 || err.status === 400) error.textContent = t("login.failed");
    else if (err.code === "network") error.textContent = t("error.network");
    else if (err.status === 429) error.textContent = t("error.rate");
    else error.textContent = t("error.generic", { message: err.message });
    password.focus();
  }
});

if (!hasStoredLanguage()) setLanguage(browserLanguage());
render();
username.focus();
