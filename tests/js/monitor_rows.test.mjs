// The admin monitor's rows as data (static/js/core/monitor_rows.js) and the console's number format
// (static/js/core/format.js).
import assert from "node:assert/strict";
import { test } from "node:test";
import { fmt } from "../../static/js/core/format.js";
import {
  OPTIONAL_COLUMNS, TASK_ORDER, compare, filterChoices, monitorQuery, shownColumnsFrom, sortedRows, summaryFrom,
  visibleRows,
} from "../../static/js/core/monitor_rows.js";

const noFilters = { group: "", status: "", overdue: false, pasted: false, failedChecks: false, implausible: false, search: "" };
const rows = [
  { id: 1, participant_code: "P5D1", username: "ana", memory_group: "L4", status: "active", overdue: true, pasted_messages: 2,
    attention_failures: 0, implausible_typing_messages: 0, messages: 12, tasks: { T1: "done", T2: "in_progress" } },
  { id: 2, participant_code: "P51X", username: "Bo", memory_group: "R1", status: "withdrawn", pasted_messages: 0,
    attention_failures: 1, implausible_typing_messages: 3, messages: 3, tasks: { T1: "done", T2: "locked" } },
  { id: 3, participant_code: "P10A", username: "cai", memory_group: "L4", status: "active", pasted_messages: 0,
    attention_failures: 0, implausible_typing_messages: 0, messages: null, tasks: { T1: "available" } },
];

test("fmt: a dash for nothing, integers as they are, other numbers rounded", () => {
  for (const none of [null, undefined, ""]) assert.equal(fmt(none), "–");
  assert.equal(fmt(0), "0");
  assert.equal(fmt(12), "12");
  assert.equal(fmt(0.123456), "0.123");
  assert.equal(fmt(2.25, 1), "2.3");
  assert.equal(fmt("L4"), "L4");
});

test("compare: missing values last, numbers by value, text with numeric runs or char by char", () => {
  assert.equal(compare(1, 1), 0);
  assert.ok(compare(null, 1) > 0 && compare(1, undefined) < 0);
  assert.ok(compare(2, 10) < 0);
  assert.ok(compare("T2", "T10") < 0);
  assert.ok(compare("P51X", "P5D1", true) < 0);   // plain: "1" < "D"
  assert.ok(compare("P5D1", "P51X") < 0);          // numeric runs: 5 < 51
});

test("the filters keep what they say; the search looks at code and username, any case", () => {
  const ids = (filters) => visibleRows(rows, { ...noFilters, ...filters }).map((r) => r.id);
  assert.deepEqual(ids({}), [1, 2, 3]);
  assert.deepEqual(ids({ group: "L4" }), [1, 3]);
  assert.deepEqual(ids({ status: "withdrawn" }), [2]);
  assert.deepEqual(ids({ overdue: true }), [1]);
  assert.deepEqual(ids({ pasted: true }), [1]);
  assert.deepEqual(ids({ failedChecks: true }), [2]);
  assert.deepEqual(ids({ implausible: true }), [2]);
  assert.deepEqual(ids({ search: "  bo " }), [2]);
  assert.deepEqual(ids({ search: "p10" }), [3]);
  assert.deepEqual(ids({ group: "L4", search: "ana" }), [1]);
});

test("rows sort by the chosen column, either way, ties and missing values by participant id", () => {
  const columns = [
    { key: "participant_code", plain: true },
    { key: "messages" },
    { key: "task:T1", sortValue: (r) => TASK_ORDER[r.tasks?.T1] ?? -1 },
  ];
  const order = (key, dir) => sortedRows(rows, columns, { key, dir }).map((r) => r.id);
  assert.deepEqual(order("participant_code", 1), [3, 2, 1]);
  assert.deepEqual(order("participant_code", -1), [1, 2, 3]);
  assert.deepEqual(order("messages", 1), [2, 1, 3]);
  assert.deepEqual(order("task:T1", 1), [3, 1, 2]);
  assert.deepEqual(order("id", 1), [1, 2, 3]);       // no such column: by id
  assert.deepEqual(order("unknown", -1), [3, 2, 1]);
  assert.deepEqual(rows.map((r) => r.id), [1, 2, 3]);  // the rows themselves are left as they were
});

test("the server's counts are used when sent; an older server's rows are counted instead", () => {
  const sent = { groups: { L4: 9 }, funnel: { registered: 9, T1: 4 } };
  assert.equal(summaryFrom(rows, sent, ["T1", "T2"]), sent);
  assert.deepEqual(summaryFrom([...rows, { id: 4, tasks: {} }], null, ["T1", "T2"]), {
    groups: { L4: 2, R1: 1, "–": 1 },
    funnel: { registered: 4, T1: 2, T2: 0 },
  });
});

test("the poll sends the filters the server applies, and not the search", () => {
  assert.equal(monitorQuery(noFilters), "");
  assert.equal(monitorQuery({ ...noFilters, group: "L4", status: "active", search: "ana" }), "group=L4&status=active");
  assert.equal(monitorQuery({ ...noFilters, overdue: true, pasted: true, failedChecks: true, implausible: true }),
    "overdue=1&pasted=1&failed_checks=1&implausible_typing=1");
});

test("the columns shown: the stored choice over the defaults, the defaults when it is missing or broken", () => {
  assert.deepEqual(shownColumnsFrom(null), OPTIONAL_COLUMNS);
  assert.deepEqual(shownColumnsFrom("{not json"), OPTIONAL_COLUMNS);
  assert.deepEqual(shownColumnsFrom("42"), OPTIONAL_COLUMNS);
  assert.deepEqual(shownColumnsFrom('{"username": true, "messages": false}'),
    { ...OPTIONAL_COLUMNS, username: true, messages: false });
  const shown = shownColumnsFrom(null);
  shown.username = true;
  assert.equal(OPTIONAL_COLUMNS.username, false);  // a copy: the defaults stay
});

test("the filters offer the assigned groups counted or seen, and every status known", () => {
  const { groups, statuses } = filterChoices({ groups: { S1: 1, unassigned: 2, "–": 1 }, statuses: { active: 2, paused: 1 } },
    [{ memory_group: "R1" }, { memory_group: null }, { memory_group: "S1" }]);
  assert.deepEqual(groups, ["R1", "S1"]);
  assert.deepEqual(statuses, ["active", "completed", "withdrawn", "erased", "paused"]);
  assert.deepEqual(filterChoices({}, []), { groups: [], statuses: ["active", "completed", "withdrawn", "erased"] });
});
