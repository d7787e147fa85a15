// The admin console: monitor (polled), participant detail with each reply's memory context,
// actions, provider failures, plots and the data export. The server serves this page to admins
// only; every call below is also checked server-side.

import { api, forgetCsrfToken } from "./api.js";
import { h, mount } from "./dom.js";
import { showStudyEditor } from "./study_editor.js";
import {
  applyDocumentLanguage, formatDateTime, labelLanguageButton, language, onLanguageChange, otherLanguage, setLanguage,
  t,
} from "./i18n.js";
import { attemptMessage } from "./core/failure_attempt.js";
import { fmt } from "./core/format.js";
import { qualityCell, sessionTime, statusBadge, taskCell } from "./admin/cells.js";
import { errorText, noticeBox, retell, tell, term } from "./admin/common.js";
import { showMonitor } from "./admin/monitor.js";

const PLOTS = ["funnel", "group_sizes", "questionnaire_means", "recall_events"];

const main = document.getElementById("main");
const announcer = document.getElementById("announcer");
const state = {
  study: null,
  user: null,
  cleanup: null,
};

// -- helpers ------------------------------------------------------------------------------------

/** How a recall event's memory came back: the curve, a request to remember, or through an earlier exchange. */
function recalledBy(e) {
  const how = e.recalled_by ? ` · ${term("admin.recalled_by", e.recalled_by)}` : "";
  return `${t("admin.yes")}${how}${e.via_message_id ? ` #${e.via_message_id}` : ""}`;
}

function announce(text) {
  announcer.textContent = "";
  window.setTimeout(() => { announcer.textContent = text; }, 50);
}

// The memory conditions' notes (services/memory/*) are codes with parameters ({code, params}); the catalogs give
// each its words (admin.note.<code>). A code without a text is shown as the code itself.
function noteText(note) {
  if (typeof note === "string") return note;
  const key = `admin.note.${note.code}`;
  const text = t(key, note.params || {});
  return text === key ? String(note.code) : text;
}

/** What "consolidate now" found when it ran nothing, in the admin's language (the server's reason is English). */
function consolidateReason(data) {
  if ((data.runs || []).length || !data.reason) return "";
  const held = data.held || [];
  if (!held.length) {
    // the same words as the monitor's column: tasks still in progress, tasks not needed (withdrawn)
    const tasks = (ids) => Object.entries((ids || []).reduce((n, id) => ({ ...n, [id]: (n[id] || 0) + 1 }), {}))
      .map(([id, n]) => (n > 1 ? `${id} ×${n}` : id)).join(", ");
    const parts = [t("admin.consolidate.nothing")];
    if (data.in_progress?.length) parts.push(`${term("admin.consolidation", "in_progress")}: ${tasks(data.in_progress)}`);
    if (data.not_needed?.length) parts.push(`${term("admin.consolidation", "not_needed")}: ${tasks(data.not_needed)}`);
    return parts.join("; ");
  }
  return held.map((r) => t("admin.consolidate.held", {
    task: r.task_id, session: r.task_session_id, since: formatDateTime(r.running_since, { seconds: true }),
    until: formatDateTime(r.lease_until, { seconds: true }) })).join("; ");
}

/** Why an action failed, in the admin's language when the server's code is known. */
function actionError(err) {
  const key = `admin.error.${err.code}`;
  const text = t(key);
  return text === key ? errorText(err) : text;
}

function taskIds() {
  return (state.study?.tasks || []).map((task) => task.id);
}

/** Column headers by key: admin.th.<key> in the admin's language; notation (r, t, p, cosine) as it is. */
function headers(...keys) {
  return keys.map((key) => term("admin.th", key));
}

function table(labels, rows, { empty, className = "" } = {}) {
  if (!rows.length) return h("p.muted", empty || t("admin.context.none"));
  return h("div.table-wrap", h(`table.data${className ? `.${className}` : ""}`,
    h("thead", h("tr", labels.map((label) => h("th", { scope: "col" }, label)))),
    h("tbody", rows.map((cells) => h("tr", cells.map((cell) => h("td", cell)))))));
}

function jsonBlock(value) {
  return h("pre", JSON.stringify(value, null, 2));
}

/** Handles 401 anywhere: the session is gone, so ask for a log-in in place. */
async function load(path) {
  try {
    return await api.get(path);
  } catch (err) {
    if (err.status === 401) showLogin(t("admin.login.expired"));
    throw err;
  }
}

// -- header -------------------------------------------------------------------------------------

const languageButton = document.getElementById("language-toggle");
const who = document.getElementById("who");

function renderHeader(route) {
  applyDocumentLanguage();
  labelLanguageButton(languageButton);
  who.textContent = state.user ? t("app.logged_in_as", { name: state.user.username }) : "";
  document.querySelectorAll("nav a[data-route]").forEach((link) => {
    if (link.dataset.route === route) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  });
}

languageButton.addEventListener("click", async () => {
  const next = otherLanguage();
  setLanguage(next);
  try {
    await api.post("/api/auth/language", { language: next });
  } catch (err) {
    announce(errorText(err));
  }
  route();
});

document.getElementById("logout").addEventListener("click", async () => {
  try {
    await api.post("/api/auth/logout");
  } finally {
    forgetCsrfToken();
    location.assign("/admin/login");
  }
});

