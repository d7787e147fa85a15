// Renders a task's questionnaire from the server's items (likert | ios | choice | text | attention,
// an instructed-response check shown like a scale, or like a choice when it has options),
// collects the answers, and shows the server's per-item validation problems next to the
// items they name. The server is the judge of what is valid; the page only displays.

import { h, svg } from "./dom.js";
import { itemProblemText } from "./error_texts.js";
import { t } from "./i18n.js";

/**
 * One IOS option (Aron, Aron & Smollan, 1992): two circles ("me" and "the assistant") whose overlap
 * grows with n. At n = min the circles stand clearly apart (a gap of half a radius); at n = max they
 * overlap almost wholly but stay two circles. The labels stand under the circles, in the circles'
 * colours (never across a circle's outline), and move apart as the overlap grows, so that they never
 * run into each other.
 */
const IOS = { width: 120, height: 70, cy: 28, radius: 22, gap: 0.5, closest: 0.5, labelShift: 0.5, labelY: 66 };

function iosPicture(n, min, max) {
  const { width, height, cy, radius, labelY } = IOS;
  const overlap = max > min ? (n - min) / (max - min) : 0;
  const apart = radius * (2 + IOS.gap);
  const distance = apart - (apart - radius * IOS.closest) * overlap;
  const selfX = width / 2 - distance / 2;
  const otherX = width / 2 + distance / 2;
  const shift = radius * IOS.labelShift * overlap;
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, width: String(width), height: String(height), "aria-hidden": "true", focusable: "false" },
    svg("circle", { cx: selfX, cy, r: radius, class: "ios-self" }),
    svg("circle", { cx: otherX, cy, r: radius, class: "ios-other" }),
    svg("text", { x: selfX - shift, y: labelY, "text-anchor": "middle", class: "ios-label ios-label-self" }, t("q.ios_self")),
    svg("text", { x: otherX + shift, y: labelY, "text-anchor": "middle", class: "ios-label ios-label-other" }, t("q.ios_other")),
  );
}

function iosDescription(n, min, max) {
  if (n === min) return t("q.ios_desc_1");
  if (n === max) return t("q.ios_desc_7");
  return t("q.ios_desc_mid", { n });
}

function range(min, max) {
  const values = [];
  for (let v = min; v <= max; v += 1) values.push(v);
  return values;
}

function likertControls(item, base) {
  const min = item.min ?? 1;
  const max = item.max ?? 7;
  // the study's own words for points of the scale (labels), else the page's agree/disagree anchors
  const words = item.labels || { [min]: t("q.likert_low"), [max]: t("q.likert_high") };
  const options = range(min, max).map((v) => {
    const id = `${base}-${v}`;
    const name = words[v] ? `${v} ${words[v]}` : String(v);
    return h("label.likert-option", { for: id },
      h("input", { type: "radio", name: item.id, id, value: String(v), required: item.required, "aria-label": name }),
      h("span.likert-number", { "aria-hidden": "true" }, String(v)));
  });
  return [
    h("div.likert-scale", { style: { "--points": String(options.length) } }, options),
    h("div.likert-anchors", { "aria-hidden": "true" },
      h("span", words[min] ? `${min} = ${words[min]}` : ""), h("span", words[max] ? `${max} = ${words[max]}` : "")),
  ];
}

function iosControls(item, base) {
  const min = item.min ?? 1;
  const max = item.max ?? 7;
  return h("div.ios-scale", range(min, max).map((v) => {
    const id = `${base}-${v}`;
    return h("label.ios-option", { for: id },
      h("input.visually-hidden", {
        type: "radio", name: item.id, id, value: String(v), required: item.required,
        "aria-label": t("q.ios_option", { n: v, desc: iosDescription(v, min, max) }),
      }),
      iosPicture(v, min, max),
      h("span.ios-number", { "aria-hidden": "true" }, String(v)));
  }));
}

function choiceControls(item, base) {
  return h("div.choice-list", (item.options || []).map((option, index) => {
    const id = `${base}-${index}`;
    return h("label.choice-option", { for: id },
      h("input", { type: "radio", name: item.id, id, value: String(index), required: item.required }),
      h("span", option.label ?? String(option.value)));
  }));
}

function isChoice(item) {
  return item.type === "choice" || (item.type === "attention" && Boolean(item.options));
}

