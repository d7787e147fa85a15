// The study editor (admin console, #/study): edit the study definition in a form, save it as a draft (the
// server validates it and names every problem's key, shown beside its field), see versions and diffs, publish
// with a reason, import and export JSON/YAML; and preview a task as a condition's participant, demo links and
// test participants. Plain JS, no build step. Every call is checked on the server too.

import { api } from "./api.js";
import { h, mount } from "./dom.js";
import { formatDateTime, t } from "./i18n.js";


const LANGS = ["zh", "en"];
const ITEM_TYPES = ["likert", "ios", "choice", "text", "attention"];
const OPS = ["", ">=", "<=", ">", "<", "==", "!="];
// keys the form edits; everything else is in the expert JSON
const FORM_KEYS = ["name", "default_language", "enabled_conditions", "assignment", "consent", "debrief", "system_prompts",
  "tasks", "timing", "limits", "instruments", "panel", "payments"];

const state = { live: null, work: null, draftId: null, problems: [], listing: null, dirty: false, note: null };
let fieldCounter = 0;

// the editor's words: the catalogs' study_editor.<key>
function tr(key, vars = {}) {
  return t(`study_editor.${key}`, vars);
}

function clone(value) {
  return JSON.parse(JSON.stringify(value));
}

function getAt(path) {
  return path.reduce((node, part) => (node == null ? undefined : node[part]), state.work);
}

function setAt(path, value) {
  let node = state.work;
  for (const part of path.slice(0, -1)) {
    if (node[part] === undefined || node[part] === null) node[part] = {};
    node = node[part];
  }
  const last = path[path.length - 1];
  if (value === undefined) delete node[last];
  else node[last] = value;
  state.dirty = true;
}

// -- fields: each carries data-key, the validation's name for it, and a slot for its problem ------------

function slot(key) {
  return h("p.field-problem", { dataset: { problemFor: key }, "aria-live": "polite" });
}

function field(key, label, control, hint) {
  const id = control.id || `study-field-${fieldCounter += 1}`;
  control.id = id;
  control.dataset.key = key;
  return h("div.field.study-field", { dataset: { key } }, h("label", { for: id }, label), control,
    hint ? h("p.hint", hint) : null, slot(key));
}

function textField(path, key, label, { multiline = false, nullable = false } = {}) {
  const value = getAt(path);
  const control = multiline ? h("textarea", { rows: 4 }) : h("input", { type: "text" });
  control.value = value ?? "";
  control.addEventListener("input", () => setAt(path, nullable && control.value === "" ? null : control.value));
  return field(key, label, control);
}

function numberField(path, key, label, { nullable = false, integer = false } = {}) {
  const value = getAt(path);
  const control = h("input", { type: "number", step: integer ? "1" : "any" });
  control.value = value ?? "";
  control.addEventListener("input", () => {
    if (control.value === "") setAt(path, nullable ? null : undefined);
    else setAt(path, integer ? Number.parseInt(control.value, 10) : Number(control.value));
  });
  return field(key, label, control);
}

function boolField(path, key, label) {
  const box = h("input", { type: "checkbox", id: `study-field-${fieldCounter += 1}` });
  box.checked = Boolean(getAt(path));
  box.dataset.key = key;
  box.addEventListener("change", () => setAt(path, box.checked));
  return h("div.field.study-field.check-field", { dataset: { key } },
    h("label.check", { for: box.id }, box, h("span", label)), slot(key));
}

function selectField(path, key, label, options, { empty = false } = {}) {
  const control = h("select", (empty ? [""] : []).concat(options).map((v) => h("option", { value: v }, v || "–")));
  control.value = getAt(path) ?? "";
  control.addEventListener("change", () => setAt(path, control.value === "" && empty ? undefined : control.value));
  return field(key, label, control);
}

