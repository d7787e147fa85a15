// The admin monitor (#/monitor): the counts by group and along the tasks, who gets in, and the participant
// table, polled every few seconds. Its parts: admin/monitor_table.js, admin/monitor_filters.js,
// admin/monitor_actions.js; the rows' filtering and order: core/monitor_rows.js.

import { h, mount } from "../dom.js";
import { formatClock, formatDateTime, t } from "../i18n.js";
import { COLUMNS_KEY, monitorQuery, shownColumnsFrom, summaryFrom } from "../core/monitor_rows.js";
import { errorText, noticeBox } from "./common.js";
import { createMonitorActions } from "./monitor_actions.js";
import { createFilters } from "./monitor_filters.js";
import { createMonitorTable } from "./monitor_table.js";

const POLL_MS = 3000;

function loadShownColumns() {
  try {
    return shownColumnsFrom(localStorage.getItem(COLUMNS_KEY));
  } catch {
    return shownColumnsFrom(null);  // storage refused: the defaults
  }
}

// What the admin chose stays while the page is open (the sort and filters) or on this browser (the columns).
const view = {
  sort: { key: "id", dir: 1 },
  filters: { group: "", status: "", overdue: false, pasted: false, failedChecks: false, implausible: false, search: "" },
  shownColumns: loadShownColumns(),
  lastRows: [],
};

function bars(entries, { className = "", total }) {
  const max = Math.max(1, total ?? Math.max(0, ...entries.map(([, n]) => n)));
  return h(`ul.bars${className ? `.${className}` : ""}`, entries.map(([label, n, key]) =>
    h("li", { dataset: { [className === "funnel" ? "funnel" : "group"]: key ?? label } },
      h("span.label", label),
      h("span.bar", { "aria-hidden": "true" }, h("span", { style: { width: `${(100 * n) / max}%` } })),
      h("span.count", String(n)))));
}

// Who gets in: panel entries by outcome, consented-but-never-started accounts, repeated failed logins.
function integrityCard(integrity) {
  if (!integrity) return null;
  const entries = integrity.panel_entries || {};
  const failures = integrity.login_failures || [];
  return h("section.card#integrity", h("h2", t("admin.integrity.title")),
    h("p#integrity-entries", t("admin.integrity.entries", entries)),
    h("p#integrity-never-started", t("admin.integrity.never_started", { count: integrity.consented_never_started ?? 0 })),
    failures.length ? h("div#integrity-login-failures", h("p", t("admin.integrity.login_failures")),
      h("ul", failures.map((f) => h("li", t("admin.integrity.login_failure_row", {
        username: f.username || "–", failures: f.failures, addresses: f.addresses, last: formatDateTime(f.last_at) }))))) : null);
}

/**
 * Draws the monitor into `main` and polls until the function given to `stopWith` is called.
 * page: taskIds() (the study's tasks), load(path) (a GET that asks for a log-in on 401),
 * explainConsolidation(data) (why "consolidate now" ran nothing), stopWith(fn).
 */
export async function showMonitor(main, { taskIds, load, explainConsolidation, stopWith }) {
  const updated = h("span.updated#updated", { "aria-live": "off" });
  const refreshError = noticeBox();
  const summaryArea = h("div.summary-grid#summary");

  let timer = null;
  let stopped = false;
  let inFlight = false;
  let again = false;
  let lastSummary = null;

  const table = createMonitorTable({ view, taskIds, summary: () => lastSummary });
  const actions = createMonitorActions({ explain: explainConsolidation, onDone: () => refresh() });
  const filters = createFilters({
    view,
    onFilter: () => { table.renderBody(); refresh(); },
    onSearch: () => table.renderBody(),
    onColumns: () => { table.renderHead(); table.renderBody(); },
    actions: actions.buttons,
  });

  function renderSummary(summary, integrity) {
    const groupEntries = Object.entries(summary.groups || {});
    const funnel = summary.funnel || {};
    const funnelEntries = [[t("admin.funnel.registered"), funnel.registered ?? 0, "registered"],
      ...taskIds().map((id) => [id, funnel[id] ?? 0, id])];
    mount(summaryArea,
      h("section.card", h("h2", t("admin.groups")), bars(groupEntries, {})),
      h("section.card", h("h2", t("admin.funnel")),
        bars(funnelEntries, { className: "funnel", total: funnel.registered || 1 })),
      integrityCard(integrity));
    filters.offer(summary);
  }

  async function refresh() {
    if (stopped) return;
    if (inFlight) {
      again = true;  // the filters changed mid-poll: fetch once more as soon as this one lands
      return;
    }
    inFlight = true;
    again = false;
    window.clearTimeout(timer);
    try {
      const query = monitorQuery(view.filters);
      const data = await load(`/api/admin/participants${query ? `?${query}` : ""}`);
      if (stopped) return;
      view.lastRows = data.participants || [];
      lastSummary = summaryFrom(view.lastRows, data.summary, taskIds());
      renderSummary(lastSummary, data.integrity);
      table.renderBody();
      refreshError.textContent = "";
      updated.classList.remove("stale");
      updated.textContent = t("admin.updated", { time: formatClock() });
    } catch (err) {
      if (err.status === 401) { stopped = true; return; }
      updated.classList.add("stale");
      refreshError.textContent = t("admin.refresh_failed", { message: errorText(err) });
    } finally {
      inFlight = false;
      if (!stopped) timer = window.setTimeout(refresh, again ? 0 : POLL_MS);
    }
  }

  stopWith(() => { stopped = true; window.clearTimeout(timer); });
  table.renderHead();
  mount(main,
    h("h1", t("admin.nav.monitor"), updated),
    refreshError,
    summaryArea,
    filters.section,
    filters.columnChooser,
    actions.note,
    table.heading,
    table.table);
  await refresh();
}
