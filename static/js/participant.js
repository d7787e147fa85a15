// The participant page: consent -> register (or log in) -> task list -> timed chat -> questionnaire.
// Everything goes through the JSON API; the server decides what is allowed and keeps the timer.
// Nothing here knows or shows the memory condition (the API never sends it to a participant).

import { api, forgetCsrfToken, postStream } from "./api.js";
import { h, mount } from "./dom.js";
import {
  adoptLanguage, applyDocumentLanguage, chosenOnThisPage, formatDateTime, formatDuration, language, onLanguageChange,
  otherLanguage, setLanguage, settleLanguage, t,
} from "./i18n.js";
import { apiErrorText } from "./error_texts.js";
import { buildQuestionnaire } from "./questionnaire.js";

const HEARTBEAT_MS = 10_000;
const TICK_MS = 250;
const TASK_LIST_POLL_MS = 60_000;
// a page re-reading the task list around an unlock time: first wait, and the longest wait between checks
const UNLOCK_RECHECK_MS = 500;
const UNLOCK_RECHECK_MAX_MS = 8_000;
// how near the end of the page counts as "at the newest message" (the chat follows only then)
const FOLLOW_SLACK_PX = 48;

const main = document.getElementById("main");
const announcer = document.getElementById("announcer");
const state = { study: null, user: null, consentGiven: false, cleanup: null, flash: null, panelId: null, farewell: null, panelProblem: null };

// -- small helpers ------------------------------------------------------------------------------

function announce(text) {
  announcer.textContent = "";
  window.setTimeout(() => { announcer.textContent = text; }, 50);
}

function errorText(err) {
  if (err.code === "network") return t("error.network");
  if (err.status === 429) return t("error.rate");
  return apiErrorText(err);  // by the error's code: the server's English message is never shown
}

function noticeBox(kind = "error") {
  return h(`div.notice.${kind}`, { role: kind === "error" ? "alert" : "status" });
}