onLanguageChange(() => renderHeader(currentRoute()[0]));

// -- routing ------------------------------------------------------------------------------------

function currentRoute() {
  const [name, arg] = location.hash.replace(/^#\/?/, "").split("/");
  return [name || "monitor", arg];
}

async function route() {
  if (state.cleanup) {
    state.cleanup();
    state.cleanup = null;
  }
  const [name, arg] = currentRoute();
  renderHeader(name === "participant" ? "monitor" : name);
  document.title = `${t("admin.title")} · AI Memory Lab`;
  try {
    if (name === "participant" && arg) await showParticipant(Number(arg));
    else if (name === "failures") await showFailures();
    else if (name === "plots") await showPlots();
    else if (name === "export") showExport();
    else if (name === "study") await showStudyEditor(main);
    else {
      await showMonitor(main, {
        taskIds, load, explainConsolidation: consolidateReason, stopWith: (stop) => { state.cleanup = stop; },
      });
    }
  } catch (err) {
    if (err.status !== 401) mount(main, h("p.notice.error", { role: "alert" }, errorText(err)));
  }
  main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);

// -- log in (only when the session ran out while the page was open) -----------------------------

function showLogin(message) {
  if (state.cleanup) {
    state.cleanup();
    state.cleanup = null;
  }
  const error = noticeBox();
  const username = h("input#admin-username", { type: "text", autocomplete: "username" });
  const password = h("input#admin-password", { type: "password", autocomplete: "current-password" });
  const form = h("form.card", { novalidate: true, style: { maxWidth: "26rem" } },
    h("h1", t("admin.login.title")),
    message ? h("p.notice.info", message) : null,
    h("div.field", h("label", { for: "admin-username" }, t("register.username")), username),
    h("div.field", h("label", { for: "admin-password" }, t("register.password")), password),
    error,
    h("div.actions", h("button", { type: "submit" }, t("login.submit"))));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const data = await api.post("/api/auth/login", { username: username.value.trim(), password: password.value });
      if (data.user.role !== "admin") {
        error.textContent = t("admin.login.not_admin");
        return;
      }
      state.user = data.user;
      route();
    } catch (err) {
      error.textContent = err.status === 401 || err.status === 400 ? t("login.failed") : errorText(err);
    }
  });
  mount(main, form);
  username.focus();
}

// -- participant detail -------------------------------------------------------------------------

function contextSection(key, title, content) {
  return h("section.context-section", { dataset: { section: key } }, h("h4", title), content);
}

function none() {
  return h("p.muted", t("admin.context.none"));
}

function contextPanel(message) {
  const ctx = message.memory_context;
  const body = h("div.context-body");
  body.append(h("p.meta", t("admin.context.meta", {
    provider: message.provider || "–", model: message.model || "–",
    pt: fmt(message.prompt_tokens), ct: fmt(message.completion_tokens), latency: fmt(message.latency_ms, 1),
  })));
  if (!ctx) {
    body.append(h("p.muted", t("admin.context.missing")));
  } else {
    body.append(contextSection("group", t("admin.context.group"), h("p", h("span.badge.group", ctx.group || message.memory_group || "–"))));
    const profile = ctx.profile;
    body.append(contextSection("profile",
      profile ? t("admin.context.profile_version", { version: fmt(profile.version) }) : t("admin.context.profile"),
      profile && (profile.text || profile.content) ? h("pre", profile.text || JSON.stringify(profile.content, null, 2)) : none()));
    const turns = ctx.recent_turns || [];
    body.append(contextSection("recent_turns", `${t("admin.context.recent_turns")} (${turns.length})`,
      turns.length ? h("ol", turns.map((turn) => h("li",
        turn.task_id ? h("span.badge", turn.task_id) : null, " ",
        h("b", `${t("task.you")}: `), turn.user ?? "",
        turn.assistant ? [h("br"), h("b", `${t("task.assistant")}: `), turn.assistant] : null))) : none()));
    const recalled = ctx.recalled || [];
    body.append(contextSection("recalled", `${t("admin.context.recalled")} (${recalled.length})`,
      table(headers("task", "text", "r", "t", "p", "p_final", "g_before", "g_after", "cosine"),
        recalled.map((m) => [m.task_id ?? "–", m.text ?? "", fmt(m.r), fmt(m.t), fmt(m.p), fmt(m.p_final),
          fmt(m.g_before), fmt(m.g_after), fmt(m.cosine)]))));
    if (ctx.summary) body.append(contextSection("summary", t("admin.context.summary_block"),
      ctx.summary.text ? h("pre", ctx.summary.text) : jsonBlock(ctx.summary)));
    if ((ctx.fragments || []).length) body.append(contextSection("fragments", t("admin.context.fragments"),
      h("ol", ctx.fragments.map((f) => h("li", f.task_id ? `[${f.task_id}] ` : "", f.text ?? JSON.stringify(f),
        f.score !== undefined ? h("span.sub", t("admin.context.score", { score: fmt(f.score) })) : null)))));
    if (ctx.r1_memory) body.append(contextSection("r1_memory", t("admin.context.r1_memory"),
      ctx.r1_memory.text ? h("pre", ctx.r1_memory.text) : jsonBlock(ctx.r1_memory)));
    if ((ctx.notes || []).length) body.append(contextSection("notes", t("admin.context.notes"),
      h("ul", ctx.notes.map((note) => h("li", noteText(note))))));
  }
  const prompt = Array.isArray(message.prompt) ? message.prompt : [];
  if (prompt.length) {
    body.append(h("details.prompt",
      h("summary", t("admin.context.prompt", { n: prompt.length })),
      prompt.map((m) => h("div.prompt-message", h("b", m.role), h("pre", m.content)))));
  }
  if (message.params) body.append(h("details", h("summary", t("admin.context.params")), jsonBlock(message.params)));
  if (message.attempts) body.append(h("details", h("summary", t("admin.context.attempts")), jsonBlock(message.attempts)));
  return h("details.context", { dataset: { message: String(message.id) } },
    h("summary", t("admin.context.summary", { provider: message.provider || "–", model: message.model || "–" })),
    body);
}

