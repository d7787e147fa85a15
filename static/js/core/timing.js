// The participant page's clocks as plain numbers (no DOM, no i18n: node's test runner imports this file).
// The server keeps the timer; the page counts down from its last answer and asks again around unlock times.
// Texts come back as [i18n key, variables] for the page to translate.

export const TASK_LIST_POLL_MS = 60_000;
// a page re-reading the task list around an unlock time: first wait, and the longest wait between checks
export const UNLOCK_RECHECK_MS = 500;
export const UNLOCK_RECHECK_MAX_MS = 8_000;

// within the hour: say the second too, so "opens at 14:05:07" is exact when the page re-checks
export function opensSoon(task, now = new Date()) {
  return new Date(task.available_at) - now < 3_600_000;
}

// When to read the task list again: just after the next unlock by the server's clock (available_at is cut to
// whole seconds, so it may say a moment before the real unlock), then with a short growing wait until the
// server says the task is open; otherwise now and then.
export function nextTaskListCheck(tasks, serverNow, failedChecks) {
  const waiting = tasks.filter((task) => task.status === "locked" && task.locked_reason === "opens_at" && task.available_at);
  if (!waiting.length) return TASK_LIST_POLL_MS;
  const untilUnlock = Math.min(...waiting.map((task) => new Date(task.available_at) - serverNow));
  if (untilUnlock > 0) return Math.min(untilUnlock + UNLOCK_RECHECK_MS, TASK_LIST_POLL_MS);
  return Math.min(UNLOCK_RECHECK_MS * 2 ** failedChecks, UNLOCK_RECHECK_MAX_MS);
}

/** The chat timer `elapsedSeconds` (wall clock) after the server sent `timer`: what is left, whether the
 *  participant may finish, the timer scale and the active study seconds. */
export function timerEstimate(timer, elapsedSeconds) {
  timer = timer || {};
  const remaining = Math.max(0, (timer.remaining_real_seconds ?? 0) - elapsedSeconds);
  // real seconds per study second: the server's (pilot mode compresses time)
  const scale = timer.timer_scale
    ?? (timer.remaining_seconds > 0 ? timer.remaining_real_seconds / timer.remaining_seconds : 1);
  const active = (timer.active_seconds ?? 0) + (scale > 0 ? elapsedSeconds / scale : 0);
  const canFinish = Boolean(timer.can_finish) || active >= (timer.min_active_seconds ?? 0);
  return { remaining, canFinish, scale, active };
}

// what is left of the minimum chat time, on the wall clock, counting down (the same number in both languages:
// the server's timer scale, not a ratio of rounded figures)
export function minimumHint(timer, { scale, active }) {
  const left = Math.max(0, (((timer || {}).min_active_seconds ?? 0) - active) * scale);
  return left >= 120
    ? ["task.min_hint", { minutes: Math.ceil(left / 60) }]
    : ["task.min_hint_seconds", { seconds: Math.ceil(left) }];
}
