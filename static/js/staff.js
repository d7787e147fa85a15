// Lab staff in the console. Reads the signed-in member's role (/api/admin/staff/me), marks the page with
// the permissions it lacks (admin.css hides those controls; the server refuses them all the same), and gives
// owners a "Staff" panel: invite by one-time link, change a role, disable, issue a password-reset link.
// Every member can turn on a TOTP second factor here.

import { api } from "./api.js";
import { h, mount } from "./dom.js";
import { onLanguageChange, t } from "./i18n.js";

// the panel's words: the catalogs' staff.<key>
const tr = (key) => t(`staff.${key}`);
let me = null;

function markPermissions() {
  const all = ["export", "export_deidentified", "payments", "erase", "withdraw", "consolidate",
    "manage_participants", "read_conversations", "staff", "edit_drafts", "preview", "publish", "preflight"];
  for (const permission of all) {
    document.body.classList.toggle(`lacks-${permission}`, !me.permissions.includes(permission));
  }
  document.body.dataset.staffRole = me.role;
}

function roleSelect(id, value) {
  return h(`select#${id}`, {}, ["owner", "researcher", "assistant", "viewer"].map((role) =>
    h("option", { value: role, selected: role === value }, tr(role))));
}

async function renderPanel(panel, note = null) {
  const rows = me.permissions.includes("staff") ? (await api.get("/api/admin/staff")).staff : [];
  const message = h("p.notice.info#staff-note", { role: "status" }, note || "");
  const show = (text, url) => { message.textContent = ""; message.append(text, " ", h("code#staff-link", url)); };
  const fail = (err) => { message.textContent = err.message; };
  const parts = [h("div.staff-head", h("h2#staff-title", tr("title")),
    h("button.secondary.small#staff-close", { type: "button", onclick: () => { panel.hidden = true; } }, tr("close")))];
  if (me.permissions.includes("staff")) {
    const name = h("input#staff-username", { type: "text", autocomplete: "off", maxlength: 32 });
    const role = roleSelect("staff-role", "viewer");
    const form = h("form#staff-invite-form", { novalidate: true },
      h("p.muted", tr("invite_intro")),
      h("label", { for: "staff-username" }, tr("username")), name,
      h("label", { for: "staff-role" }, tr("role")), role,
      h("button#staff-invite", { type: "submit" }, tr("invite")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const data = await api.post("/api/admin/staff", { username: name.value.trim(), role: role.value });
        await renderPanel(panel);
        panel.querySelector("#staff-note").textContent = "";
        panel.querySelector("#staff-note").append(tr("link"), " ", h("code#staff-link", data.invite_url));
      } catch (err) { fail(err); }
    });
    parts.push(form);
    parts.push(h("table.staff-table",
      h("thead", h("tr", h("th", { scope: "col" }, tr("member")), h("th", { scope: "col" }, tr("role")),
        h("th", { scope: "col" }, tr("state")), h("th", { scope: "col" }, ""))),
      h("tbody", rows.map((row) => {
        const select = roleSelect(`staff-role-${row.id}`, row.role);
        select.setAttribute("aria-label", `${tr("role")} ${row.username}`);
        select.addEventListener("change", () => api.post(`/api/admin/staff/${row.id}/role`, { role: select.value })
          .then(() => { message.textContent = tr("done"); }, fail));
        const toggle = h("button.secondary.small", { type: "button" }, row.disabled ? tr("enable") : tr("disable"));
        toggle.addEventListener("click", () => api.post(`/api/admin/staff/${row.id}/${row.disabled ? "enable" : "disable"}`)
          .then(() => renderPanel(panel), fail));
        const reset = h("button.secondary.small", { type: "button" }, tr("reset"));
        reset.addEventListener("click", () => api.post(`/api/admin/staff/${row.id}/reset-link`)
          .then((data) => show(tr("reset_link"), data.reset_url), fail));
        const self = row.username === me.username;
        return h("tr", { "data-staff": row.username },
          h("td", row.username + (self ? tr("you") : "")), h("td", select),
          h("td", [row.disabled ? tr("disabled") : "", row.totp ? ` ${tr("totp")}: ${tr("totp_on")}` : ""].join("")),
          h("td", self ? "" : toggle, " ", reset));
      }))));
  }
  parts.push(totpSection(message));
  parts.push(message);
  mount(panel, ...parts);
}

function totpSection(message) {
  if (me.totp) return h("p#staff-totp", `${tr("totp")}: ${tr("totp_on")}`);
  const start = h("button.secondary.small#staff-totp-setup", { type: "button" }, tr("totp_setup"));
  const box = h("div#staff-totp", start);
  start.addEventListener("click", async () => {
    const data = await api.post("/api/admin/staff/totp/setup");
    const code = h("input#staff-totp-code", { type: "text", inputmode: "numeric", autocomplete: "one-time-code",
      maxlength: 6 });
    const confirm = h("button.small#staff-totp-confirm", { type: "button" }, tr("totp_confirm"));
    confirm.addEventListener("click", () => api.post("/api/admin/staff/totp/confirm", { code: code.value.trim() })
      .then(() => { me.totp = true; mount(box, h("p", `${tr("totp")}: ${tr("totp_on")}`)); },
        (err) => { message.textContent = err.message; }));
    mount(box, h("p", tr("totp_secret"), " ", h("code#staff-totp-secret", data.secret)),
      h("label", { for: "staff-totp-code" }, tr("totp_code")), code, confirm);
  });
  return box;
}

async function start() {
  try {
    me = await api.get("/api/admin/staff/me");
  } catch {
    return; // not signed in yet: admin.js shows its sign-in form
  }
  markPermissions();
  const panel = h("section#staff-panel.console.card", { hidden: true, "aria-labelledby": "staff-title" });
  document.getElementById("preflight-banner").after(panel);
  const button = h("button.secondary.small#staff-button", { type: "button" }, tr("button"));
  button.addEventListener("click", () => {
    panel.hidden = !panel.hidden;
    if (!panel.hidden) renderPanel(panel).then(() => panel.querySelector("input, button")?.focus());
  });
  document.getElementById("logout").before(button, " ");
  onLanguageChange(() => {
    button.textContent = tr("button");
    if (!panel.hidden) renderPanel(panel);
  });
}

start();