function takeFlash() {
  const flash = state.flash;
  state.flash = null;
  if (!flash) return null;
  const box = noticeBox(flash.kind);
  box.textContent = flash.text;
  return box;
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function goToAdmin() {
  const next = new URLSearchParams(location.search).get("next");
  location.assign(next && next.startsWith("/admin") ? next : "/admin");
}

function render(title, ...children) {
  document.title = `${title} · ${t("app.title")}`;
  mount(main, ...children);
}

function focusMain() {
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

function localised(value) {
  if (value && typeof value === "object") return value[language()] || value.zh || Object.values(value)[0] || "";
  return value || "";
}

function paragraphs(text) {
  return String(text).split(/\n+/).filter((line) => line.trim()).map((line) => h("p", line));
}

function field(id, labelText, input, hint) {
  return h("div.field",
    h("label", { for: id }, labelText),
    input,
    hint ? h("p.hint", { id: `${id}-hint` }, hint) : null);
}

// -- header -------------------------------------------------------------------------------------

const languageButton = document.getElementById("language-toggle");
const logoutButton = document.getElementById("logout");
const who = document.getElementById("who");

function renderHeader() {
  applyDocumentLanguage();
  languageButton.textContent = t("app.switch_language");
  languageButton.setAttribute("aria-label", t("app.switch_language_label"));
  languageButton.lang = otherLanguage() === "zh" ? "zh-CN" : "en";
  logoutButton.hidden = !state.user;
  // the participant code (what the lab knows them by), never the username: a panel account's is its panel id
  const code = state.user?.participant_code;
  if (code) mount(who, h("span.who-label", t("app.participant_code")), " ", h("span.who-code", code));
  else who.replaceChildren();
}

languageButton.addEventListener("click", async () => {
  const next = otherLanguage();
  setLanguage(next);
  if (state.user) {
    try {
      const data = await api.post("/api/auth/language", { language: next });
      state.user = data.user;
    } catch (err) {
      announce(errorText(err));
    }
  }
  route();
});

logoutButton.addEventListener("click", async () => {
  try {
    await api.post("/api/auth/logout");
  } catch (err) {
    announce(errorText(err));
  }
  forgetCsrfToken();
  state.user = null;
  state.consentGiven = false;
  go("#/login");
});

onLanguageChange(renderHeader);

// -- routing ------------------------------------------------------------------------------------

async function route() {
  if (state.cleanup) {
    state.cleanup();
    state.cleanup = null;
  }
  renderHeader();
  const [name, arg] = location.hash.replace(/^#\/?/, "").split("/");
  if (!state.user) {
    if (name === "debrief" && state.farewell) showFarewell();
    else if (name === "login") showLogin();
    else if (state.panelProblem) showPanelProblem(state.panelProblem);
    else if (state.panelId) showPanelConsent();
    else if (name === "register" && state.consentGiven) showRegister();
    else showConsent();
  } else if (name === "task" && arg) {
    await showTask(decodeURIComponent(arg));
  } else if (name === "done" && arg) {
    await showDone(decodeURIComponent(arg));
  } else if (name === "withdraw") {
    showWithdraw();
  } else if (name === "debrief") {
    await showDebrief();
  } else {
    await showTasks();
  }
  focusMain();
}

window.addEventListener("hashchange", route);

function signedIn(user) {
  state.user = user;
  if (user.role === "admin") {
    goToAdmin();
    return;
  }
  followAccount(user);
  reportTimeZone();
  go("#/tasks");
}

// The account keeps the participant's last explicit choice of language: the page follows it, unless the
// participant chose one on this very page (the link's lang, or the button before logging in), which is
// then the newer choice and is stored on the account instead.
function followAccount(user) {
  const chosen = chosenOnThisPage();
  if (chosen && user.role === "participant" && chosen !== user.language) {
    api.post("/api/auth/language", { language: chosen })
      .then((data) => { if (state.user) state.user = data.user; })
      .catch(() => {});  // the page stays in the chosen language; the account learns it at the next switch
  } else if (user.language) {
    adoptLanguage(user.language);
  }
}

// Reminders give times in the participant's own time zone: the page tells the server which one it is.
function reportTimeZone() {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (!zone || !state.user || state.user.role !== "participant" || state.user.time_zone === zone) return;
  api.post("/api/me/time-zone", { time_zone: zone })
    .then((data) => { if (state.user) state.user.time_zone = data.time_zone; })
    .catch(() => {});  // not knowing it only means reminders say UTC
}

// -- consent, register, log in ------------------------------------------------------------------

function showConsent() {
  const consent = state.study?.consent || {};
  const agree = h("input#consent-agree", { type: "checkbox" });
  const error = noticeBox();
  const proceed = () => {
    if (!agree.checked) {
      error.textContent = t("consent.must_agree");
      agree.focus();
      return;
    }
    state.consentGiven = true;
    go("#/register");
  };
  render(t("consent.title"),
    h("section.card.narrow",
      h("h1", t("consent.title")),
      h("div.consent-text", paragraphs(localised(consent.text))),
      consent.version ? h("p.muted.small-print", `v${consent.version}`) : null,
      contactBlock(),
      h("label.check", { for: "consent-agree" }, agree, h("span", t("consent.agree"))),
      error,
      h("div.actions", h("button#consent-continue", { type: "button", onclick: proceed }, t("consent.continue")))),
    h("p.center", t("consent.have_account"), " ",
      h("a", { href: "#/login" }, t("consent.login"))));
}

// Entered through a panel link (/enter?pid=...): consent, then an account keyed by the panel id, no password.
function panelIdFromUrl() {
  if (location.pathname !== "/enter") return null;
  const name = state.study?.panel?.id_parameter || "pid";
  return new URLSearchParams(location.search).get(name);
}

// The panel's session parameters on the entry link (Prolific: STUDY_ID, SESSION_ID), stored with each entry.
function panelSession() {
  const params = new URLSearchParams(location.search);
  const found = {};
  for (const name of state.study?.panel?.session_parameters || []) {
    if (params.get(name)) found[name] = params.get(name);
  }
  return found;
}

function panelEntry(consent) {
  return api.post("/api/auth/panel", { external_id: state.panelId, consent, language: language(), session: panelSession() });
}

// A panel link opened again: a returning participant (this browser entered as them before) goes straight
// to their tasks in their account's language, without the consent again. A new id gets the consent page.
async function resumePanel() {
  try {
    const data = await panelEntry(undefined);
    state.panelId = null;
    signedIn(data.user);
  } catch (err) {
    if (err.code === "consent_required") return false;
    state.panelProblem = err;
    await route();
  }
  return true;
}

const PANEL_PROBLEMS = {
  panel_reentry_refused: ["panel.refused_title", ["panel.refused_body", "panel.refused_how"]],
  panel_id_not_expected: ["panel.title", ["panel.not_expected"]],
  study_full: ["panel.full_title", ["panel.full_body"]],
  panel_id_case_conflict: ["panel.title", ["panel.case_conflict"]],
  invalid_panel_id: ["panel.title", ["panel.invalid"]],
};

function showPanelProblem(err) {
  const known = PANEL_PROBLEMS[err.code];
  const title = t(known ? known[0] : "panel.title");
  const details = err.details || {};
  render(title,
    h("section.card.narrow#panel-problem", { "data-code": err.code || "" },
      h("h1", title),
      ...(known ? known[1].map((key) => h("p", t(key))) : [h("p.notice.error", { role: "alert" }, errorText(err))]),
      details.completion_code ? h("p.completion", t("panel.full_code"), " ", h("strong#full-code", details.completion_code)) : null,
      details.redirect_url ? h("p.actions", h("a.button#panel-redirect", { href: details.redirect_url }, t("done.redirect"))) : null,
      state.study?.consent?.contact ? h("p#panel-contact", t("panel.contact"), " ", localised(state.study.consent.contact)) : null));
}

function showPanelConsent() {
  const consent = state.study?.consent || {};
  const agree = h("input#consent-agree", { type: "checkbox" });
  const error = noticeBox();
  const submit = h("button#panel-continue", { type: "button" }, t("panel.continue"));
  submit.addEventListener("click", async () => {
    error.textContent = "";
    if (!agree.checked) {
      error.textContent = t("consent.must_agree");
      agree.focus();
      return;
    }
    submit.disabled = true;
    try {
      const data = await panelEntry(true);
      state.panelId = null;
      signedIn(data.user);
    } catch (err) {
      if (PANEL_PROBLEMS[err.code] && err.code !== "invalid_panel_id") {
        state.panelProblem = err;
        route();
        return;
      }
      error.textContent = err.code === "invalid_panel_id" ? t("panel.invalid") : errorText(err);
    } finally {
      submit.disabled = false;
    }
  });
  render(t("panel.title"),
    h("section.card.narrow",
      h("h1", t("panel.title")),
      h("p.panel-intro", t("panel.intro", { id: state.panelId })),
      h("div.consent-text", paragraphs(localised(consent.text))),
      consent.version ? h("p.muted.small-print", `v${consent.version}`) : null,
      contactBlock(),
      h("label.check", { for: "consent-agree" }, agree, h("span", t("consent.agree"))),
      error,
      h("div.actions", submit)));
}

function showRegister() {
  const error = noticeBox();
  const username = h("input#username", { type: "text", autocomplete: "username", required: true, "aria-describedby": "username-hint", maxlength: 32 });
  const password = h("input#password", { type: "password", autocomplete: "new-password", required: true, "aria-describedby": "password-hint" });
  const repeat = h("input#password-repeat", { type: "password", autocomplete: "new-password", required: true });
  const submit = h("button#register-submit", { type: "submit" }, t("register.submit"));
  const form = h("form.card.narrow", { novalidate: true },
    h("h1", t("register.title")),
    field("username", t("register.username"), username, t("register.username_hint")),
    field("password", t("register.password"), password, t("register.password_hint")),
    field("password-repeat", t("register.password_repeat"), repeat),
    error,
    h("div.actions", submit, h("a", { href: "#/consent" }, t("register.back"))));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    if (password.value !== repeat.value) {
      error.textContent = t("register.password_mismatch");
      repeat.focus();
      return;
    }
    submit.disabled = true;
    try {
      const data = await api.post("/api/auth/register", {
        username: username.value.trim(), password: password.value, consent: true, language: language(),
      });
      signedIn(data.user);
    } catch (err) {
      if (err.code === "username_taken") error.textContent = t("register.taken");
      else if (err.code === "invalid_username") error.textContent = t("register.username_hint");
      else if (err.code === "invalid_password") error.textContent = t("register.password_hint");
      else error.textContent = errorText(err);
      (["invalid_password", "weak_password", "password_too_long"].includes(err.code) ? password : username).focus();
    } finally {
      submit.disabled = false;
    }
  });
  render(t("register.title"), form);
}

function showLogin() {
  const error = noticeBox();
  const username = h("input#login-username", { type: "text", autocomplete: "username", required: true });
  const password = h("input#login-password", { type: "password", autocomplete: "current-password", required: true });
  const submit = h("button#login-submit", { type: "submit" }, t("login.submit"));
  const form = h("form.card.narrow", { novalidate: true },
    h("h1", t("login.title")),
    field("login-username", t("register.username"), username),
    field("login-password", t("register.password"), password),
    error,
    h("div.actions", submit));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    submit.disabled = true;
    try {
      const data = await api.post("/api/auth/login", {
        username: username.value.trim(), password: password.value, language: chosenOnThisPage() ?? undefined,
      });
      signedIn(data.user);
    } catch (err) {
      error.textContent = err.status === 401 || err.status === 400 ? t("login.failed") : errorText(err);
      password.focus();
    } finally {
      submit.disabled = false;
    }
  });
  render(t("login.title"), form,
    h("p.center", t("login.new"), " ", h("a", { href: "#/consent" }, t("login.register"))));
}

// -- task list ----------------------------------------------------------------------------------