function conversation(record) {
  const byTask = new Map(taskIds().map((id) => [id, []]));
  for (const message of record.messages || []) {
    if (!byTask.has(message.task_id)) byTask.set(message.task_id, []);
    byTask.get(message.task_id).push(message);
  }
  return [...byTask.entries()].map(([taskId, messages]) => h("section.card.task-block", { dataset: { task: taskId } },
    h("h3", taskId, " ", taskCell(record.participant || {}, taskId)),
    messages.length ? messages.map((m) => h(`article.turn.${m.role}`, { dataset: { id: String(m.id) } },
      h("header", `#${m.id} · ${m.role === "user" ? t("task.you") : t("task.assistant")} · ${formatDateTime(m.created_at, { seconds: true })}`),
      h("div.content", m.content),
      m.role === "user" ? qualityLine(m) : null,
      m.role === "assistant" ? contextPanel(m) : null)) : h("p.muted", t("admin.detail.no_messages"))));
}

function qualityLine(message) {
  if (message.typing_ms === null || message.typing_ms === undefined) return null;
  const implausible = message.implausible_typing || [];
  return h("p.quality", { class: message.pasted_chars || implausible.length ? "pasted" : "" },
    message.pasted_chars ? [h("span.badge.flag.pasted", t("admin.quality.pasted", { n: message.pasted_chars })), " "] : null,
    implausible.map((reason) => [h("span.badge.flag.implausible", { dataset: { reason } },
      t(`admin.quality.${reason}`)), " "]),
    t("admin.quality.message", {
      typing: fmt(message.typing_ms / 1000, 1), keys: fmt(message.keystrokes), pasted: fmt(message.pasted_chars),
      focus: fmt(message.focus_losses),
    }));
}

/** One row per task and instrument, the items side by side: compact enough to read a whole task. */
function answerRows(answersByTask) {
  const rows = [];
  for (const [taskId, answers] of answersByTask) {
    const byInstrument = new Map();
    for (const a of answers) {
      if (!byInstrument.has(a.instrument)) byInstrument.set(a.instrument, []);
      byInstrument.get(a.instrument).push(a);
    }
    for (const [instrument, items] of byInstrument) {
      rows.push([taskId, items[0].instrument_title?.[language()] || instrument,
        h("span.answers", items.map((a) => h("span.answer", { dataset: { item: a.item_id } },
          h("code", a.item_id), " = ", typeof a.value === "string" ? a.value : JSON.stringify(a.value)))),
        formatDateTime(items[0].submitted_at, { seconds: true })]);
    }
  }
  return rows;
}

function profileHistory(profiles) {
  if (!profiles.length) return h("p.muted", t("admin.detail.no_profiles"));
  const latest = new Map();
  profiles.forEach((p, i) => latest.set(p.kind, i));
  return h("div", profiles.map((p, i) => h("details.profile-version", { open: latest.get(p.kind) === i },
    h("summary", t("admin.profile.version", { kind: term("admin.profile.kind", p.kind), version: p.version }),
      p.task_id ? ` · ${p.task_id}` : "", ` · ${p.source || ""} · ${formatDateTime(p.created_at)}`),
    p.rendered ? h("pre", p.rendered) : null,
    p.content ? h("details", h("summary", "JSON"), jsonBlock(p.content)) : null)));
}