/** zh and en side by side. */
function pairField(path, key, label, { multiline = false } = {}) {
  return h("fieldset.pair", { dataset: { key } }, h("legend", label),
    h("div.pair-grid", LANGS.map((lang) => textField([...path, lang], `${key}.${lang}`, lang === "zh" ? "中文" : "English",
      { multiline }))), slot(key));
}

function jsonField(path, key, label, hint, rows = 3) {
  const control = h("textarea.json", { rows, spellcheck: "false" });
  control.value = JSON.stringify(getAt(path) ?? null, null, 2);
  const wrapper = field(key, label, control, hint);
  control.addEventListener("input", () => {
    const problem = wrapper.querySelector(".field-problem");
    try {
      setAt(path, JSON.parse(control.value));
      problem.textContent = "";
      control.removeAttribute("aria-invalid");
    } catch (err) {
      problem.textContent = tr("json_bad", { msg: err.message });
      control.setAttribute("aria-invalid", "true");
    }
  });
  return wrapper;
}

function section(id, title, open, ...children) {
  return h("details.card.study-section", { id: `study-${id}`, open, dataset: { section: id } },
    h("summary", h("h2", title)), ...children);
}

// -- the form's sections --------------------------------------------------------------------------------

function generalSection() {
  const conditions = Object.keys(state.work.conditions || {});
  const enabled = h("fieldset.checks", { dataset: { key: "enabled_conditions" } }, h("legend", tr("enabled")),
    conditions.map((c) => {
      const box = h("input", { type: "checkbox", id: `enabled-${c}`, value: c });
      box.checked = (state.work.enabled_conditions || []).includes(c);
      box.addEventListener("change", () => {
        const chosen = conditions.filter((x) => document.getElementById(`enabled-${x}`).checked);
        setAt(["enabled_conditions"], chosen);
      });
      return h("label.check", { for: box.id }, box, h("span", c));
    }), slot("enabled_conditions"));
  return section("general", tr("s_general"), true,
    textField(["name"], "name", tr("name")),
    selectField(["default_language"], "default_language", tr("default_language"), LANGS),
    enabled,
    numberField(["assignment", "block_multiple"], "assignment.block_multiple", tr("block_multiple"), { integer: true }),
    numberField(["assignment", "seed"], "assignment.seed", tr("seed"), { nullable: true, integer: true }));
}

function textsSection() {
  const byCondition = state.work.debrief?.by_condition || {};
  return section("texts", tr("s_texts"), false,
    textField(["consent", "version"], "consent.version", tr("consent_version")),
    pairField(["consent", "text"], "consent.text", tr("consent_text"), { multiline: true }),
    pairField(["consent", "contact"], "consent.contact", tr("contact"), { multiline: true }),
    boolField(["consent", "erasure_on_withdrawal"], "consent.erasure_on_withdrawal", tr("erasure")),
    pairField(["debrief", "title"], "debrief.title", tr("debrief_title")),
    pairField(["debrief", "text"], "debrief.text", tr("debrief_text"), { multiline: true }),
    Object.keys(byCondition).map((c) => pairField(["debrief", "by_condition", c], `debrief.by_condition.${c}`,
      tr("by_condition", { c }), { multiline: true })));
}

function promptsSection() {
  return section("prompts", tr("s_prompts"), false, Object.keys(state.work.system_prompts || {}).map((key) =>
    pairField(["system_prompts", key], `system_prompts.${key}`, tr("prompt", { key }), { multiline: true })));
}