function taskMeta(task) {
  switch (task.status) {
    case "done":
      return t("tasks.done_at", { time: formatDateTime(task.completed_at) });
    case "available":
    case "in_progress":
      return t("tasks.available_since", { time: formatDateTime(task.available_at) });
    default:
      if (task.locked_reason === "withdrawn") return t("tasks.not_done_withdrawn");
      // the server's reason: an unlock time not reached yet is never shown as "finish the previous task"
      if (task.locked_reason === "opens_at" && task.available_at) {
        return t("tasks.unlocks_at", { time: formatDateTime(task.available_at, { seconds: opensSoon(task) }) });
      }
      return task.locked_reason === "previous_task" ? t("tasks.unlocks_after_previous") : t("tasks.status.locked");
  }
}

// within the hour: say the second too, so "opens at 14:05:07" is exact when the page re-checks
function opensSoon(task) {
  return new Date(task.available_at) - new Date() < 3_600_000;
}

// When to read the task list again: just after the next unlock by the server's clock (available_at is cut to
// whole seconds, so it may say a moment before the real unlock), then with a short growing wait until the
// server says the task is open; otherwise now and then.
function nextTaskListCheck(tasks, serverNow, failedChecks) {
  const waiting = tasks.filter((task) => task.status === "locked" && task.locked_reason === "opens_at" && task.available_at);
  if (!waiting.length) return TASK_LIST_POLL_MS;
  const untilUnlock = Math.min(...waiting.map((task) => new Date(task.available_at) - serverNow));
  if (untilUnlock > 0) return Math.min(untilUnlock + UNLOCK_RECHECK_MS, TASK_LIST_POLL_MS);
  return Math.min(UNLOCK_RECHECK_MS * 2 ** failedChecks, UNLOCK_RECHECK_MAX_MS);
}

function taskCard(task, onStart) {
  let action = null;
  if (task.status === "available") {
    action = h("button.start-task", { type: "button", dataset: { task: task.id }, onclick: () => onStart(task) }, t("tasks.start"));
  } else if (task.status === "in_progress") {
    const label = task.phase === "questionnaire" ? t("tasks.questionnaire") : t("tasks.continue");
    action = h("a.button.start-task", { href: `#/task/${encodeURIComponent(task.id)}`, dataset: { task: task.id } }, label);
  }
  // a withdrawn participant's unfinished tasks say so, not "locked"
  const shown = task.status === "locked" && task.locked_reason === "withdrawn" ? "withdrawn" : task.status;
  return h("li.task-card", { class: `status-${shown}`, dataset: { task: task.id, status: task.status } },
    h("div.task-head",
      h("h2", h("span.task-id", task.id), " ", task.title),
      h(`span.badge.${shown}`, t(`tasks.status.${shown}`))),
    h("p.task-meta", taskMeta(task)),
    action ? h("div.actions", action) : null);
}

async function showTasks() {
  render(t("tasks.title"), h("p.loading", t("app.loading")));
  const error = noticeBox();
  let timers = [];
  let overdueChecks = 0;  // checks made after an unlock time that still found the task locked
  const clearTimers = () => { timers.forEach((id) => window.clearTimeout(id)); timers = []; };
  state.cleanup = clearTimers;

  async function start(task) {
    error.textContent = "";
    try {
      await startWithRetries(task.id, error);
      go(`#/task/${encodeURIComponent(task.id)}`);
    } catch (err) {
      error.textContent = startErrorText(err);
      refresh();
    }
  }

  async function refresh() {
    clearTimers();
    let data;
    try {
      data = await api.get("/api/tasks");
    } catch (err) {
      if (err.status === 401) return signedOut();
      error.textContent = errorText(err);
      timers.push(window.setTimeout(refresh, TASK_LIST_POLL_MS));
      return;
    }
    const tasks = data.tasks || [];
    const summary = [];
    const withdrawn = data.participant_status === "withdrawn";
    const finished = tasks.length && tasks.every((task) => task.status === "done");
    if (withdrawn) {
      const contact = localised(state.study?.consent?.contact);
      summary.push(h("div.notice.info#withdrawn-notice", h("p", t("tasks.withdrawn")),
        contact ? h("p#withdrawn-contact", t("tasks.withdrawn_contact"), " ", contact) : null));
    }
    else if (finished) summary.push(h("p.notice.ok", t("tasks.all_done")));
    if (withdrawn || finished) summary.push(h("p", h("a.button#debrief-link", { href: "#/debrief" }, t("rights.debrief_link"))));
    const upcoming = tasks
      .filter((task) => task.status === "locked" && task.locked_reason === "opens_at" && task.available_at)
      .sort((a, b) => new Date(a.available_at) - new Date(b.available_at))[0];
    if (upcoming && !tasks.some((task) => task.status === "available" || task.status === "in_progress")) {
      const time = formatDateTime(upcoming.available_at, { seconds: opensSoon(upcoming) });
      summary.push(h("p.notice.info.next-unlock", t("tasks.next_unlock", { time })));
    }
    mount(main,
      h("h1", t("tasks.title")),
      takeFlash(),
      error,
      summary,
      h("p.muted", t("tasks.intro")),
      h("ol.task-list", tasks.map((task) => taskCard(task, start))),
      rightsBlock(withdrawn));
    // Re-read when the next task unlocks (minutes away in pilot mode), and now and then anyway.
    const serverNow = data.now ? new Date(data.now) : new Date();
    const wait = nextTaskListCheck(tasks, serverNow, overdueChecks);
    const pastUnlock = tasks.some((task) => task.locked_reason === "opens_at" && new Date(task.available_at) <= serverNow);
    overdueChecks = pastUnlock ? overdueChecks + 1 : 0;
    timers.push(window.setTimeout(refresh, Math.max(wait, UNLOCK_RECHECK_MS)));
  }

  await refresh();
}

function signedOut() {
  state.user = null;
  go("#/login");
}

// -- one task: start, chat, questionnaire -------------------------------------------------------

async function showTask(taskId) {
  render(taskId, h("p.loading", t("app.loading")));
  let task;
  try {
    task = (await api.get(`/api/tasks/${encodeURIComponent(taskId)}`)).task;
  } catch (err) {
    if (err.status === 401) return signedOut();
    if (err.status === 404) return go("#/tasks");
    mount(main, backLink(), h("p.notice.error", { role: "alert" }, errorText(err)));
    return;
  }
  if (task.status === "in_progress" && task.phase === "chat") return showChat(task);
  if (task.status === "in_progress" && task.phase === "questionnaire") return showQuestionnaire(task);
  if (task.status === "available") return showTaskIntro(task);
  render(task.title, backLink(), h("h1", `${task.id} · ${task.title}`),
    h("p.notice.info#task-state", taskStateText(task)));
}

function backLink() {
  return h("p.back", h("a", { href: "#/tasks" }, t("task.back")));
}

function instructionsBlock(task, open = true) {
  return h("details.card.instructions", { open },
    h("summary", t("task.instructions")),
    h("div", paragraphs(task.instructions || "")));
}