function renderItem(item, number) {
  const base = `q-${item.id}`;
  const errorId = `${base}-error`;
  const mark = item.required ? h("span.required-mark", { "aria-hidden": "true" }, " *") : null;
  const error = h("p.item-error", { id: errorId, "aria-live": "polite" });
  if (item.type === "text") {
    const inputId = `${base}-input`;
    return h("div.q-item.q-text", { id: base, dataset: { itemId: item.id, type: item.type } },
      h("label.q-question", { for: inputId }, h("span.q-number", `${number}. `), item.text, mark),
      h("textarea", {
        id: inputId, name: item.id, rows: 4, required: item.required, placeholder: item.required ? "" : t("q.text_placeholder"),
        "aria-describedby": errorId,
      }),
      error);
  }
  let controls;
  if (item.type === "ios") controls = iosControls(item, base);
  else if (isChoice(item)) controls = choiceControls(item, base);
  else controls = likertControls(item, base);
  return h(`fieldset.q-item.q-${item.type}`, { id: base, dataset: { itemId: item.id, type: item.type }, "aria-describedby": errorId },
    h("legend.q-question", h("span.q-number", `${number}. `), item.text, mark),
    controls,
    error);
}

/**
 * Build the form. Returns {form, answers(), showErrors(problems) -> count, clearErrors()}.
 * problems is the server's details.items: {item_id: reason}.
 */
export function buildQuestionnaire(items) {
  const form = h("form.questionnaire", { novalidate: true });
  let section = null;
  let sectionTitle = null;
  items.forEach((item, index) => {
    const title = item.instrument_title || "";
    if (section === null || title !== sectionTitle) {
      sectionTitle = title;
      section = h("section.instrument", title ? h("h2", title) : null);
      form.append(section);
    }
    section.append(renderItem(item, index + 1));
  });

  form.addEventListener("change", (event) => {
    const wrapper = event.target.closest(".q-item");
    if (wrapper) clearItemError(wrapper);
    applyDisplayConditions();
  });
  form.addEventListener("input", applyDisplayConditions);

  /** Whether an item's display condition (show_if, checked again by the server) holds for the answers so far. */
  function shown(item, given) {
    const rule = item.show_if;
    if (!rule) return true;
    const answer = given[rule.item];
    if (answer === undefined) return false;
    if (rule.op === "==") return answer === rule.value;
    if (rule.op === "!=") return answer !== rule.value;
    if (typeof answer !== "number") return false;
    return { ">=": answer >= rule.value, "<=": answer <= rule.value, ">": answer > rule.value, "<": answer < rule.value }[rule.op];
  }

  function applyDisplayConditions() {
    if (!items.some((item) => item.show_if)) return;
    const given = rawAnswers();
    for (const item of items) {
      if (!item.show_if) continue;
      form.querySelector(`#q-${CSS.escape(item.id)}`).hidden = !shown(item, given);
    }
  }

  function answers() {
    const given = rawAnswers();
    const result = {};
    for (const item of items) {
      if (Object.hasOwn(given, item.id) && shown(item, result)) result[item.id] = given[item.id];
    }
    return result;
  }

  function rawAnswers() {
    const result = {};
    for (const item of items) {
      if (item.type === "text") {
        const value = form.querySelector(`#q-${CSS.escape(item.id)}-input`).value;
        if (value.trim()) result[item.id] = value;
        continue;
      }
      const checked = form.querySelector(`input[name="${CSS.escape(item.id)}"]:checked`);
      if (!checked) continue;
      if (isChoice(item)) result[item.id] = item.options[Number(checked.value)].value;
      else result[item.id] = Number.parseInt(checked.value, 10);
    }
    return result;
  }
  applyDisplayConditions();

  function clearItemError(wrapper) {
    wrapper.classList.remove("has-error");
    wrapper.querySelector(".item-error").textContent = "";
    wrapper.querySelectorAll("input, textarea").forEach((el) => el.removeAttribute("aria-invalid"));
  }

  function clearErrors() {
    form.querySelectorAll(".q-item").forEach(clearItemError);
  }

  function showErrors(problems) {
    clearErrors();
    let first = null;
    const named = problems || {};
    const count = Object.keys(named).length;
    // in page order (the server's problems come sorted by item id): focus goes to the first one on the page
    for (const item of items) {
      if (!Object.hasOwn(named, item.id)) continue;
      const reason = named[item.id];
      const wrapper = form.querySelector(`#q-${CSS.escape(item.id)}`);
      wrapper.classList.add("has-error");
      wrapper.querySelector(".item-error").textContent = itemProblemText(reason, item);
      wrapper.querySelectorAll("input, textarea").forEach((el) => el.setAttribute("aria-invalid", "true"));
      if (!first) first = wrapper;
    }
    if (first) {
      first.scrollIntoView({ block: "center" });
      first.querySelector("input, textarea").focus({ preventScroll: true });
    }
    return count;
  }

  return { form, answers, showErrors, clearErrors };
}
