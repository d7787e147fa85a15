// The monitor's filters (group, status, flags, search) and its column chooser. A change is kept in the
// monitor's view; the callbacks redraw the table and, for the filters the server applies, poll again.

import { h, mount } from "../dom.js";
import { t } from "../i18n.js";
import { COLUMNS_KEY, filterChoices } from "../core/monitor_rows.js";
import { term } from "./common.js";
import { optionalColumnLabels } from "./monitor_table.js";

function fillSelect(select, values, current, labelOf = (v) => v) {
  const options = [h("option", { value: "" }, t("admin.filter.all")),
    ...values.map((v) => h("option", { value: v }, labelOf(v)))];
  mount(select, options);
  select.value = current;
}

const statusLabel = (v) => term("admin.status", v);

/**
 * view: the monitor's {filters, shownColumns, lastRows}; onFilter(): a filter the server applies changed;
 * onSearch(): the search text changed; onColumns(): a column was shown or hidden; actions: the elements
 * placed after the filters (the monitor's actions).
 */
export function createFilters({ view, onFilter, onSearch, onColumns, actions }) {
  const { filters } = view;
  const groupSelect = h("select#filter-group");
  const statusSelect = h("select#filter-status");
  const overdueBox = h("input#filter-overdue", { type: "checkbox", checked: filters.overdue });
  const pastedBox = h("input#filter-pasted", { type: "checkbox", checked: filters.pasted });
  const failedBox = h("input#filter-failed-checks", { type: "checkbox", checked: filters.failedChecks });
  const implausibleBox = h("input#filter-implausible", { type: "checkbox", checked: filters.implausible });
  const search = h("input#filter-search", { type: "search", value: filters.search, placeholder: t("admin.filter.search") });

  groupSelect.addEventListener("change", () => { filters.group = groupSelect.value; onFilter(); });
  statusSelect.addEventListener("change", () => { filters.status = statusSelect.value; onFilter(); });
  overdueBox.addEventListener("change", () => { filters.overdue = overdueBox.checked; onFilter(); });
  pastedBox.addEventListener("change", () => { filters.pasted = pastedBox.checked; onFilter(); });
  failedBox.addEventListener("change", () => { filters.failedChecks = failedBox.checked; onFilter(); });
  implausibleBox.addEventListener("change", () => { filters.implausible = implausibleBox.checked; onFilter(); });
  search.addEventListener("input", () => { filters.search = search.value; onSearch(); });

  const columnChooser = h("details.column-chooser#column-chooser",
    h("summary", t("admin.columns")),
    h("p.muted", t("admin.columns.hint")),
    h("div.column-options", Object.entries(optionalColumnLabels()).map(([key, text]) => {
      const box = h(`input#column-${key}`, { type: "checkbox", checked: view.shownColumns[key] !== false,
        dataset: { column: key } });
      box.addEventListener("change", () => {
        view.shownColumns[key] = box.checked;
        localStorage.setItem(COLUMNS_KEY, JSON.stringify(view.shownColumns));
        onColumns();
      });
      return h("label.check", { for: `column-${key}` }, box, h("span", text));
    })));

  const section = h("section.filters", { "aria-label": t("admin.filters") },
    h("div.field", h("label", { for: "filter-group" }, t("admin.filter.group")), groupSelect),
    h("div.field", h("label", { for: "filter-status" }, t("admin.filter.status")), statusSelect),
    h("label.check", { for: "filter-overdue" }, overdueBox, h("span", t("admin.filter.overdue"))),
    h("label.check", { for: "filter-pasted" }, pastedBox, h("span", t("admin.filter.pasted"))),
    h("label.check", { for: "filter-failed-checks" }, failedBox, h("span", t("admin.filter.failed_checks"))),
    h("label.check", { for: "filter-implausible" }, implausibleBox, h("span", t("admin.filter.implausible"))),
    h("div.field.search", h("label", { for: "filter-search" }, t("admin.filter.search")), search),
    actions.map((action) => h("div.field", action)));

  fillSelect(groupSelect, [], filters.group);
  fillSelect(statusSelect, ["active", "withdrawn", "erased"], filters.status, statusLabel);

  /** The groups and statuses offered, after a poll (a select being used keeps its options). */
  function offer(summary) {
    const { groups, statuses } = filterChoices(summary, view.lastRows);
    if (document.activeElement !== groupSelect) fillSelect(groupSelect, groups, filters.group);
    if (document.activeElement !== statusSelect) fillSelect(statusSelect, statuses, filters.status, statusLabel);
  }

  return { section, columnChooser, offer };
}