function showTaskIntro(task) {
  const error = noticeBox();
  const startButton = h("button.start-task", {
    type: "button",
    onclick: async () => {
      startButton.disabled = true;
      try {
        await startWithRetries(task.id, error);
        await showTask(task.id);
      } catch (err) {
        error.textContent = startErrorText(err);
        startButton.disabled = false;
      }
    },
  }, t("tasks.start"));
  render(task.title, backLink(), h("h1", `${task.id} · ${task.title}`), instructionsBlock(task), error,
    h("div.actions", startButton));
}

function draftKey(taskId) {
  return `memorylab.draft.${state.user.id}.${taskId}`;
}

function showChat(task) {
  const taskPath = `/api/tasks/${encodeURIComponent(task.id)}`;
  const limit = state.study?.limits?.max_message_chars || 4000;
  let sync = { at: performance.now(), timer: task.timer };
  let sending = false;
  let ended = false;
  let checking = false;

  const timeValue = h("strong#time-left", { "aria-hidden": "true" });
  const timeLabel = h("span.visually-hidden#time-left-label");
  const finishButton = h("button#finish", { type: "button", disabled: true }, t("task.finish"));
  const finishHint = h("p.hint.finish-hint");
  const belowMinimum = h("p.notice.info#finish-below-minimum", { hidden: true });
  const confirmBox = h("div.confirm-finish", { hidden: true },
    h("p", t("task.finish_confirm")),
    belowMinimum,
    h("div.actions",
      h("button#finish-confirm", { type: "button", onclick: () => finish() }, t("task.finish_yes")),
      h("button.secondary", { type: "button", onclick: () => { confirmBox.hidden = true; finishButton.focus(); } },
        t("task.cancel"))));
  const statusError = noticeBox();
  const log = h("div.chat-log#chat-log", { role: "log", "aria-live": "polite", "aria-label": t("task.chat_label") });
  const newMessages = h("button.small.new-messages#new-messages", { type: "button", hidden: true }, t("task.new_messages"));
  const input = h("textarea#message-input", {
    rows: 3, placeholder: t("task.input_placeholder"), "aria-describedby": "message-counter",
  });
  const counter = h("span.counter#message-counter", { "aria-live": "off" });
  const sendButton = h("button#send", { type: "submit" }, t("task.send"));
  const composerError = noticeBox();
  const composer = h("form.composer", { novalidate: true },
    newMessages,
    h("label.visually-hidden", { for: "message-input" }, t("task.input_label")),
    input,
    composerError,
    h("div.composer-row", counter, sendButton));

  const byId = new Map();
  const answered = new Set();

  // Data-quality signals sent with each message (codebook: messages.csv), counted since the last send.
  // Text reaches the box by key presses, an input method's compositions (pinyin), a paste, or with no key at
  // all (dictation, autocomplete): each is counted, and the source of most characters is the input kind.
  const quality = {
    firstKeyAt: null, keystrokes: 0, pasted: 0, focusLosses: 0, inputEvents: 0, compositions: 0,
    keyPending: false, chars: { typed: 0, composed: 0, pasted: 0, dictated: 0 },
  };
  const capped = (value, cap) => Math.max(0, Math.min(Math.round(value), cap));
  const began = () => { if (quality.firstKeyAt === null) quality.firstKeyAt = performance.now(); };
  function inputKind() {
    const entries = Object.entries(quality.chars).filter(([, count]) => count > 0);
    if (!entries.length) return "unknown";  // no input seen: a restored draft, or text set by other means
    return entries.reduce((best, entry) => (entry[1] > best[1] ? entry : best))[0];
  }
  function qualitySignals() {
    return {
      typing_ms: capped(quality.firstKeyAt === null ? 0 : performance.now() - quality.firstKeyAt, 86_400_000),
      keystrokes: capped(quality.keystrokes, 200_000),
      pasted_chars: capped(quality.pasted, 1_000_000),
      focus_losses: capped(quality.focusLosses, 10_000),
      input_events: capped(quality.inputEvents, 200_000),
      composition_events: capped(quality.compositions, 200_000),
      input_kind: inputKind(),
    };
  }
  function resetQuality() {
    Object.assign(quality, {
      firstKeyAt: null, keystrokes: 0, pasted: 0, focusLosses: 0, inputEvents: 0, compositions: 0,
      keyPending: false, chars: { typed: 0, composed: 0, pasted: 0, dictated: 0 },
    });
  }
  input.addEventListener("keydown", (event) => {
    began();
    quality.keystrokes += 1;
    // a key an input method takes (keyCode 229) composes; the characters come at compositionend
    quality.keyPending = !event.isComposing && event.keyCode !== 229 && event.key?.length === 1;
  });
  input.addEventListener("compositionstart", began);
  input.addEventListener("compositionend", (event) => {
    began();
    quality.compositions += 1;
    quality.chars.composed += [...(event.data || "")].length;
  });
  input.addEventListener("input", (event) => {
    began();
    quality.inputEvents += 1;
    const type = event.inputType || "";
    const inserted = [...(event.data || "")].length;
    if (event.isComposing || type === "insertCompositionText" || type.startsWith("insertFromPaste")) {
      // counted at compositionend, or by the paste handler
    } else if (type === "insertFromDrop") {
      quality.chars.pasted += inserted;
    } else if (type.startsWith("insert") && inserted) {
      // characters after a key press were typed; characters with no key press before them were dictated,
      // autocompleted or chosen from a suggestion
      quality.chars[quality.keyPending ? "typed" : "dictated"] += inserted;
    }
    quality.keyPending = false;
  });
  input.addEventListener("paste", (event) => {
    began();
    const pasted = (event.clipboardData?.getData("text") || "").length;
    quality.pasted += pasted;
    quality.chars.pasted += pasted;
  });
  const onBlur = () => { quality.focusLosses += 1; };
  window.addEventListener("blur", onBlur);

  function bubble(message) {
    const mine = message.role === "user";
    return h(`div.msg.${mine ? "user" : "assistant"}`, { dataset: { id: String(message.id ?? "") } },
      h("span.msg-who", mine ? t("task.you") : t("task.assistant")),
      h("div.msg-text", message.content));
  }

  const textOf = (el) => el.querySelector(".msg-text");

  // The page scrolls (one scroller, phone-friendly); the newest message is kept in view above the sticky
  // composer only while the participant is at the end. Reading back, nothing moves: a button says more came.
  function atEnd() {
    const page = document.scrollingElement;
    return page.scrollTop + window.innerHeight >= page.scrollHeight - FOLLOW_SLACK_PX;
  }

  function revealNewest() {
    const page = document.scrollingElement;
    page.scrollTop = page.scrollHeight;
    newMessages.hidden = true;
  }

  // Change the log, then follow it if the participant was at the end before the change.
  function grow(change) {
    const following = atEnd();
    const result = change();
    if (following) revealNewest();
    else newMessages.hidden = false;
    return result;
  }

  newMessages.addEventListener("click", () => { revealNewest(); input.focus({ preventScroll: true }); });
  const onScroll = () => { if (!newMessages.hidden && atEnd()) newMessages.hidden = true; };
  window.addEventListener("scroll", onScroll, { passive: true });

  function addMessage(message) {
    log.querySelector(".chat-empty")?.remove();
    const el = bubble(message);
    log.append(el);
    if (message.id) byId.set(message.id, el);
    if (message.reply_to_id) answered.add(message.reply_to_id);
    return el;
  }

  function pendingReply() {
    const el = bubble({ role: "assistant", content: "" });
    el.classList.add("pending");
    textOf(el).append(h("span.typing", t("task.thinking")));
    grow(() => log.append(el));
    return el;
  }

  // The conversation as the server holds it (what the model sees), replacing what this page shows.
  function renderTranscript(messages) {
    byId.clear();
    answered.clear();
    log.replaceChildren();
    if (!messages.length) log.append(h("p.chat-empty.muted", t("task.empty_chat")));
    messages.forEach(addMessage);
    messages.filter((m) => m.role === "user" && !answered.has(m.id)).forEach((m) => markFailed(m.id, false));
  }

  const shownIds = () => [...byId.keys()].sort((a, b) => a - b).join(",");

  // A stored message whose reply failed. When the server said when to ask again (back-pressure: a 503's
  // Retry-After, an error event's retry_after_seconds), the page asks by itself, AUTO_RETRIES times;
  // the retry button stays for the participant, and the server answers a message left unanswered a
  // minute later on its own (the heartbeat then shows the reply).
  const AUTO_RETRIES = 3;
  const autoRetried = new Map();  // message id -> automatic retries so far

  function markFailed(messageId, follow = true, retryAfter = null) {
    const el = byId.get(messageId);
    if (!el || el.querySelector(".msg-failed")) return;
    el.classList.add("failed");
    const retry = h("button.small.secondary.retry", { type: "button", onclick: () => retryReply(messageId, el) }, t("task.retry"));
    const seconds = Number(retryAfter);
    const auto = seconds > 0 && (autoRetried.get(messageId) ?? 0) < AUTO_RETRIES;
    const text = auto ? t("task.reply_retrying", { seconds: Math.ceil(seconds) }) : t("task.reply_failed");
    const notice = h("div.msg-failed", { role: "alert" }, h("span", text), " ", retry);
    if (follow) grow(() => el.append(notice));
    else el.append(notice);
    if (auto) {
      autoRetried.set(messageId, (autoRetried.get(messageId) ?? 0) + 1);
      setTimeout(() => autoRetry(messageId, el), seconds * 1000);
    }
  }

  function autoRetry(messageId, el) {
    if (ended || answered.has(messageId) || !el.isConnected || !el.querySelector(".msg-failed")) return;
    if (sending) { setTimeout(() => autoRetry(messageId, el), 1000); return; }  // after the message being sent
    retryReply(messageId, el);
  }

  function clearFailed(el) {
    el.classList.remove("failed");
    el.querySelector(".msg-failed")?.remove();
  }

  // Reads the reply stream into a pending bubble. Resolves to true when a reply was stored.
  async function streamReply(path, body, onStored) {
    let replyEl = null;
    let storedId = null;
    let gotReply = false;
    const ensureReply = () => { replyEl = replyEl || pendingReply(); return replyEl; };
    // Screen readers announce the finished reply once instead of every streamed fragment.
    log.setAttribute("aria-busy", "true");
    try {
      await postStream(path, body, (name, data) => {
        if (name === "message") {
          storedId = data.id;
          onStored(data);
          ensureReply();
        } else if (name === "delta") {
          const el = ensureReply();
          grow(() => {
            if (el.classList.contains("pending")) { el.classList.remove("pending"); textOf(el).textContent = ""; }
            textOf(el).append(data.text);
          });
        } else if (name === "reset") {
          const el = ensureReply();
          textOf(el).textContent = "";
        } else if (name === "reply") {
          const el = ensureReply();
          grow(() => {
            el.classList.remove("pending");
            textOf(el).textContent = data.content;
          });
          el.dataset.id = String(data.id);
          byId.set(data.id, el);
          answered.add(data.reply_to_id);
          gotReply = true;
        } else if (name === "error") {
          replyEl?.remove();
          replyEl = null;
          markFailed(data.message_id ?? storedId, true, data.retryable ? data.retry_after_seconds : null);
        }
      });
    } catch (err) {
      replyEl?.remove();
      if (storedId !== null) {  // the stream was cut after the message was stored: ask again shortly
        markFailed(storedId, true, err.status === 503 ? err.details?.retry_after_seconds : 2);
        return false;
      }
      throw err;
    } finally {
      log.removeAttribute("aria-busy");
    }
    if (!gotReply && storedId !== null && replyEl) {
      replyEl.remove();
      markFailed(storedId);
    }
    return gotReply;
  }

  let pendingSend = null;

  function idempotencyKey() {
    if (window.crypto?.randomUUID) return window.crypto.randomUUID();
    const bytes = window.crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  async function send() {
    if (sending || ended) return;
    composerError.textContent = "";
    const content = input.value;
    if (!content.trim()) {
      composerError.textContent = t("task.empty_message");
      input.focus();
      return;
    }
    if (content.length > limit) {
      composerError.textContent = t("task.too_long", { limit });
      input.focus();
      return;
    }
    sending = true;
    sendButton.disabled = true;
    sendButton.textContent = t("task.sending");
    // One idempotency key per message, reused when the same text is sent again (a retry after a
    // lost answer), so the server stores it once.
    if (!pendingSend || pendingSend.content !== content) pendingSend = { content, key: idempotencyKey() };
    const idempotency_key = pendingSend.key;
    try {
      await postWhileBusy(() => streamReply(`${taskPath}/messages`, { content, idempotency_key, ...qualitySignals() }, (stored) => {
        // Only now is the text safe on the server: clear the box and the saved draft.
        pendingSend = null;
        resetQuality();
        if (input.value === content) input.value = "";
        sessionStorage.removeItem(draftKey(task.id));
        composerError.textContent = "";
        updateCounter();
        addMessage(stored);
        revealNewest();  // the participant's own message: always in view
      }));
    } catch (err) {
      if (err.code === "time_up" || err.code === "task_phase_questionnaire") {
        chatEnded();
        return;
      }
      if (err.status === 503 && err.details?.message_id) {
        resetQuality();
        // The message is stored even though no reply came: show it, offer a retry.
        input.value = "";
        sessionStorage.removeItem(draftKey(task.id));
        addMessage({ id: err.details.message_id, role: "user", content: content.trim() });
        markFailed(err.details.message_id, true, err.details.retry_after_seconds);
        revealNewest();
      } else if (err.code === "database_busy") {
        composerError.textContent = t("task.db_busy_gave_up");
      } else if (err.code === "message_too_long") {
        composerError.textContent = t("task.too_long", { limit: err.details?.limit ?? limit });
      } else if (err.code === "empty_message") {
        composerError.textContent = t("task.empty_message");
      } else {
        composerError.textContent = errorText(err);
      }
    } finally {
      sending = false;
      sendButton.disabled = ended;
      sendButton.textContent = t("task.send");
      if (!ended) {
        input.focus();
        refreshTimer();
      }
    }
  }

  // A busy or read-only database answers 503 "database_busy": nothing was stored, so the same
  // request is sent again after the server's Retry-After, a few times, with the text left in the box.
  function postWhileBusy(post, attempts = 4) {
    return waitOutRefusals(post, {
      attempts,
      refusedForNow: (err) => err.code === "database_busy" && !ended,
      onWait: (attempt) => { composerError.textContent = t("task.db_busy_retrying", { attempt }); },
    });
  }

  async function retryReply(messageId, el) {
    if (sending || ended) return;
    sending = true;
    sendButton.disabled = true;
    clearFailed(el);
    try {
      await streamReply(`${taskPath}/messages/${messageId}/reply`, {}, () => {});
    } catch (err) {
      if (err.code === "time_up" || err.code === "task_phase_questionnaire") {
        chatEnded();
        return;
      }
      if (err.code === "already_answered") {
        showTask(task.id);
        return;
      }
      markFailed(messageId, true, err.status === 503 ? err.details?.retry_after_seconds : null);
      composerError.textContent = errorText(err);
    } finally {
      sending = false;
      sendButton.disabled = ended;
    }
  }

  function estimate() {
    const timer = sync.timer || {};
    const elapsed = (performance.now() - sync.at) / 1000;
    const remaining = Math.max(0, (timer.remaining_real_seconds ?? 0) - elapsed);
    // real seconds per study second: the server's (pilot mode compresses time)
    const scale = timer.timer_scale
      ?? (timer.remaining_seconds > 0 ? timer.remaining_real_seconds / timer.remaining_seconds : 1);
    const active = (timer.active_seconds ?? 0) + (scale > 0 ? elapsed / scale : 0);
    const canFinish = Boolean(timer.can_finish) || active >= (timer.min_active_seconds ?? 0);
    return { remaining, canFinish, scale, active };
  }

  // what is left of the minimum chat time, on the wall clock, counting down (the same number in both languages:
  // the server's timer scale, not a ratio of rounded figures)
  function minimumHint() {
    const timer = sync.timer || {};
    const { scale, active } = estimate();
    const left = Math.max(0, ((timer.min_active_seconds ?? 0) - active) * scale);
    return left >= 120
      ? t("task.min_hint", { minutes: Math.ceil(left / 60) })
      : t("task.min_hint_seconds", { seconds: Math.ceil(left) });
  }

  function tick() {
    if (ended) return;
    const { remaining, canFinish } = estimate();
    timeValue.textContent = formatDuration(remaining);
    timeLabel.textContent = t("task.remaining_label", { time: formatDuration(remaining) });
    finishButton.disabled = !canFinish;
    finishHint.hidden = canFinish;
    if (!canFinish) finishHint.textContent = minimumHint();
    if (remaining <= 0 && !checking) heartbeat();
  }

  function applyTask(status) {
    if (status.status === "in_progress" && status.phase === "chat" && status.timer) {
      sync = { at: performance.now(), timer: status.timer };
      tick();
    } else {
      chatEnded();
    }
  }

  async function heartbeat() {
    if (ended || checking) return;
    checking = true;
    let missed = false;
    try {
      const data = await api.post(`${taskPath}/heartbeat`);
      applyTask(data.task);
      missed = data.last_message_id != null && !byId.has(data.last_message_id);
    } catch (err) {
      if (err.status === 409) chatEnded();
      else if (err.status === 401) signedOut();
    } finally {
      checking = false;
    }
    if (missed) resync();
  }

  // Another tab (or a reply this page lost) changed the conversation: show the one the server holds.
  let resyncing = false;
  async function resync() {
    if (ended || sending || resyncing) return;
    resyncing = true;
    try {
      const fresh = (await api.get(taskPath)).task;
      if (ended || sending) return;
      if (fresh.status !== "in_progress" || fresh.phase !== "chat") {
        chatEnded(Boolean(fresh.timer?.time_up));
        return;
      }
      applyTask(fresh);
      const messages = fresh.messages || [];
      if (messages.map((m) => m.id).join(",") !== shownIds()) grow(() => renderTranscript(messages));
    } catch (err) {
      if (err.status === 401) signedOut();
    } finally {
      resyncing = false;
    }
  }

  async function refreshTimer() {
    try {
      const data = await api.get("/api/tasks");
      const status = (data.tasks || []).find((entry) => entry.id === task.id);
      if (status && !ended) applyTask(status);
    } catch {
      // the next heartbeat resynchronises
    }
  }

  async function finish() {
    finishButton.disabled = true;
    statusError.textContent = "";
    try {
      const data = await api.post(`${taskPath}/finish`);
      if (data.task.status === "in_progress" && data.task.phase === "chat") applyTask(data.task);
      else chatEnded(false);
    } catch (err) {
      confirmBox.hidden = true;
      if (err.code === "too_early") {
        statusError.textContent = t("task.too_early");
        if (err.details?.timer) applyTask({ status: "in_progress", phase: "chat", timer: err.details.timer });
      } else if (err.status === 409) {
        chatEnded();
      } else {
        statusError.textContent = errorText(err);
        tick();
      }
    }
  }

  function chatEnded(timeUp = true) {
    if (ended) return;
    ended = true;
    stop();
    if (timeUp) state.flash = { kind: "info", text: t("task.time_up") };
    showTask(task.id).then(focusMain);
  }

  function updateCounter() {
    counter.textContent = t("task.chars", { count: input.value.length, limit });
    counter.classList.toggle("over", input.value.length > limit);
  }

  finishButton.addEventListener("click", () => {
    // below the study's minimum of messages the task ends incomplete: say so before it happens
    const sent = log.querySelectorAll(".msg.user").length;
    belowMinimum.hidden = sent >= (task.min_messages ?? 0);
    // the default study has no completion codes: say what happens without promising one
    belowMinimum.textContent = t(task.completion_code_offered ? "task.finish_below_minimum" : "task.finish_below_minimum_no_code",
      { count: sent, min: task.min_messages });
    confirmBox.hidden = false;
    confirmBox.querySelector("#finish-confirm").focus();
  });
  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    // Enter sends; Shift+Enter breaks the line; Enter that confirms an IME candidate does neither.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      send();
    }
  });
  input.addEventListener("input", () => {
    sessionStorage.setItem(draftKey(task.id), input.value);
    updateCounter();
  });

  const onVisibility = () => { if (document.visibilityState === "visible") { heartbeat(); resync(); } };
  document.addEventListener("visibilitychange", onVisibility);
  const onFocus = () => resync();
  window.addEventListener("focus", onFocus);
  const ticker = window.setInterval(tick, TICK_MS);
  const beat = window.setInterval(() => { if (document.visibilityState === "visible") heartbeat(); }, HEARTBEAT_MS);
  function stop() {
    window.clearInterval(ticker);
    window.clearInterval(beat);
    document.removeEventListener("visibilitychange", onVisibility);
    window.removeEventListener("blur", onBlur);
    window.removeEventListener("focus", onFocus);
    window.removeEventListener("scroll", onScroll);
  }
  state.cleanup = () => { ended = true; stop(); };

  render(task.title,
    backLink(),
    h("h1", `${task.id} · ${task.title}`),
    takeFlash(),
    instructionsBlock(task, !(task.messages || []).length),
    h("div.chat-status.card",
      h("p.timer", { role: "timer" }, h("span", { "aria-hidden": "true" }, `${t("task.remaining")} `), timeValue, timeLabel),
      h("div.finish-area", finishButton, finishHint),
      confirmBox),
    statusError,
    log,
    composer);

  const messages = task.messages || [];
  renderTranscript(messages);
  input.value = sessionStorage.getItem(draftKey(task.id)) || "";
  updateCounter();
  finishHint.textContent = minimumHint();
  tick();
  window.setTimeout(() => {
    if (messages.length) revealNewest();  // a resumed chat opens at its newest message
    input.focus({ preventScroll: true });
  }, 0);
}