function actionsCard(record, reload) {
  const participant = record.participant;
  const note = retell(h("div.notice.info#record-note", { role: "status" }));
  // `what` names the action: a function, so a note told now can be told again in another language
  const run = async (button, what, path, body) => {
    button.disabled = true;
    tell(note, () => "");
    try {
      const data = await api.post(path, body);
      tell(note, () => {
        const why = data ? consolidateReason(data) : "";
        return t("admin.action.done", { what: what() }) + (why ? ` (${why})` : "");
      });
      await reload();
      announce(t("admin.action.done", { what: what() }));
    } catch (err) {
      tell(note, () => t("admin.action.unavailable", { message: actionError(err) }));
      button.disabled = false;
    }
  };

  const consolidate = h("button.secondary#action-consolidate", { type: "button" }, t("admin.action.consolidate"));
  consolidate.addEventListener("click", () =>
    run(consolidate, () => t("admin.action.consolidate"), `/api/admin/participants/${participant.id}/consolidate`));

  const withdrawReason = h("input#withdraw-reason", { type: "text", maxlength: 2000 });
  const withdrawButton = h("button.danger#action-withdraw", { type: "submit", disabled: participant.status === "withdrawn" },
    t("admin.action.withdraw"));
  const withdrawForm = h("form#withdraw-form", { novalidate: true },
    h("label", { for: "withdraw-reason" }, t("admin.action.withdraw_reason")), withdrawReason, withdrawButton);
  withdrawForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!withdrawReason.value.trim()) {
      tell(note, () => t("admin.action.reason_required"));
      withdrawReason.focus();
      return;
    }
    run(withdrawButton, () => t("admin.action.withdraw"), `/api/admin/participants/${participant.id}/withdraw`,
      { reason: withdrawReason.value.trim() });
  });

  // only the tasks that can be reset are offered; the others say why not, in the admin's language
  const options = record.reset_options || taskIds().map((id) => ({ task_id: id, allowed: true }));
  const resettable = options.filter((o) => o.allowed);
  const resetTask = h("select#reset-task", { disabled: !resettable.length },
    resettable.map((o) => h("option", { value: o.task_id }, o.task_id)));
  const resetReason = h("input#reset-reason", { type: "text", maxlength: 2000, disabled: !resettable.length });
  const resetButton = h("button.secondary#action-reset", { type: "submit", disabled: !resettable.length },
    t("admin.action.reset"));
  const whyNot = options.filter((o) => !o.allowed).map((o) =>
    h("li", { dataset: { task: o.task_id, code: o.code } },
      t("admin.reset.why_not", { task: o.task_id, reason: term("admin.error", o.code) })));
  const resetForm = h("form#reset-form", { novalidate: true },
    h("label", { for: "reset-task" }, t("admin.action.reset_task")), resetTask,
    resettable.length ? null : h("p.muted#reset-none", t("admin.reset.none")),
    whyNot.length ? h("ul.muted.reset-why-not#reset-why-not", whyNot) : null,
    h("label", { for: "reset-reason" }, t("admin.action.reset_reason")), resetReason, resetButton);
  resetForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!resetReason.value.trim()) {
      tell(note, () => t("admin.action.reason_required"));
      resetReason.focus();
      return;
    }
    const resetId = resetTask.value;
    run(resetButton, () => `${t("admin.action.reset")} ${resetId}`,
      `/api/admin/participants/${participant.id}/tasks/${encodeURIComponent(resetTask.value)}/reset`,
      { reason: resetReason.value.trim() });
  });

  const newLink = h("div.new-link");
  const reissue = h("button.secondary#action-reissue-link", { type: "button" }, t("admin.action.reissue_link"));
  reissue.addEventListener("click", async () => {
    tell(note, () => "");
    try {
      const data = await api.post(`/api/admin/participants/${participant.id}/return-link`);
      const box = h("input#new-return-link", { type: "text", readonly: true, value: data.url });
      const copy = h("button.secondary.small#copy-new-link", { type: "button" }, t("admin.action.copy_link"));
      copy.addEventListener("click", async () => {
        box.select();
        try {
          await navigator.clipboard.writeText(data.url);
          copy.textContent = t("admin.action.copied");
        } catch {
          // the text is selected; it can be copied by hand
        }
      });
      mount(newLink, h("p", t("admin.action.new_link")), box, " ", copy);
      const counts = document.getElementById("return-link-summary");
      if (counts && data.return_links) counts.textContent = linkSummaryText(data.return_links);
    } catch (err) {
      tell(note, () => t("admin.action.unavailable", { message: actionError(err) }));
    }
  });
  const revoke = h("button.secondary#action-revoke-links", { type: "button" }, t("admin.action.revoke_links"));
  revoke.addEventListener("click", () =>
    run(revoke, () => t("admin.action.revoke_links"), `/api/admin/participants/${participant.id}/return-link/revoke`));
  const signOut = h("button.secondary#action-sign-out", { type: "button" }, t("admin.action.sign_out_everywhere"));
  signOut.addEventListener("click", () =>
    run(signOut, () => t("admin.action.sign_out_everywhere"), `/api/admin/participants/${participant.id}/sign-out`));

  const eraseReason = h("input#erase-reason", { type: "text", maxlength: 2000 });
  const eraseButton = h("button.danger#action-erase", { type: "submit" }, t("admin.action.erase"));
  const eraseForm = h("form#erase-form", { novalidate: true },
    h("label", { for: "erase-reason" }, t("admin.action.erase_reason")), eraseReason, eraseButton);
  eraseForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!eraseReason.value.trim()) {
      tell(note, () => t("admin.action.reason_required"));
      eraseReason.focus();
      return;
    }
    // irreversible: the browser's own dialog must be confirmed, and the server needs confirm: true
    if (!window.confirm(t("admin.action.confirm_erase"))) return;
    run(eraseButton, () => t("admin.action.erase"), `/api/admin/participants/${participant.id}/erase`,
      { confirm: true, reason: eraseReason.value.trim() });
  });

  return h("section.card#actions",
    h("h2", t("admin.detail.actions")),
    note,
    h("div.action-grid", h("div", consolidate), withdrawForm, resetForm,
      h("div", reissue, " ", revoke, " ", signOut, newLink), eraseForm));
}

function linkSummaryText(links) {
  return t("admin.links.summary", { live: links.live, issued: links.issued, used: formatDateTime(links.last_used_at) || "–" });
}