function tasksSection() {
  return section("tasks", tr("s_tasks"), true, (state.work.tasks || []).map((task, i) => {
    const key = `tasks.${task.id}`;
    const order = h("input", { type: "text" });
    order.value = (task.questionnaire || []).join(", ");
    order.addEventListener("input", () => setAt(["tasks", i, "questionnaire"],
      order.value.split(",").map((s) => s.trim()).filter(Boolean)));
    return h("fieldset.task-card", { dataset: { key } }, h("legend", task.id),
      pairField(["tasks", i, "title"], `${key}.title`, tr("task_title")),
      pairField(["tasks", i, "instructions"], `${key}.instructions`, tr("instructions"), { multiline: true }),
      h("div.row", numberField(["tasks", i, "unlock_offset_days"], `${key}.unlock_offset_days`, tr("unlock")),
        numberField(["tasks", i, "min_participant_messages"], `${key}.min_participant_messages`, tr("min_messages"),
          { nullable: true, integer: true })),
      field(`${key}.questionnaire`, tr("questionnaire"), order),
      boolField(["tasks", i, "randomise_instruments"], `${key}.randomise_instruments`, tr("randomise_instruments")),
      slot(key), slot(`tasks[${i}]`));
  }));
}

function numbersOf(name, label) {
  return Object.entries(state.work[name] || {}).map(([k, v]) => (typeof v === "number"
    ? numberField([name, k], `${name}.${k}`, `${label} · ${k}`, { integer: Number.isInteger(v) && !k.endsWith("seconds") })
    : null));
}

function timingSection() {
  return section("timing", tr("s_timing"), false, h("div.grid", numbersOf("timing", "timing"),
    numbersOf("limits", "limits"), numbersOf("typing_checks", "typing_checks")));
}

function itemEditor(name, index) {
  const path = ["instruments", name, "items", index];
  const key = `instruments.${name}.items[${index}]`;
  const item = getAt(path);
  const rule = item.show_if || {};
  const setRule = (part, value) => {
    const next = { ...(getAt([...path, "show_if"]) || {}), [part]: value };
    setAt([...path, "show_if"], next.item || next.op ? next : undefined);
  };
  const ruleItem = h("input", { type: "text", "aria-label": `${tr("show_if")} (${tr("item_id")})` });
  ruleItem.value = rule.item ?? "";
  ruleItem.addEventListener("input", () => setRule("item", ruleItem.value));
  const ruleOp = h("select", { "aria-label": tr("show_op") }, OPS.map((op) => h("option", { value: op }, op || "–")));
  ruleOp.value = rule.op ?? "";
  ruleOp.addEventListener("change", () => setRule("op", ruleOp.value));
  const ruleValue = h("input", { type: "text", "aria-label": tr("show_value") });
  ruleValue.value = rule.value ?? "";
  ruleValue.addEventListener("input", () => {
    const raw = ruleValue.value.trim();
    setRule("value", raw !== "" && !Number.isNaN(Number(raw)) ? Number(raw) : raw);
  });
  const required = h("input", { type: "checkbox", id: `study-field-${fieldCounter += 1}` });
  required.checked = item.required ?? item.type !== "text";
  required.addEventListener("change", () => setAt([...path, "required"], required.checked));
  const remove = h("button.secondary.small", { type: "button", onclick: () => {
    getAt(["instruments", name, "items"]).splice(index, 1);
    state.dirty = true;
    rerender();
  } }, tr("remove_item"));
  const expected = h("input", { type: "text" });
  expected.value = item.expected ?? "";
  expected.addEventListener("input", () => {
    const raw = expected.value.trim();
    setAt([...path, "expected"], raw === "" ? undefined : (Number.isNaN(Number(raw)) ? raw : Number(raw)));
  });
  return h("fieldset.item-card", { dataset: { key } }, h("legend", tr("item", { n: index + 1 }), " · ", item.id || ""),
    h("div.row", textField([...path, "id"], `${key}.id`, tr("item_id")),
      selectField([...path, "type"], `${key}.type`, tr("item_type"), ITEM_TYPES),
      numberField([...path, "min"], `${key}.min`, tr("min"), { integer: true }),
      numberField([...path, "max"], `${key}.max`, tr("max"), { integer: true }),
      h("div.field.study-field.check-field", { dataset: { key: `${key}.required` } },
        h("label.check", { for: required.id }, required, h("span", tr("required"))), slot(`${key}.required`))),
    pairField([...path, "text"], `${key}.text`, tr("item_text")),
    item.type === "choice" || item.options ? jsonField([...path, "options"], `${key}.options`, tr("options")) : null,
    ["likert", "ios", "attention"].includes(item.type) && !item.options
      ? jsonField([...path, "labels"], `${key}.labels`, tr("labels")) : null,
    item.type === "attention" ? field(`${key}.expected`, tr("expected"), expected) : null,
    h("div.row.show-if", { dataset: { key: `${key}.show_if` } }, h("span.show-if-label", tr("show_if")), ruleItem, ruleOp,
      ruleValue, slot(`${key}.show_if`), slot(`${key}.show_if.item`), slot(`${key}.show_if.op`)),
    remove, slot(key));
}

