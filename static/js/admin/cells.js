// Table cells the monitor and the participant detail share: a participant's status, a task's progress,
// data-quality flags, reminders and consolidation, in the admin's language.

import { h } from "../dom.js";
import { formatDuration, formatShort, t } from "../i18n.js";
import { fmt } from "../core/format.js";
import { term } from "./common.js";

export function qualityCell(row) {
  const parts = [];
  if (row.pasted_messages) parts.push(h("span.badge.flag.pasted", t("admin.quality.pasted", { n: row.pasted_messages })));
  if (row.attention_failures) {
    parts.push(h("span.badge.flag.attention",
      t("admin.quality.failed", { n: row.attention_failures, checks: row.attention_checks })));
  }
  if (row.implausible_typing_messages) {
    parts.push(h("span.badge.flag.implausible", t("admin.quality.implausible", { n: row.implausible_typing_messages })));
  }
  if (row.focus_losses) parts.push(h("span.sub", t("admin.quality.focus", { n: row.focus_losses })));
  return parts.length ? h("div.quality-cell", parts) : "–";
}

export function remindersCell(row) {
  const reminders = row.reminders || [];
  if (!reminders.length) return "–";
  const sent = reminders.filter((r) => r.status === "sent").length;
  const failed = reminders.filter((r) => r.status === "failed").length;
  return h("div.reminder-cell",
    h("span.sub", t("admin.reminders.sent", { n: sent })),
    failed ? h("span.badge.flag.failed", t("admin.reminders.failed", { n: failed })) : null);
}

export function statusBadge(status) {
  return h(`span.badge.${status}`, { dataset: { status } }, t(`admin.status.${status}`));
}

// who withdrew (the participant on their page, or an admin) and when; erasure time too
export function statusCell(row) {
  const parts = [statusBadge(row.status)];
  if (row.withdrawn_by) {
    parts.push(h("span.sub.withdrawn-by", t("admin.withdrawn_by", {
      by: t(`admin.withdrawn_by.${row.withdrawn_by}`), time: formatShort(row.withdrawn_at) })));
  }
  if (row.erased_at) parts.push(h("span.sub", t("admin.erased_when", { time: formatShort(row.erased_at) })));
  return h("div.status-cell", parts);
}

/** A task attempt's active chat time in real seconds; in pilot mode with its study seconds, labelled. */
export function sessionTime(session, scale = 1) {
  const real = fmt(session.active_real_seconds ?? session.active_seconds, 1);
  if (Math.abs((scale ?? 1) - 1) < 1e-9) return real;
  return t("admin.session_time_pilot", { real, study: fmt(session.active_seconds, 1) });
}

/** Chat time so far in real (wall-clock) time, as credited at the last action (it never drops back); in pilot
 * mode the study time beside it, labelled. */
function activeTime(timer) {
  const study = timer?.credited_active_seconds ?? timer?.active_seconds ?? 0;
  const scale = timer?.timer_scale ?? 1;
  const real = timer?.credited_active_real_seconds ?? study * scale;
  if (Math.abs(scale - 1) < 1e-9) return t("admin.task.active", { time: formatDuration(real) });
  return t("admin.task.active_pilot", { time: formatDuration(real), study: formatDuration(study) });
}

export function taskCell(row, taskId) {
  const detail = (row.task_details || []).find((d) => d.id === taskId) || { status: row.tasks?.[taskId] || "locked" };
  const status = detail.status || "locked";
  const ended = status === "withdrawn" || status === "erased";
  const parts = [h(`span.badge.${status}`, { dataset: { status } },
    ended ? t(`admin.task.${status}`) : t(`tasks.status.${status}`))];
  if (ended) {
    parts.push(h("span.sub", t(`admin.progress.${detail.progress || "not_started"}`,
      { phase: term("admin.phase", detail.phase) })));
  } else if (status === "done") {
    parts.push(h("span.sub", formatShort(detail.completed_at)));
  } else if (status === "in_progress") {
    parts.push(h("span.sub", detail.phase === "questionnaire"
      ? t("admin.task.phase_questionnaire")
      : activeTime(detail.timer)));
  } else if (status === "available") {
    parts.push(h("span.sub", t("admin.task.since", { time: formatShort(detail.available_at) })));
  } else if (detail.available_at && new Date(detail.available_at) > new Date()) {
    parts.push(h("span.sub", t("tasks.unlocks_at", { time: formatShort(detail.available_at) })));
  }
  if (detail.overdue) parts.push(" ", h("span.badge.overdue", t("admin.task.overdue")));
  return h("div.task-cell", { dataset: { task: taskId, status } }, parts);
}

export function consolidationCell(row) {
  const entries = Object.entries(row.consolidation || {});
  return h("div",
    entries.map(([task, status]) => h("span.sub", `${task}: ${term("admin.consolidation", status)}`)),
    row.consolidation_pending ? h("span.badge.in_progress", t("admin.pending", { n: row.consolidation_pending })) : null);
}