async function showQuestionnaire(task) {
  render(task.title, h("p.loading", t("app.loading")));
  let data;
  try {
    data = await api.get(`/api/tasks/${encodeURIComponent(task.id)}/questionnaire`);
  } catch (err) {
    mount(main, backLink(), h("p.notice.error", { role: "alert" }, errorText(err)));
    return;
  }
  const questionnaire = buildQuestionnaire(data.items || []);
  const error = noticeBox();
  const submit = h("button#questionnaire-submit", { type: "submit" }, t("q.submit"));
  questionnaire.form.append(error, h("div.actions", submit));
  questionnaire.form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    submit.disabled = true;
    try {
      await api.post(`/api/tasks/${encodeURIComponent(task.id)}/questionnaire`, { answers: questionnaire.answers() });
      sessionStorage.removeItem(draftKey(task.id));
      state.flash = { kind: "ok", text: t("tasks.thanks") };
      go(`#/done/${encodeURIComponent(task.id)}`);
    } catch (err) {
      if (err.code === "invalid_answers" && err.details?.items) {
        const count = questionnaire.showErrors(err.details.items);
        error.textContent = t("q.fix_errors", { count });
      } else {
        error.textContent = errorText(err);
      }
    } finally {
      submit.disabled = false;
    }
  });
  render(t("q.title", { task: task.title }),
    h("h1", t("q.title", { task: `${task.id} · ${task.title}` })),
    takeFlash(),
    h("p.muted", t("q.intro")),
    questionnaire.form);
}