function instrumentsSection() {
  return section("instruments", tr("s_instruments"), false, Object.keys(state.work.instruments || {}).map((name) => {
    const key = `instruments.${name}`;
    const add = h("button.secondary.small", { type: "button", onclick: () => {
      getAt(["instruments", name, "items"]).push({ id: `${name}_${Date.now() % 100000}`, type: "likert",
        text: { zh: "", en: "" }, min: 1, max: 7 });
      state.dirty = true;
      rerender();
    } }, tr("add_item"));
    return h("details.instrument-card", { dataset: { key } }, h("summary", h("h3", name)),
      pairField(["instruments", name, "title"], `${key}.title`, tr("instrument_title")),
      pairField(["instruments", name, "heading"], `${key}.heading`, tr("heading")),
      boolField(["instruments", name, "randomise_items"], `${key}.randomise_items`, tr("randomise_items")),
      h("h4", tr("items")), (getAt(["instruments", name, "items"]) || []).map((_, i) => itemEditor(name, i)), add,
      slot(key), slot(`${key}.items`));
  }));
}

function panelSection() {
  const taskIds = (state.work.tasks || []).map((t) => t.id);
  return section("panel", tr("s_panel"), false,
    h("div.row", textField(["panel", "id_parameter"], "panel.id_parameter", tr("id_parameter")),
      textField(["panel", "id_pattern"], "panel.id_pattern", tr("id_pattern"))),
    numberField(["panel", "max_participants"], "panel.max_participants", tr("cap"), { nullable: true, integer: true }),
    h("div.row", textField(["panel", "full_code"], "panel.full_code", tr("full_code"), { nullable: true }),
      textField(["panel", "full_redirect_url"], "panel.full_redirect_url", tr("full_redirect"), { nullable: true })),
    taskIds.map((t) => h("div.row", { dataset: { key: `panel.tasks.${t}` } },
      textField(["panel", "tasks", t, "completion_code"], `panel.tasks.${t}.completion_code`, tr("completion_code", { t }), { nullable: true }),
      textField(["panel", "tasks", t, "redirect_url"], `panel.tasks.${t}.redirect_url`, tr("redirect", { t }), { nullable: true }),
      textField(["panel", "tasks", t, "incomplete_code"], `panel.tasks.${t}.incomplete_code`, tr("incomplete_code", { t }), { nullable: true }),
      textField(["panel", "tasks", t, "incomplete_redirect_url"], `panel.tasks.${t}.incomplete_redirect_url`, tr("incomplete_redirect", { t }), { nullable: true }))));
}

function paymentsSection() {
  const taskIds = (state.work.tasks || []).map((t) => t.id);
  return section("payments", tr("s_payments"), false,
    textField(["payments", "currency"], "payments.currency", tr("currency")),
    h("div.grid", taskIds.map((t) => numberField(["payments", "per_task", t], `payments.per_task.${t}`, tr("per_task", { t })))),
    numberField(["payments", "completion_bonus"], "payments.completion_bonus", tr("bonus")),
    boolField(["payments", "pay_incomplete"], "payments.pay_incomplete", tr("pay_incomplete")));
}

