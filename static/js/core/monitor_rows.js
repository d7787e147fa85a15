// The admin monitor's rows as plain data: which rows the filters keep, their order, the counts above the
// table, the query the poll sends and the columns an admin chose to see (no DOM: node's test runner imports
// this file; admin/monitor_table.js draws what it decides).

export const TASK_ORDER = { withdrawn: -1, erased: -1, locked: 0, available: 1, in_progress: 2, done: 3 };
// Shown unless the admin hides them; the rest start hidden so the monitor fits 1280 px (chosen in "Columns").
export const OPTIONAL_COLUMNS = { username: false, enrolled_at: false, last_active_at: false, questionnaires_done: false,
  provider_failures: true, reminders: true, messages: true };
export const COLUMNS_KEY = "memorylab.admin.columns";
// the statuses the status filter always offers (more come with the server's summary)
export const KNOWN_STATUSES = ["active", "completed", "withdrawn", "erased"];

/** The columns shown, from the admin's stored choice (JSON text, or null): the defaults for what it omits. */
export function shownColumnsFrom(storedText) {
  try {
    const stored = JSON.parse(storedText || "null");
    if (stored && typeof stored === "object") return { ...OPTIONAL_COLUMNS, ...stored };
  } catch {
    // a broken stored choice falls back to the defaults
  }
  return { ...OPTIONAL_COLUMNS };
}

export function sortValue(column, row) {
  if (column.sortValue) return column.sortValue(row);
  return row[column.key];
}

/** Missing values sort last; numbers by value; text by the locale with numeric runs, or char by char (`plain`). */
export function compare(a, b, plain = false) {
  if (a === b) return 0;
  if (a === null || a === undefined) return 1;
  if (b === null || b === undefined) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (plain) return String(a) < String(b) ? -1 : 1;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

export function visibleRows(rows, filters) {
  const { group, status, overdue, pasted, failedChecks, implausible, search } = filters;
  const needle = search.trim().toLowerCase();
  // The server filters too; doing it here as well keeps the table right while a poll is in flight.
  return rows.filter((r) => (!group || r.memory_group === group)
    && (!status || r.status === status)
    && (!overdue || r.overdue)
    && (!pasted || r.pasted_messages > 0)
    && (!failedChecks || r.attention_failures > 0)
    && (!implausible || r.implausible_typing_messages > 0)
    && (!needle || `${r.participant_code} ${r.username}`.toLowerCase().includes(needle)));
}

/** `rows` by the column `sort.key` (`sort.dir` 1 or -1), ties by participant id. */
export function sortedRows(rows, columns, sort) {
  const column = columns.find((c) => c.key === sort.key);
  const sorted = [...rows];
  sorted.sort((x, y) => {
    const primary = column ? compare(sortValue(column, x), sortValue(column, y), column.plain) : compare(x.id, y.id);
    return primary * sort.dir || compare(x.id, y.id);
  });
  return sorted;
}

export function summaryFrom(rows, summary, taskIds) {
  // Older servers sent no summary: count from the rows instead.
  if (summary?.groups && summary?.funnel) return summary;
  const groups = {};
  const funnel = { registered: rows.length };
  taskIds.forEach((id) => { funnel[id] = 0; });
  for (const row of rows) {
    groups[row.memory_group || "–"] = (groups[row.memory_group || "–"] || 0) + 1;
    taskIds.forEach((id) => { if (row.tasks?.[id] === "done") funnel[id] += 1; });
  }
  return { groups, funnel };
}

/** The poll's query string for the filters the server applies (the search stays on the page). */
export function monitorQuery(filters) {
  const params = new URLSearchParams();
  if (filters.group) params.set("group", filters.group);
  if (filters.status) params.set("status", filters.status);
  if (filters.overdue) params.set("overdue", "1");
  if (filters.pasted) params.set("pasted", "1");
  if (filters.failedChecks) params.set("failed_checks", "1");
  if (filters.implausible) params.set("implausible_typing", "1");
  return params.toString();
}

/** What the group and status filters offer: the groups counted or seen (assigned ones), every status known. */
export function filterChoices(summary, rows) {
  const groups = [...new Set([...Object.keys(summary.groups || {}), ...rows.map((r) => r.memory_group)])]
    .filter((g) => g && g !== "–" && g !== "unassigned").sort();
  const statuses = [...new Set([...KNOWN_STATUSES, ...Object.keys(summary.statuses || {})])];
  return { groups, statuses };
}
