// A provider failure's try and what followed it, for the admin's failure log (static/js/admin.js). The server
// stores facts (try, action, retry_in_s); the reader's catalog says them (admin.failures.attempt.*), so a new
// language is a new catalog here too. No DOM: node's test runner imports this file.

const ACTIONS = ["retry", "fallback", "give_up"];

/** {key, vars} for the words of a failure row's try, or null when the row records none (a failure outside a
 * provider call: an unusable model output, a consolidation step). Try 0: the provider was not tried. */
export function attemptMessage(failure) {
  const tryNumber = failure?.try;
  if (tryNumber === null || tryNumber === undefined) return null;
  if (tryNumber === 0) return { key: "admin.failures.attempt.not_tried", vars: {} };
  const action = failure.action || "give_up";
  if (!ACTIONS.includes(action)) return { key: "admin.failures.attempt.other", vars: { try: tryNumber, action } };
  const vars = action === "retry" ? { try: tryNumber, seconds: failure.retry_in_s ?? "?" } : { try: tryNumber };
  return { key: `admin.failures.attempt.${action}`, vars };
}
