// The participant page: consent -> register (or log in) -> task list -> timed chat -> questionnaire.
// Everything goes through the JSON API; the server decides what is allowed and keeps the timer.
// Nothing here knows or shows the memory condition (the API never sends it to a participant).

import { api, forgetCsrfToken } from "./api.js";
import { h, mount } from "./dom.js";
import {
  adoptLanguage, applyDocumentLanguage, chosenOnThisPage, formatDateTime, labelLanguageButton, language,
  onLanguageChange, otherLanguage, setLanguage, settleLanguage, t,
} from "./i18n.js";
import { apiErrorText } from "./error_texts.js";
import { buildQuestionnaire } from "./questionnaire.js";
import { startChat } from "./chat/chat.js";
import { accountLanguage, localised as inLanguage } from "./core/language.js";
import { waitOutRefusals } from "./core/sending.js";
import { TASK_LIST_POLL_MS, UNLOCK_RECHECK_MS, nextTaskListCheck, opensSoon } from "./core/timing.js";

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
  return inLanguage(value, language());
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
  labelLanguageButton(languageButton);
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

// The page's own choice of language goes to the account, else the page follows the account's (core/language.js).
function followAccount(user) {
  const choice = accountLanguage(chosenOnThisPage(), user);
  if (choice.store) {
    api.post("/api/auth/language", { language: choice.store })
      .then((data) => { if (state.user) state.user = data.user; })
      .catch(() => {});  // the page stays in the chosen language; the account learns it at the next switch
  } else if (choice.adopt) {
    adoptLanguage(choice.adopt);
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

// The timed chat lives in chat/; it borrows the page's pieces, and the page keeps the routing and the flash.
function showChat(task) {
  state.cleanup = startChat(task, {
    limit: state.study?.limits?.max_message_chars || 4000,
    draftKey: draftKey(task.id),
    render,
    header: [backLink(), h("h1", `${task.id} · ${task.title}`), takeFlash(), instructionsBlock(task, !(task.messages || []).length)],
    noticeBox,
    errorText,
    onEnded: (timeUp) => {
      if (timeUp) state.flash = { kind: "info", text: t("task.time_up") };
      showTask(task.id).then(focusMain);
    },
    reopen: () => showTask(task.id),
    signedOut,
  });
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