function tombstoneView(record, id) {
  const tomb = record.tombstone || {};
  const facts = [
    [t("admin.col.code"), tomb.participant_code], [t("admin.col.group"), tomb.memory_group],
    [t("admin.col.status"), statusBadge(tomb.status || "erased")], [t("admin.col.enrolled"), formatDateTime(tomb.enrolled_at)],
    [t("admin.detail.erased_at"), formatDateTime(tomb.erased_at)], [t("admin.detail.erasure_reason"), tomb.erasure_reason],
  ];
  mount(main,
    h("p", h("a", { href: "#/monitor" }, t("admin.back"))),
    h("h1", t("admin.detail.title", { code: tomb.participant_code || `#${id}` })),
    h("p.notice.info#erased-notice", t("admin.detail.erased")),
    h("section.card#tombstone", h("dl.facts", facts.map(([label, value]) => h("div", h("dt", label), h("dd", value ?? "–"))))),
    record.audit?.length ? [h("h2", t("admin.detail.audit")), table(headers("time", "action"),
      record.audit.map((a) => [formatDateTime(a.at, { seconds: true }), term("admin.audit", a.action)]))] : null);
}

function remindersTable(reminders) {
  return table(headers("task", "kind", "channel", "status", "attempts", "sent", "error"),
    reminders.map((r) => [r.task_id, term("admin.reminder.kind", r.kind), term("admin.reminder.channel", r.channel),
      term("admin.reminder.status", r.status), fmt(r.attempts), formatDateTime(r.sent_at), r.error || "–"]),
    { empty: t("admin.detail.no_reminders") });
}

async function showParticipant(id) {
  mount(main, h("p.loading", t("app.loading")));
  const openPanels = new Set();

  async function reload() {
    // keep the panels an admin opened across a reload after an action
    main.querySelectorAll("details.context[open]").forEach((d) => openPanels.add(d.dataset.message));
    const record = await load(`/api/admin/participants/${id}`);
    render(record);
    main.querySelectorAll("details.context").forEach((d) => { if (openPanels.has(d.dataset.message)) d.open = true; });
  }

  function render(record) {
    if (record.erased) {
      tombstoneView(record, id);
      return;
    }
    const p = record.participant || {};
    const facts = [
      [t("admin.col.code"), p.participant_code], [t("admin.col.username"), p.username],
      [t("admin.col.group"), p.memory_group], [t("admin.col.status"), p.status ? statusBadge(p.status) : null],
      [t("admin.col.enrolled"), formatDateTime(p.enrolled_at)], [t("admin.col.last_active"), formatDateTime(p.last_active_at)],
      [t("admin.col.messages"), fmt(p.messages)], [t("admin.col.questionnaires"), fmt(p.questionnaires_done)],
      [t("admin.col.failures"), fmt(p.provider_failures)],
      [t("admin.detail.external_id"), p.external_id], [t("admin.col.quality"), qualityCell(p)],
      [t("admin.detail.return_links"), record.return_links
        ? h("span#return-link-summary", linkSummaryText(record.return_links)) : null],
    ];
    const answersByTask = new Map();
    for (const a of record.questionnaires || []) {
      if (!answersByTask.has(a.task_id)) answersByTask.set(a.task_id, []);
      answersByTask.get(a.task_id).push(a);
    }
    const forgetting = plotFigure("forgetting_curves", plotSrc("forgetting_curves", { user_id: id }),
      t("admin.detail.forgetting"));
    mount(main,
      h("p", h("a", { href: "#/monitor" }, t("admin.back"))),
      h("h1", t("admin.detail.title", { code: p.participant_code || `#${id}` })),
      h("section.card", h("h2", t("admin.detail.summary")),
        h("dl.facts", facts.map(([label, value]) => h("div", h("dt", label), h("dd", value ?? "–"))))),
      actionsCard(record, reload),
      h("h2", t("admin.detail.conversation")),
      conversation(record),
      h("h2", t("admin.detail.sessions")),
      table(headers("task", "attempt", "status", "phase", "started", "chat_ended", "completed", "active_s", "idle_gaps",
        "end", "reset_reason", "consolidation"),
      (record.task_sessions || []).map((s) => [s.task_id, fmt(s.attempt), term("admin.session", s.status),
        term("admin.phase", s.phase), formatDateTime(s.started_at, { seconds: true }),
        formatDateTime(s.chat_ended_at, { seconds: true }), formatDateTime(s.completed_at, { seconds: true }),
        sessionTime(s, record.timer_scale),
        t("admin.idle_gaps", { count: fmt(s.idle_gap_count), seconds: fmt(s.idle_seconds, 1) }), term("admin.end", s.end_reason), s.reset_reason || "–",
        term("admin.consolidation", s.consolidation_state ?? s.consolidation_status)])),
      h("h2", t("admin.detail.profiles")),
      h("section.card#profiles", profileHistory(record.profiles || [])),
      h("h2", t("admin.detail.recalls")),
      table(headers("time", "task", "query", "memory", "rank", "cosine", "r", "t", "p", "p_final", "g_before", "g_after",
        "salience", "recalled"),
        (record.recall_events || []).map((e) => [formatDateTime(e.created_at, { seconds: true }), e.task_id, `#${e.query_message_id}`,
          `#${e.memory_message_id}`, fmt(e.rank), fmt(e.cosine), fmt(e.r), fmt(e.t), fmt(e.p), fmt(e.p_final), fmt(e.g_before),
          fmt(e.g_after), fmt(e.salience), e.recalled ? recalledBy(e) : t("admin.no")]),
        { empty: t("admin.detail.no_recalls") }),
      h("h2", t("admin.detail.questionnaires")),
      answersByTask.size ? table(headers("task", "instrument", "answers", "submitted"), answerRows(answersByTask))
        : h("p.muted", t("admin.detail.no_answers")),
      h("h2", t("admin.detail.runs")),
      table(headers("id", "task", "trigger", "status", "provider", "started", "finished", "error", "steps"),
        (record.consolidation_runs || []).map((r) => [fmt(r.id), r.task_id, term("admin.trigger", r.trigger),
          term("admin.consolidation", r.status),
          r.provider || "–",
          formatDateTime(r.started_at, { seconds: true }), formatDateTime(r.finished_at, { seconds: true }), r.error || "–",
          r.steps ? h("details", h("summary", "JSON"), jsonBlock(r.steps)) : "–"]),
        { empty: t("admin.detail.no_runs") }),
      h("h2", t("admin.detail.failures")),
      failuresTable(record.provider_failures || [], t("admin.detail.no_failures")),
      h("h2", t("admin.detail.reminders")),
      remindersTable(p.reminders || []),
      record.audit?.length ? [h("h2", t("admin.detail.audit")), table(headers("time", "action", "details"),
        record.audit.map((a) => [formatDateTime(a.at, { seconds: true }), term("admin.audit", a.action),
          jsonBlock(a.details)]))] : null,
      h("h2", t("admin.detail.forgetting")),
      forgetting);
  }

  await reload();
}

