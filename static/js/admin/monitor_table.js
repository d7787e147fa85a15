// The monitor's participant table: its columns (the optional ones as the admin chose), sortable headers,
// and one row per participant the filters keep (core/monitor_rows.js decides which, and their order).

import { h, mount } from "../dom.js";
import { formatShort, t } from "../i18n.js";
import { fmt } from "../core/format.js";
import { TASK_ORDER, sortedRows, visibleRows } from "../core/monitor_rows.js";
import { consolidationCell, qualityCell, remindersCell, statusCell, taskCell } from "./cells.js";

function columns(view, taskIds) {
  const base = [
    // codes are opaque: sorted character by character, so "P51…" comes before "P5D…" (no numeric runs)
    { key: "participant_code", label: t("admin.col.code"), plain: true,
      cell: (r) => h("a", { href: `#/participant/${r.id}` }, r.participant_code || `#${r.id}`) },
    { key: "username", label: t("admin.col.username"), cell: (r) => r.username },
    { key: "memory_group", label: t("admin.col.group"), cell: (r) => h("span.badge.group", r.memory_group || "–") },
    { key: "status", label: t("admin.col.status"), cell: (r) => statusCell(r) },
    { key: "enrolled_at", label: t("admin.col.enrolled"), cell: (r) => formatShort(r.enrolled_at) },
  ];
  const tasks = taskIds.map((id) => ({
    key: `task:${id}`, label: id, taskId: id,
    sortValue: (r) => TASK_ORDER[r.tasks?.[id]] ?? -1,
    cell: (r) => taskCell(r, id),
  }));
  const rest = [
    { key: "last_active_at", label: t("admin.col.last_active"), cell: (r) => formatShort(r.last_active_at) },
    { key: "messages", label: t("admin.col.messages"), num: true, cell: (r) => fmt(r.messages) },
    { key: "questionnaires_done", label: t("admin.col.questionnaires"), num: true, cell: (r) => fmt(r.questionnaires_done) },
    { key: "consolidation_pending", label: t("admin.col.consolidation"), cell: consolidationCell },
    { key: "provider_failures", label: t("admin.col.failures"), num: true, cell: (r) => fmt(r.provider_failures) },
    { key: "quality", label: t("admin.col.quality"), cell: qualityCell,
      sortValue: (r) => (r.pasted_messages || 0) + (r.attention_failures || 0) },
    { key: "reminders", label: t("admin.col.reminders"), cell: remindersCell,
      sortValue: (r) => (r.reminders || []).length },
  ];
  return [...base, ...tasks, ...rest].filter((column) => view.shownColumns[column.key] !== false);
}

/** The columns an admin may hide or show, with their labels (the column chooser). */
export function optionalColumnLabels() {
  return {
    username: t("admin.col.username"), enrolled_at: t("admin.col.enrolled"), last_active_at: t("admin.col.last_active"),
    messages: t("admin.col.messages"), questionnaires_done: t("admin.col.questionnaires"),
    provider_failures: t("admin.col.failures"), reminders: t("admin.col.reminders"),
  };
}

/**
 * view: the monitor's {sort, filters, shownColumns, lastRows}; taskIds(): the study's tasks;
 * summary(): the last counts (the heading says how many are shown of how many).
 */
export function createMonitorTable({ view, taskIds, summary }) {
  const heading = h("h2#participants-heading");
  const headRow = h("tr");
  const body = h("tbody");
  const tableEl = h("table.data#participants", { "aria-labelledby": "participants-heading" }, h("thead", headRow), body);

  function renderHead() {
    mount(headRow, columns(view, taskIds()).map((column) => {
      const sorted = view.sort.key === column.key;
      return h("th", {
        scope: "col", class: column.num ? "num" : "",
        "aria-sort": sorted ? (view.sort.dir > 0 ? "ascending" : "descending") : "none",
        dataset: { col: column.key },
      }, h("button.sort", {
        type: "button", title: t("admin.sort_by", { column: column.label }),
        onclick: () => {
          view.sort = { key: column.key, dir: sorted ? -view.sort.dir : 1 };
          renderHead();
          renderBody();
        },
      }, column.label));
    }));
  }

  function renderBody() {
    const cols = columns(view, taskIds());
    const rows = sortedRows(visibleRows(view.lastRows, view.filters), cols, view.sort);
    const total = summary()?.funnel?.registered ?? view.lastRows.length;
    heading.textContent = t("admin.participants", { shown: rows.length, total });
    if (!rows.length) {
      mount(body, h("tr.empty-row", h("td", { colspan: cols.length },
        view.lastRows.length || total ? t("admin.no_match") : t("admin.no_participants"))));
      return;
    }
    mount(body, rows.map((row) => h("tr", { dataset: { id: String(row.id), group: row.memory_group || "" }, class: row.status },
      cols.map((column) => h("td", { class: column.num ? "num" : "", dataset: { col: column.key } }, column.cell(row))))));
  }

  return { heading, table: h("div.table-wrap", tableEl), renderHead, renderBody };
}