// -- after a task: completion code, personal return link, next unlock ------------------------------

function completionBlock(completion, codeOffered = true) {
  if (!completion) return null;
  return [
    completion.incomplete
      ? h("p.notice.info#incomplete-notice", t(codeOffered ? "done.incomplete" : "done.incomplete_no_code")) : null,
    completion.completion_code ? h("p.completion", t("done.code"), " ", h("strong#completion-code", completion.completion_code)) : null,
    completion.completion_code ? h("p.hint", t("done.code_hint")) : null,
    completion.redirect_url ? h("p.actions", h("a.button#panel-redirect", { href: completion.redirect_url }, t("done.redirect"))) : null,
  ];
}

function nextTaskBlock(link) {
  const next = link.next_task;
  if (!next) return h("p.notice.ok", t("done.all_done"));
  const name = `${next.id} · ${next.title}`;
  if (next.status === "available" || next.status === "in_progress") return h("p.notice.info#next-task", t("done.next_available", { task: name }));
  if (!next.available_at) return null;
  return h("div.next-task",
    h("p.notice.info#next-task", t("done.next_unlock", { task: name, time: formatDateTime(next.available_at) })),
    h("p", h("a#calendar-link", { href: link.calendar_url, download: `${next.id}.ics` }, t("done.calendar"))));
}