// -- failures, plots, export --------------------------------------------------------------------

// which try failed and what followed, in the reader's words (the server stores the facts)
function attemptCell(failure) {
  const words = attemptMessage(failure);
  return words ? t(words.key, words.vars) : "–";
}

function failuresTable(failures, empty) {
  return table(headers("time", "participant", "provider", "model", "purpose", "error", "status", "try", "message",
    "fallback"),
    failures.map((f) => [formatDateTime(f.at, { seconds: true }),
      f.user_id ? h("a", { href: `#/participant/${f.user_id}` }, f.participant_code || `#${f.user_id}`) : "–",
      f.provider, f.model || "–", term("admin.purpose", f.purpose), f.error_class || "–", fmt(f.status_code),
      attemptCell(f), f.message || "", f.fallback_provider || "–"]),
    { empty });
}

async function showFailures() {
  mount(main, h("p.loading", t("app.loading")));
  const data = await load("/api/admin/failures");
  const byProvider = data.by_provider || [];
  mount(main,
    h("h1", t("admin.failures.title"), data.total !== undefined ? h("span.updated", `n = ${data.total}`) : null),
    byProvider.length ? [h("h2", t("admin.failures.by_provider")),
      table(headers("provider", "replies", "failures", "failure_rate", "by_purpose"),
        byProvider.map((p) => [p.provider, fmt(p.replies), fmt(p.failures), fmt(p.reply_failure_rate, 4),
          Object.entries(p.failures_by_purpose || {}).map(([k, v]) => `${term("admin.purpose", k)}: ${v}`).join(", ") || "–"]))] : null,
    h("h2", t("admin.failures.list")),
    failuresTable(data.failures || [], t("admin.failures.none")));
}

/** A plot's address in the admin's language; the server caches it until its data change (ETag). */
function plotSrc(name, params = {}) {
  const query = new URLSearchParams({ ...params, lang: language() });
  return `/api/admin/plots/${name}.png?${query}`;
}

/** A plot card that says it is drawing until the image has arrived (a first render takes seconds). */
function plotFigure(name, src, caption) {
  const waiting = h("p.plot-loading", { role: "status" }, h("span.spinner", { "aria-hidden": "true" }),
    t("admin.plots.loading"));
  const img = h("img", { src, alt: caption, hidden: true });
  const figure = h("figure.card", { dataset: { plot: name, state: "loading" }, "aria-busy": "true" },
    h("figcaption", caption), waiting, img);
  img.addEventListener("load", () => {
    waiting.remove();
    img.hidden = false;
    figure.dataset.state = "ready";
    figure.removeAttribute("aria-busy");
  });
  img.addEventListener("error", () => {
    waiting.remove();
    img.replaceWith(h("p.muted", t("admin.plots.unavailable")));
    figure.dataset.state = "failed";
    figure.removeAttribute("aria-busy");
  });
  return figure;
}

async function showPlots() {
  const participants = h("select#plot-participant");
  const curve = h("div#forgetting-curve");
  const showCurve = () => {
    if (!participants.value) {
      mount(curve, h("p.muted", t("admin.context.none")));
      return;
    }
    mount(curve, plotFigure("forgetting_curves", plotSrc("forgetting_curves", { user_id: participants.value }),
      t("admin.plots.forgetting_curves")));
  };
  participants.addEventListener("change", showCurve);
  mount(main,
    h("h1", t("admin.plots.title"),
      h("button.secondary.small", { type: "button", onclick: () => showPlots() }, t("admin.plots.reload"))),
    h("div.plots", PLOTS.map((name) => plotFigure(name, plotSrc(name), t(`admin.plots.${name}`)))),
    h("h2", t("admin.plots.forgetting_curves")),
    h("div.field", { style: { maxWidth: "20rem" } },
      h("label", { for: "plot-participant" }, t("admin.col.code")), participants),
    curve);
  try {
    const data = await load("/api/admin/participants");
    const rows = data.participants || [];
    mount(participants, rows.map((p) =>
      h("option", { value: String(p.id) }, `${p.participant_code} (${p.memory_group || "–"})`)));
    // open on a participant whose condition has a forgetting curve (L4), not on whoever came first
    const withCurve = rows.find((p) => p.forgetting_curve);
    if (withCurve) participants.value = String(withCurve.id);
  } catch (err) {
    if (err.status === 401) return;
  }
  showCurve();
}

