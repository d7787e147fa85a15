// The monitor's actions: "consolidate now" for every pending task, with the note it leaves.

import { api } from "../api.js";
import { h } from "../dom.js";
import { t } from "../i18n.js";
import { errorText, retell, tell } from "./common.js";

/** explain(data): why a run started nothing, in the admin's language; onDone(): poll again. */
export function createMonitorActions({ explain, onDone }) {
  const consolidateAll = h("button.secondary.small#consolidate-all", { type: "button" }, t("admin.action.consolidate_all"));
  const note = retell(h("div.notice.info#action-note", { role: "status" }));
  consolidateAll.addEventListener("click", async () => {
    consolidateAll.disabled = true;
    tell(note, () => "");
    try {
      const data = await api.post("/api/admin/consolidate-pending");
      tell(note, () => {
        const why = explain(data);
        return t("admin.action.done", { what: `${t("admin.action.consolidate_all")} (${(data.runs || []).length})` })
          + (why ? ` (${why})` : "");
      });
      onDone();
    } catch (err) {
      tell(note, () => t("admin.action.unavailable", { message: errorText(err) }));
    } finally {
      consolidateAll.disabled = false;
    }
  });
  return { buttons: [consolidateAll], note };
}