function returnLinkBlock(link) {
  const box = h("input#return-link", { type: "text", readonly: true, value: link.url, "aria-label": t("done.return_link") });
  const copy = h("button.secondary.small#copy-link", { type: "button" }, t("done.copy"));
  copy.addEventListener("click", async () => {
    box.select();
    try {
      await navigator.clipboard.writeText(link.url);
      copy.textContent = t("done.copied");
    } catch {
      // the text is selected; the participant can copy it by hand
    }
  });
  return h("div.return-link", h("p", t("done.return_link")), h("div.composer-row", box, copy));
}

function contactForm() {
  if (!state.study?.contacts_enabled) return null;
  const address = h("input#contact-email", { type: "email", autocomplete: "email", maxlength: 254 });
  const status = noticeBox("info");
  const form = h("form.contact-form", { novalidate: true },
    field("contact-email", t("done.contact_label"), address),
    status,
    h("div.actions", h("button.secondary#contact-save", { type: "submit" }, t("done.contact_save"))));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api.post("/api/me/contact", { channel: "email", value: address.value });
      status.textContent = t("done.contact_saved");
    } catch (err) {
      status.textContent = errorText(err);
    }
  });
  return form;
}

async function showDone(taskId) {
  render(taskId, h("p.loading", t("app.loading")));
  let task;
  let link = null;
  try {
    task = (await api.get(`/api/tasks/${encodeURIComponent(taskId)}`)).task;
    if (task.status === "done") link = await api.get("/api/me/return-link");
  } catch (err) {
    if (err.status === 401) return signedOut();
    if (!task) return go("#/tasks");
  }
  if (task.status !== "done") return go("#/tasks");
  render(t("done.title", { task: task.title }),
    h("section.card.done",
      h("h1", t("done.title", { task: `${task.id} · ${task.title}` })),
      takeFlash(),
      completionBlock(task.completion, task.completion_code_offered),
      link ? nextTaskBlock(link) : null,
      link ? returnLinkBlock(link) : null,
      contactForm()),
    link && !link.next_task ? await finalDebrief() : null,
    h("p.back", h("a#back-to-tasks", { href: "#/tasks" }, t("done.back"))));
}

// -- participant rights: contact, consent copy, withdrawal, debrief ----------------------------------

function contactBlock() {
  const contact = localised(state.study?.consent?.contact);
  if (!contact) return null;
  return h("div.lab-contact#lab-contact", h("h2", t("rights.contact_title")), paragraphs(contact));
}

function rightsBlock(withdrawn) {
  return h("section.card.rights#rights",
    h("h2", t("rights.title")),
    h("ul.rights-links",
      h("li", h("a#consent-copy-link", { href: `/consent/copy?lang=${language()}` }, t("rights.consent_copy"))),
      withdrawn ? null : h("li", h("a#withdraw-link", { href: "#/withdraw" }, t("rights.withdraw_link")))),
    contactBlock());
}

function taskStateText(task) {
  if (task.status === "done") return t("task.done");
  return task.participant_status === "withdrawn" ? t("task.withdrawn") : t("task.not_available");
}