function showExport() {
  const bom = h("input#export-bom", { type: "checkbox", checked: true });
  const noPii = h("input#export-exclude-pii", { type: "checkbox" });
  const link = h("a.button#export-link", { download: "" }, t("admin.export.download"));
  const update = () => {
    const params = new URLSearchParams({ bom: bom.checked ? "1" : "0", exclude_pii: noPii.checked ? "1" : "0" });
    link.href = `/api/admin/export?${params}`;
  };
  bom.addEventListener("change", update);
  noPii.addEventListener("change", update);
  update();
  mount(main,
    h("h1", t("admin.export.title")),
    h("section.card",
      h("p", t("admin.export.intro")),
      h("div.export-options",
        h("label.check", { for: "export-bom" }, bom, h("span", t("admin.export.bom"))),
        h("label.check", { for: "export-exclude-pii" }, noPii, h("span", t("admin.export.exclude_pii")))),
      link),
    h("h2", t("admin.report.title")),
    reportCard(),
    h("h2", t("admin.export.payments")),
    h("section.card#payments",
      h("p", t("admin.export.payments_intro")),
      h("p.actions",
        h("a.button#payments-link", { href: "/api/admin/payments.csv", download: "" }, t("admin.export.payments_sheet")),
        " ",
        h("a.button.secondary#payments-upload-link", { href: "/api/admin/payments.csv?upload=1", download: "" },
          t("admin.export.payments_upload")))));
}

// The study report: built by the server from an export made now, downloaded as a zip (report.html, report.json).
function reportCard() {
  const status = h("p.status#report-status", { role: "status" });
  const button = h("button.button#report-generate", { type: "button" }, t("admin.report.generate"));
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = t("admin.report.working");
    try {
      const { blob, filename } = await api.download("/api/admin/report", { language: language() });
      const url = URL.createObjectURL(blob);
      const link = h("a", { href: url, download: filename });
      document.body.append(link);
      link.click();
      link.remove();
      window.setTimeout(() => URL.revokeObjectURL(url), 10000);
      status.textContent = t("admin.report.done", { file: filename });
    } catch (err) {
      status.textContent = errorText(err);
    } finally {
      button.disabled = false;
    }
  });
  return h("section.card#report", h("p", t("admin.report.intro")), h("p.actions", button), status);
}

// -- pre-flight banner --------------------------------------------------------------------------

const preflightBanner = document.getElementById("preflight-banner");

// Each check of a stored report is listed by its name (admin.preflight.check.<name>, else the name itself), so a
// check added to the pre-flight appears without more work. A check judged by the pre-registered rule carries
// `targets` (figure, one-sided 95 % interval, n, verdict), `shape` and `next_step`; older reports carry
// `failures` / `failed_checks` / `message` only, shown as they were stored.
function checkName(name) {
  const key = `admin.preflight.check.${name}`;
  const text = t(key);
  return text === key ? name.replace(/_/g, " ") : text;
}