function memorySection() {
  const presets = Object.keys(state.work.memory?.recall?.presets || {});
  return section("memory", tr("s_memory"), false,
    selectField(["memory", "recall", "preset"], "memory.recall.preset", tr("preset"), presets),
    boolField(["memory", "recall", "directed_retrieval", "enabled"], "memory.recall.directed_retrieval.enabled",
      tr("directed_retrieval")),
    boolField(["memory", "recall", "rehearsal_route", "enabled"], "memory.recall.rehearsal_route.enabled",
      tr("rehearsal_route")),
    numberField(["memory", "gist_max_chars"], "memory.gist_max_chars", tr("gist_max"), { integer: true }),
    h("div.grid", Object.keys(state.work.conditions || {}).map((c) => numberField(["conditions", c, "recent_turns"],
      `conditions.${c}.recent_turns`, tr("recent_turns", { c }), { integer: true }))));
}

function expertSection() {
  const control = h("textarea.json#study-expert", { rows: 14, spellcheck: "false" });
  const rest = Object.fromEntries(Object.entries(state.work).filter(([k]) => !FORM_KEYS.includes(k)));
  control.value = JSON.stringify(rest, null, 2);
  const wrapper = field("expert", tr("s_expert"), control, tr("expert_hint"));
  control.addEventListener("input", () => {
    const problem = wrapper.querySelector(".field-problem");
    try {
      const parsed = JSON.parse(control.value);
      for (const k of Object.keys(state.work)) if (!FORM_KEYS.includes(k)) delete state.work[k];
      Object.assign(state.work, parsed);
      state.dirty = true;
      problem.textContent = "";
    } catch (err) {
      problem.textContent = tr("json_bad", { msg: err.message });
    }
  });
  return section("expert", tr("s_expert"), false, wrapper);
}

// -- versions and diffs ---------------------------------------------------------------------------------

function versionsSection() {
  const listing = state.listing || { versions: [], drafts: [] };
  const refs = [...listing.versions.map((v) => v.ref), ...listing.drafts.map((d) => d.ref)];
  const pick = (id, label, value) => {
    const select = h(`select#${id}`, refs.map((r) => h("option", { value: r }, r)));
    select.value = value;
    return h("div.field", h("label", { for: id }, label), select);
  };
  const out = h("div#study-diff");
  const show = h("button.secondary#study-show-diff", { type: "button", onclick: async () => {
    const from = document.getElementById("diff-from").value;
    const to = document.getElementById("diff-to").value;
    try {
      const data = await api.get(`/api/admin/study/diff?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`);
      mount(out, diffTable(data.changes));
    } catch (err) {
      mount(out, h("p.notice.error", { role: "alert" }, tr("error", { msg: err.message })));
    }
  } }, tr("show_diff"));
  const load = async (ref) => {
    const data = await api.get(`/api/admin/study/versions/${encodeURIComponent(ref)}`);
    state.work = clone(data.definition);
    state.dirty = true;
    state.note = null;
    rerender();
  };
  const row = (entry, text) => h("li", h("strong", entry.ref), " ", text, " ",
    h("button.link", { type: "button", onclick: () => load(entry.ref) }, tr("load")));
  return section("versions", tr("s_versions"), false,
    h("h3", tr("versions")), h("ul.version-list", listing.versions.map((v) => row(v,
      `${formatDateTime(v.created_at)} · ${v.hash.slice(0, 10)} · ${v.source}${v.live ? ` · ${tr("live_mark")}` : ""}${v.reason ? ` · ${tr("by_reason", { r: v.reason })}` : ""}`))),
    h("h3", tr("drafts")), h("ul.version-list", listing.drafts.map((d) => row(d,
      `${formatDateTime(d.created_at)} · ${d.hash.slice(0, 10)}${d.published_version ? ` → v${d.published_version}` : ""}`))),
    h("div.row", pick("diff-from", tr("from"), listing.versions[1]?.ref || refs[0] || ""),
      pick("diff-to", tr("to"), listing.versions[0]?.ref || refs[0] || ""), show), out);
}