function startErrorText(err) {
  return err.code === "withdrawn" ? t("task.withdrawn") : errorText(err);
}

// Back-pressure: `post` is sent again after the server's Retry-After (`retry_after_seconds`, else 2 s)
// while `refusedForNow(err)` holds, `attempts` times in all; `onWait(attempt, seconds)` runs before each
// wait and `afterWait()` after it. The last refusal is thrown to the caller.
async function waitOutRefusals(post, { attempts, refusedForNow, onWait, afterWait = () => {} }) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await post();
    } catch (err) {
      if (!refusedForNow(err) || attempt >= attempts) throw err;
      const seconds = Number(err.details?.retry_after_seconds) || 2;
      onWait(attempt, seconds);
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      afterWait();
    }
  }
}

// Opening a task is safe to repeat (it resumes the open attempt). When the server is too busy to open it
// (a 503 with Retry-After: a whole class starting at once), the page waits what the server says and asks
// again, a few times, saying so, before it shows the error.
function startWithRetries(taskId, notice, attempts = 4) {
  return waitOutRefusals(() => api.post(`/api/tasks/${encodeURIComponent(taskId)}/start`), {
    attempts,
    refusedForNow: (err) => err.status === 503,
    onWait: (_attempt, seconds) => { notice.textContent = t("tasks.start_busy_retrying", { seconds: Math.ceil(seconds) }); },
    afterWait: () => { notice.textContent = ""; },
  });
}

function showWithdraw() {
  const allowErase = Boolean(state.study?.consent?.erasure_on_withdrawal);
  const error = noticeBox();
  const option = (value, text) => h("label.choice-option", { for: `withdraw-${value}` },
    h("input", { type: "radio", name: "withdraw-mode", id: `withdraw-${value}`, value }), h("span", text));
  const selected = () => main.querySelector("input[name=withdraw-mode]:checked")?.value;
  const continueButton = h("button#withdraw-continue", { type: "button" }, t("withdraw.continue"));
  const confirmText = h("p#withdraw-confirm-text");
  const confirmButton = h("button.danger#withdraw-confirm", { type: "button" });
  const cancelButton = h("button.secondary#withdraw-cancel", { type: "button" }, t("withdraw.cancel"));
  const confirmBox = h("div.confirm-finish#withdraw-confirm-box", { hidden: true, role: "group" },
    confirmText, h("div.actions", confirmButton, cancelButton));
  continueButton.addEventListener("click", () => {
    const mode = selected();
    if (!mode) {
      error.textContent = t("withdraw.choose");
      return;
    }
    error.textContent = "";
    confirmText.textContent = mode === "erase" ? t("withdraw.confirm_erase") : t("withdraw.confirm_keep");
    confirmButton.textContent = mode === "erase" ? t("withdraw.confirm_and_erase") : t("withdraw.confirm");
    confirmBox.hidden = false;
    continueButton.hidden = true;
    confirmButton.focus();
  });
  cancelButton.addEventListener("click", () => go("#/tasks"));
  confirmButton.addEventListener("click", async () => {
    const erase = selected() === "erase";
    confirmButton.disabled = true;
    try {
      const data = await api.post("/api/me/withdraw", { confirm: true, erase });
      if (data.erased) {
        forgetCsrfToken();
        state.user = null;
        state.farewell = data.debrief;
        state.flash = { kind: "ok", text: t("withdraw.erased") };
      } else {
        state.user = { ...state.user, status: "withdrawn" };
        state.flash = { kind: "ok", text: t("withdraw.done") };
      }
      go("#/debrief");
    } catch (err) {
      error.textContent = errorText(err);
      confirmButton.disabled = false;
    }
  });
  render(t("withdraw.title"),
    backLink(),
    h("section.card.narrow.withdraw",
      h("h1", t("withdraw.title")),
      h("p", t("withdraw.intro")),
      h("fieldset.withdraw-options", h("legend.visually-hidden", t("withdraw.title")),
        option("keep", t("withdraw.keep")),
        allowErase ? option("erase", t("withdraw.erase")) : h("p.hint#erase-unavailable", t("withdraw.erase_unavailable"))),
      error,
      h("div.actions", continueButton),
      confirmBox,
      contactBlock()));
}

function debriefCard(debrief, ...extra) {
  return h("section.card.debrief#debrief",
    h("h1", debrief.title),
    ...extra,
    h("div.debrief-text", paragraphs(debrief.text)),
    debrief.your_assistant
      ? h("div.debrief-group#debrief-group", h("h2", t("debrief.your_assistant")), paragraphs(debrief.your_assistant))
      : null,
    debrief.contact ? h("div.lab-contact", h("h2", t("rights.contact_title")), paragraphs(debrief.contact)) : null,
    h("div.actions.no-print",
      h("button.secondary#debrief-print", { type: "button", onclick: () => window.print() }, t("debrief.print"))));
}

async function finalDebrief() {
  try {
    return debriefCard((await api.get("/api/me/debrief")).debrief);
  } catch (err) {
    return h("p.notice.error", { role: "alert" }, errorText(err));
  }
}

async function showDebrief() {
  render(t("rights.debrief_link"), h("p.loading", t("app.loading")));
  let debrief;
  try {
    debrief = (await api.get("/api/me/debrief")).debrief;
  } catch (err) {
    if (err.status === 401) return signedOut();
    const text = err.code === "debrief_not_yet" ? t("debrief.not_yet") : errorText(err);
    render(t("rights.debrief_link"), backLink(), h("p.notice.info", text));
    return;
  }
  render(debrief.title, backLink(), debriefCard(debrief, takeFlash()));
}

// After withdrawing with erasure the account is closed: the debrief came with the answer and is shown once more.
function showFarewell() {
  render(state.farewell.title, debriefCard(state.farewell, takeFlash(), h("p.hint#farewell-hint", t("debrief.keep_hint"))));
}

// -- start --------------------------------------------------------------------------------------

async function boot() {
  renderHeader();
  try {
    state.study = await api.get("/api/study");
  } catch (err) {
    mount(main, h("p.notice.error", { role: "alert" }, errorText(err)));
    return;
  }
  settleLanguage(state.study.languages, state.study.default_language);
  renderHeader();
  try {
    state.user = (await api.get("/api/auth/me")).user;
  } catch (err) {
    if (err.status !== 401) {
      mount(main, h("p.notice.error", { role: "alert" }, errorText(err)));
      return;
    }
  }
  if (state.user?.role === "admin") {
    goToAdmin();
    return;
  }
  const panelId = panelIdFromUrl();
  if (panelId !== null) {
    // a panel link: the server decides whether this browser may enter as that participant
    state.user = null;
    state.panelId = panelId;
    if (await resumePanel()) return;
  }
  if (state.user) followAccount(state.user);
  reportTimeZone();
  if (new URLSearchParams(location.search).get("next") && !state.user && !location.hash) {
    location.hash = "#/login";  // sent here from a page that needs a log-in (e.g. /admin)
    return;
  }
  await route();
}

boot();