function percent(x) {
  return x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)}%`;
}

function targetLabel(target) {
  const key = `admin.preflight.measure.${target.measure}`;
  if (!target.measure || !target.task || t(key) === key) return target.name;
  const lang = target.language ? t(`admin.preflight.lang.${target.language}`) : "";
  const task = target.task === "all" ? t("admin.preflight.all_tasks") : target.task;
  const group = target.group && target.group !== "pooled" && target.measure !== "beyond"
    ? t(`admin.preflight.group.${target.group}`) : "";
  return t(key, { lang, task, group: group ? ` ${group}` : "", condition: target.group || "",
    baseline: target.baseline || "" }).trim();
}

function targetLine(target) {
  const verdict = t(`admin.preflight.verdict.${target.verdict}`);
  if (target.estimate === null || target.estimate === undefined) return `${targetLabel(target)}: ${verdict}`;
  return t("admin.preflight.target", {
    label: targetLabel(target), figure: percent(target.estimate), successes: target.successes, n: target.n,
    low: percent(target.low), high: percent(target.high), side: target.direction === "at_most" ? "≤" : "≥",
    target: `${Math.round(100 * target.target)}%`, verdict });
}

function shapeLine(shape) {
  const lang = shape.language ? t(`admin.preflight.lang.${shape.language}`) : "";
  const [first, second] = shape.tasks || ["T2", "T4"];
  const label = t("admin.preflight.shape_label", { lang, first, second }).trim();
  if (shape.estimate === null || shape.estimate === undefined) {
    return `${label}: ${t("admin.preflight.verdict.no_data")}`;
  }
  const signed = (x) => `${x >= 0 ? "+" : ""}${(100 * x).toFixed(1)}%`;
  return t("admin.preflight.shape", {
    label, figure: signed(shape.estimate), s1: shape.first[0], n1: shape.first[1], s2: shape.second[0],
    n2: shape.second[1], low: signed(shape.low),
    verdict: t(shape.above ? "admin.preflight.shape_above" : "admin.preflight.shape_not_above") });
}

function nextStepLine(step) {
  if (step.kind === "refit") return t("admin.preflight.next_refit", { command: step.command, preset: step.preset });
  if (step.kind === "simulate") return t("admin.preflight.next_simulate", { command: step.command });
  return t("admin.preflight.next_step", { text: step.text || step.command });
}

// [kind, text] lines of one check: its verdict, then what is not met (amber: within error; red: missed, no data,
// a shape not above its error, an older report's failures) and the next step.
function checkLines(name, check) {
  const targets = check.targets || [];
  const verdict = check.verdict === "refused" ? "refused" : check.verdict === "not_run" ? "not_run"
    : check.passed ? (check.amber ? "amber" : "passed") : "failed";
  const kind = { passed: "ok", amber: "warn" }[verdict] || "error";
  const lines = [[kind, t(`admin.preflight.check_${verdict}`, { name: checkName(name) })]];
  for (const target of targets) {
    if (target.verdict === "within_error") lines.push(["warn", targetLine(target)]);
    else if (target.verdict !== "met") lines.push(["error", targetLine(target)]);
  }
  for (const shape of check.shape || []) if (!shape.above) lines.push(["error", shapeLine(shape)]);
  if (!check.passed) {
    if (check.message) lines.push(["error", check.message]);
    if (check.reason) lines.push(["error", check.reason]);
    if (!targets.length) {
      for (const failure of (check.failures || []).concat(check.failed_checks || [])) lines.push(["error", failure]);
    } else {
      for (const failure of check.failed_checks || []) lines.push(["error", failure]);
    }
    if (check.next_step) lines.push(["error", nextStepLine(check.next_step)]);
  }
  return lines;
}

function preflightLines(status) {
  const report = status.report || {};
  const date = formatDateTime(report.created_at);
  const checks = Object.entries(report.checks || {});
  const failed = checks.filter(([, check]) => !check.passed).map(([name]) => checkName(name));
  const lines = [];
  if (status.state === "verified") {
    lines.push(["ok", t("admin.preflight.verified",
      { date, embedder: report.embedder_model || "–", model: report.chat_model || "–" })]);
  } else if (status.state === "failed") {
    lines.push(["error", t("admin.preflight.failed", { date, checks: failed.join(t("admin.preflight.and")) || "–" })]);
  } else if (status.state === "changed") {
    lines.push(["error", t("admin.preflight.changed", { date })]);
  } else {
    lines.push(["error", t("admin.preflight.not_verified")]);
  }
  if (status.state === "failed") {
    for (const [name, check] of checks) lines.push(...checkLines(name, check));
  } else if (status.state === "verified") {  // green stays one line; a check with a target within error says so
    for (const [name, check] of checks) if (check.amber) lines.push(...checkLines(name, check));
  }
  if (status.required && status.state !== "verified") lines.push(["error", t("admin.preflight.closed")]);
  if (status.embedder_warning) lines.push(["error", t("admin.preflight.embedder", { message: status.embedder_warning })]);
  return lines;
}

// Every target of every check, met ones too (figure, interval, n, verdict), folded away under the banner.
function preflightFigures(status) {
  const checks = Object.entries(status.report?.checks || {}).filter(([, check]) => (check.targets || []).length);
  if (!checks.length || !["verified", "failed"].includes(status.state)) return [];
  return [h("details.preflight-figures",
    h("summary", t("admin.preflight.figures")),
    ...checks.map(([name, check]) => h("div",
      h("h3", checkName(name)),
      h("ul", ...check.targets.map((target) => h("li", { dataset: { verdict: target.verdict } }, targetLine(target))),
        ...(check.shape || []).map((shape) => h("li", shapeLine(shape)))))))];
}

async function showPreflight() {
  let lines;
  let figures = [];
  try {
    const status = (await load("/api/admin/preflight")).preflight;
    preflightBanner.dataset.state = status.state;
    lines = preflightLines(status);
    figures = preflightFigures(status);
  } catch (err) {
    lines = [["error", t("admin.preflight.unknown", { message: err.message })]];
  }
  mount(preflightBanner, ...lines.map(([kind, text]) =>
    h(`p.notice.${kind}`, { role: kind === "error" ? "alert" : "status" }, text)), ...figures);
}

onLanguageChange(() => { if (state.user) showPreflight(); });

// -- start --------------------------------------------------------------------------------------

async function boot() {
  renderHeader(currentRoute()[0]);
  try {
    state.study = await api.get("/api/study");
    state.user = (await api.get("/api/auth/me")).user;
  } catch (err) {
    if (err.status === 401) {
      showLogin();
      return;
    }
    mount(main, h("p.notice.error", { role: "alert" }, errorText(err)));
    return;
  }
  if (state.user.role !== "admin") {
    location.replace("/");
    return;
  }
  if (state.user.language && state.user.language !== language()) setLanguage(state.user.language);
  await Promise.all([showPreflight(), route()]);
}

boot();
