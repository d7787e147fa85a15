// The rules of sending a chat message, as plain values (no DOM, no i18n: node's test runner imports this file).
// Texts come back as [i18n key, variables] for the page to translate.

// A stored message whose reply failed is asked about again by the page itself this many times, when the server
// said when (back-pressure: a 503's Retry-After, an error event's retry_after_seconds).
export const AUTO_RETRIES = 3;

/** Why `content` cannot be sent as it is, or null. */
export function messageProblem(content, limit) {
  if (!content.trim()) return ["task.empty_message", {}];
  if (content.length > limit) return ["task.too_long", { limit }];
  return null;
}

/** The chat is over (time ran out, or the task moved on to its questionnaire): the page re-reads the task. */
export function chatClosedBy(err) {
  return err.code === "time_up" || err.code === "task_phase_questionnaire";
}

/** What the composer says when the server refused a message it did not store; null: the general error text. */
export function refusalText(err, limit) {
  if (err.code === "database_busy") return ["task.db_busy_gave_up", {}];
  if (err.code === "message_too_long") return ["task.too_long", { limit: err.details?.limit ?? limit }];
  if (err.code === "empty_message") return ["task.empty_message", {}];
  return null;
}

/** Seconds until the page asks for a failed reply by itself, or null (no Retry-After, or retried enough). */
export function autoRetryDelay(retryAfter, retriedSoFar) {
  const seconds = Number(retryAfter);
  return seconds > 0 && retriedSoFar < AUTO_RETRIES ? seconds : null;
}

/** One key per message (the server stores a message sent twice with the same key once). */
export function idempotencyKey(crypto = globalThis.crypto) {
  if (crypto?.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Whether the server's conversation (`messages`, in its order) differs from the message ids the page shows. */
export function transcriptChanged(messages, shownIds) {
  return messages.map((m) => m.id).join(",") !== [...shownIds].sort((a, b) => a - b).join(",");
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Back-pressure: `post` is sent again after the server's Retry-After (`retry_after_seconds`, else 2 s)
// while `refusedForNow(err)` holds, `attempts` times in all; `onWait(attempt, seconds)` runs before each
// wait and `afterWait()` after it. The last refusal is thrown to the caller.
export async function waitOutRefusals(post, { attempts, refusedForNow, onWait, afterWait = () => {}, wait = sleep }) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await post();
    } catch (err) {
      if (!refusedForNow(err) || attempt >= attempts) throw err;
      const seconds = Number(err.details?.retry_after_seconds) || 2;
      onWait(attempt, seconds);
      await wait(seconds * 1000);
      afterWait();
    }
  }
}
