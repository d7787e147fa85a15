// What every view of the admin console uses: error texts, the words for server values, notice boxes and the
// note an action leaves.

import { h } from "../dom.js";
import { t } from "../i18n.js";

export function errorText(err) {
  if (err.code === "network") return t("error.network");
  return t("error.generic", { message: err.message });
}

/** The word for a server value (a status, a phase, an error code) in the admin's language; the value itself
 *  when there is none. */
export function term(prefix, value) {
  if (value === null || value === undefined || value === "") return "–";
  const key = `${prefix}.${value}`;
  const text = t(key);
  return text === key ? String(value) : text;
}

export function noticeBox(kind = "error") {
  return h(`div.notice.${kind}`, { role: kind === "error" ? "alert" : "status" });
}

// A note an action leaves (a toast) is kept as a function of the language, not as text: after the admin switches
// language the page is drawn again and the note comes back in the new language (tell, then retell on the new
// element with the same id on the same page).
let told = null;

export function tell(el, render) {
  el.textContent = render();
  told = { hash: location.hash, id: el.id, render };
}

export function retell(el) {
  if (told && told.hash === location.hash && told.id === el.id) el.textContent = told.render();
  return el;
}