function diffTable(changes) {
  if (!changes.length) return h("p.muted", tr("no_changes"));
  const cell = (value) => (value === null || value === undefined ? "–" : typeof value === "object" ? JSON.stringify(value) : String(value));
  return h("div.table-wrap", h("table.data",
    h("thead", h("tr", [tr("path"), tr("op"), tr("before"), tr("after")].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", changes.map((c) => h("tr", h("td", h("code", c.path)), h("td", tr(`op_${c.op}`)), h("td", cell(c.before)),
      h("td", cell(c.after)))))));
}

// -- preview, demo links, test participants ---------------------------------------------------------------

function previewSection() {
  const conditions = Object.keys(state.live?.definition?.conditions || {});
  const tasks = (state.live?.definition?.tasks || []).map((t) => t.id);
  const choose = (id, label, options) => h("div.field", h("label", { for: id }, label),
    h(`select#${id}`, options.map((o) => h("option", { value: o }, o))));
  const out = h("div.notice.info#preview-out", { role: "status" });
  const run = (fn) => async () => {
    try {
      await fn();
    } catch (err) {
      mount(out, tr("error", { msg: err.message }));
    }
  };
  const value = (id) => document.getElementById(id).value;
  const demoList = h("ul.version-list#demo-list");
  const refreshDemos = async () => {
    const data = await api.get("/api/admin/demo-links");
    mount(demoList, data.demo_links.map((link) => h("li",
      `#${link.id} · ${link.condition} · ${link.language} · ${tr(`state_${link.state}`)} · ${formatDateTime(link.expires_at)} · ${tr("opened", { n: link.opened })}${link.label ? ` · ${link.label}` : ""} `,
      link.state === "live" ? h("button.link", { type: "button", onclick: run(async () => {
        await api.post(`/api/admin/demo-links/${link.id}/revoke`);
        await refreshDemos();
      }) }, tr("revoke")) : null)));
  };
  refreshDemos().catch(() => {});
  const counts = h("p.muted#test-counts");
  const refreshCounts = async () => {
    const [monitor, previews] = await Promise.all([api.get("/api/admin/participants"), api.get("/api/admin/previews")]);
    const groups = Object.entries(monitor.test_participants || {}).map(([g, n]) => `${g}: ${n}`).join(", ") || "0";
    mount(counts, tr("test_counts", { groups }), " · ", tr("preview_count", { n: previews.previews.length,
      hours: previews.delete_after_hours }));
  };
  refreshCounts().catch(() => {});
  const days = h("input#demo-days", { type: "number", min: "1", step: "1", value: "14" });
  const label = h("input#demo-label", { type: "text" });
  return section("preview", tr("s_preview"), true,
    h("div.row", choose("preview-condition", tr("condition"), conditions), choose("preview-task", tr("task"), tasks),
      choose("preview-language", tr("lang"), LANGS)),
    h("div.actions",
      h("button#open-preview", { type: "button", onclick: run(async () => {
        const data = await api.post("/api/admin/preview", { condition: value("preview-condition"),
          task: value("preview-task"), language: value("preview-language") });
        mount(out, h("p", tr("preview_link"), " ", h("a#preview-link", { href: data.url, target: "_blank", rel: "noopener" }, data.url)),
          h("p.muted", tr("preview_private")));
        await refreshCounts();
      }) }, tr("open_preview")),
      h("button.secondary#test-participant", { type: "button", onclick: run(async () => {
        const data = await api.post("/api/admin/test-participants", { condition: value("preview-condition"),
          language: value("preview-language") });
        mount(out, tr("test_created", { code: data.participant_code }), " ", h("code", data.url));
        await refreshCounts();
      }) }, tr("test_participant")),
      h("button.secondary#delete-previews", { type: "button", onclick: run(async () => {
        const data = await api.post("/api/admin/previews/delete");
        mount(out, tr("deleted", { n: data.deleted }));
        await refreshCounts();
      }) }, tr("delete_previews"))),
    out, counts,
    h("h3", tr("demo_links")),
    h("div.row", h("div.field", h("label", { for: "demo-days" }, tr("days")), days),
      h("div.field", h("label", { for: "demo-label" }, tr("label")), label),
      h("button.secondary#create-demo", { type: "button", onclick: run(async () => {
        const data = await api.post("/api/admin/demo-links", { condition: value("preview-condition"),
          language: value("preview-language"), days: Number(days.value), label: label.value || null });
        mount(out, tr("demo_created"), " ", h("code", data.url));
        await refreshDemos();
      }) }, tr("create_demo"))),
    demoList);
}

// -- problems beside their fields ------------------------------------------------------------------------

function problemText(problem) {
  return `${tr(`code_${problem.code || "invalid"}`)}: ${problem.message}`;
}

/** The slot for a problem's key: its own field, else the closest enclosing one, else a field under it. */
function slotFor(root, key) {
  const slots = [...root.querySelectorAll("[data-problem-for]")];
  const exact = slots.find((s) => s.dataset.problemFor === key);
  if (exact) return exact;
  let best = null;
  for (const s of slots) {
    const k = s.dataset.problemFor;
    if (key.startsWith(`${k}.`) || key.startsWith(`${k}[`)) {
      if (!best || k.length > best.dataset.problemFor.length) best = s;
    }
  }
  return best || slots.find((s) => s.dataset.problemFor.startsWith(`${key}.`)) || null;
}

function showProblems(root, problems) {
  root.querySelectorAll("[data-problem-for]").forEach((s) => { s.textContent = ""; });
  root.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
  root.querySelectorAll(".study-field.has-problem").forEach((el) => el.classList.remove("has-problem"));
  const top = root.querySelector("#study-problems");
  mount(top);
  let first = null;
  for (const problem of problems) {
    const target = problem.key ? slotFor(root, problem.key) : null;
    if (!target) {
      top.append(h("p", problem.key ? h("code", problem.key) : tr("problem_at_top"), " – ", problemText(problem)));
      continue;
    }
    target.append(h("span.problem-line", problemText(problem)));
    const holder = target.parentElement;
    holder.classList.add("has-problem");
    const control = holder.querySelector("input, select, textarea");
    if (control) {
      control.setAttribute("aria-invalid", "true");
      if (target.id === "") target.id = `problem-${fieldCounter += 1}`;
      control.setAttribute("aria-describedby", target.id);
    }
    for (let node = target; node; node = node.parentElement) if (node.tagName === "DETAILS") node.open = true;
    first = first || control || target;
  }
  if (problems.length) top.prepend(h("p", h("strong", tr("problems", { n: problems.length }))));
  return first;
}

// -- saving and publishing --------------------------------------------------------------------------------

let currentMain = null;

async function save(root) {
  const status = root.querySelector("#study-status");
  try {
    const data = await api.post("/api/admin/study/drafts", { definition: state.work });
    state.draftId = data.draft_id;
    state.dirty = false;
    state.problems = [];
    state.note = tr("saved", { id: data.draft_id });
    showProblems(root, []);
    mount(status, state.note);
    root.querySelector("#study-publish").disabled = false;
    state.listing = await api.get("/api/admin/study/versions");
  } catch (err) {
    const problems = err.details?.problems || err.body?.problems || [];
    state.problems = problems;
    const first = showProblems(root, problems.length ? problems : [{ key: "", message: err.message, code: "invalid" }]);
    mount(status);
    if (first && first.focus) first.focus();
  }
}

function publishDialog(root) {
  const reason = h("textarea#publish-reason", { rows: 3, maxlength: "2000" });
  const problem = h("p.field-problem#publish-problem", { role: "alert" });
  const dialog = h("dialog.card#publish-dialog", { "aria-labelledby": "publish-title" },
    h("h2#publish-title", tr("publish_title", { id: state.draftId })), h("p", tr("publish_intro")),
    h("div.field", h("label", { for: "publish-reason" }, tr("reason")), reason, problem),
    h("div.actions",
      h("button#publish-confirm", { type: "button", onclick: async () => {
        try {
          const data = await api.post(`/api/admin/study/drafts/${state.draftId}/publish`, { reason: reason.value });
          dialog.close();
          dialog.remove();
          state.note = tr("published", { version: data.version, hash: data.hash.slice(0, 12) });
          state.draftId = null;
          await reload(true);
        } catch (err) {
          const listed = err.details?.problems || [];
          problem.textContent = listed.length ? listed.map(problemText).join(" ") : tr("error", { msg: err.message });
          reason.setAttribute("aria-invalid", "true");
          if (listed.length) showProblems(root, listed);
        }
      } }, tr("confirm_publish")),
      h("button.secondary", { type: "button", onclick: () => { dialog.close(); dialog.remove(); } }, tr("cancel"))));
  root.append(dialog);
  dialog.showModal();
  reason.focus();
}

async function importFile(root, file) {
  const text = await file.text();
  const format = /\.json$/i.test(file.name) ? "json" : "yaml";
  try {
    const data = await api.post("/api/admin/study/drafts", { source: text, format });
    const loaded = await api.get(`/api/admin/study/versions/d${data.draft_id}`);
    state.work = clone(loaded.definition);
    state.draftId = data.draft_id;
    state.dirty = false;
    state.note = tr("imported", { id: data.draft_id });
    state.listing = await api.get("/api/admin/study/versions");
    rerender();
  } catch (err) {
    showProblems(root, err.details?.problems || [{ key: "", message: err.message, code: "invalid" }]);
  }
}

// -- the page ------------------------------------------------------------------------------------------------

function render() {
  fieldCounter = 0;
  const live = state.live;
  const fileInput = h("input.visually-hidden#study-import", { type: "file", accept: ".json,.yaml,.yml,application/json" });
  const root = h("div.study-editor");
  fileInput.addEventListener("change", () => { if (fileInput.files[0]) importFile(root, fileInput.files[0]); });
  const publish = h("button.secondary#study-publish", { type: "button", disabled: !state.draftId,
    onclick: () => publishDialog(root) }, tr("publish"));
  mount(root,
    h("h1", tr("title")),
    h("p.muted", tr("intro")),
    h("p#study-live", tr("live", { version: live.version, hash: live.hash.slice(0, 12) })),
    h("div.actions.study-toolbar",
      h("button#study-save", { type: "button", onclick: () => save(root) }, tr("save")),
      publish,
      h("a.button.secondary", { href: "/api/admin/study/export?ref=live&format=json" }, tr("export_json")),
      h("a.button.secondary", { href: "/api/admin/study/export?ref=live&format=yaml" }, tr("export_yaml")),
      h("label.button.secondary", { for: "study-import" }, tr("import")), fileInput),
    h("div.notice.ok#study-status", { role: "status" }, state.note || ""),
    h("div.notice.error#study-problems", { role: "alert" }),
    generalSection(), textsSection(), promptsSection(), tasksSection(), timingSection(), instrumentsSection(),
    panelSection(), paymentsSection(), memorySection(), expertSection(), versionsSection(), previewSection());
  mount(currentMain, root);
  if (state.problems.length) showProblems(root, state.problems);
}

function rerender() {
  const y = window.scrollY;
  render();
  window.scrollTo(0, y);
}

async function reload(keepNote = false) {
  const [live, listing] = await Promise.all([api.get("/api/admin/study"), api.get("/api/admin/study/versions")]);
  state.live = live;
  state.listing = listing;
  state.work = clone(live.definition);
  state.dirty = false;
  state.problems = [];
  if (!keepNote) state.note = null;
  render();
}

/** The #/study view; keeps unsaved edits when the admin switches language. */
export async function showStudyEditor(main) {
  currentMain = main;
  document.title = `${tr("title")} · AI Memory Lab`;
  if (state.work && state.live) {
    render();
    return;
  }
  await reload();
}
