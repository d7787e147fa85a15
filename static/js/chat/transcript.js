// The chat log: the messages as bubbles, a reply being written, failed replies with their retry, and the
// page following the newest message only while the participant is at the end.

import { h } from "../dom.js";
import { t } from "../i18n.js";
import { autoRetryDelay } from "../core/sending.js";

// how near the end of the page counts as "at the newest message" (the chat follows only then)
const FOLLOW_SLACK_PX = 48;

function bubble(message) {
  const mine = message.role === "user";
  return h(`div.msg.${mine ? "user" : "assistant"}`, { dataset: { id: String(message.id ?? "") } },
    h("span.msg-who", mine ? t("task.you") : t("task.assistant")),
    h("div.msg-text", message.content));
}

export const textOf = (el) => el.querySelector(".msg-text");

/** `onRetry(messageId, el)`: the participant pressed retry; `onAutoRetry(messageId, el)`: the server's wait
 *  for a failed reply is over; `onShowNewest()`: the participant asked to see the newest messages. */
export function createTranscript({ onRetry, onAutoRetry, onShowNewest }) {
  const log = h("div.chat-log#chat-log", { role: "log", "aria-live": "polite", "aria-label": t("task.chat_label") });
  const newMessages = h("button.small.new-messages#new-messages", { type: "button", hidden: true }, t("task.new_messages"));
  const byId = new Map();
  const answered = new Set();
  const autoRetried = new Map();  // message id -> automatic retries so far

  // The page scrolls (one scroller, phone-friendly); the newest message is kept in view above the sticky
  // composer only while the participant is at the end. Reading back, nothing moves: a button says more came.
  function atEnd() {
    const page = document.scrollingElement;
    return page.scrollTop + window.innerHeight >= page.scrollHeight - FOLLOW_SLACK_PX;
  }

  function revealNewest() {
    const page = document.scrollingElement;
    page.scrollTop = page.scrollHeight;
    newMessages.hidden = true;
  }

  // Change the log, then follow it if the participant was at the end before the change.
  function grow(change) {
    const following = atEnd();
    const result = change();
    if (following) revealNewest();
    else newMessages.hidden = false;
    return result;
  }

  newMessages.addEventListener("click", () => { revealNewest(); onShowNewest(); });
  const onScroll = () => { if (!newMessages.hidden && atEnd()) newMessages.hidden = true; };
  window.addEventListener("scroll", onScroll, { passive: true });

  function addMessage(message) {
    log.querySelector(".chat-empty")?.remove();
    const el = bubble(message);
    log.append(el);
    if (message.id) byId.set(message.id, el);
    if (message.reply_to_id) answered.add(message.reply_to_id);
    return el;
  }

  function pendingReply() {
    const el = bubble({ role: "assistant", content: "" });
    el.classList.add("pending");
    textOf(el).append(h("span.typing", t("task.thinking")));
    grow(() => log.append(el));
    return el;
  }

  // A stored message whose reply failed. When the server said when to ask again, the page asks by itself
  // (core/sending.js: AUTO_RETRIES times); the retry button stays for the participant, and the server answers
  // a message left unanswered a minute later on its own (the heartbeat then shows the reply).
  function markFailed(messageId, follow = true, retryAfter = null) {
    const el = byId.get(messageId);
    if (!el || el.querySelector(".msg-failed")) return;
    el.classList.add("failed");
    const retry = h("button.small.secondary.retry", { type: "button", onclick: () => onRetry(messageId, el) }, t("task.retry"));
    const seconds = autoRetryDelay(retryAfter, autoRetried.get(messageId) ?? 0);
    const text = seconds !== null ? t("task.reply_retrying", { seconds: Math.ceil(seconds) }) : t("task.reply_failed");
    const notice = h("div.msg-failed", { role: "alert" }, h("span", text), " ", retry);
    if (follow) grow(() => el.append(notice));
    else el.append(notice);
    if (seconds !== null) {
      autoRetried.set(messageId, (autoRetried.get(messageId) ?? 0) + 1);
      setTimeout(() => onAutoRetry(messageId, el), seconds * 1000);
    }
  }

  function clearFailed(el) {
    el.classList.remove("failed");
    el.querySelector(".msg-failed")?.remove();
  }

  // The conversation as the server holds it (what the model sees), replacing what this page shows.
  function show(messages) {
    byId.clear();
    answered.clear();
    log.replaceChildren();
    if (!messages.length) log.append(h("p.chat-empty.muted", t("task.empty_chat")));
    messages.forEach(addMessage);
    messages.filter((m) => m.role === "user" && !answered.has(m.id)).forEach((m) => markFailed(m.id, false));
  }

  /** A reply the stream delivered: the bubble becomes the stored message that answers `replyToId`. */
  function settleReply(el, id, replyToId) {
    el.dataset.id = String(id);
    byId.set(id, el);
    answered.add(replyToId);
  }

  return {
    log, newMessages, addMessage, pendingReply, markFailed, clearFailed, show, settleReply, grow, revealNewest,
    shows: (messageId) => byId.has(messageId),
    isAnswered: (messageId) => answered.has(messageId),
    shownIds: () => byId.keys(),
    sentCount: () => log.querySelectorAll(".msg.user").length,
    stop: () => window.removeEventListener("scroll", onScroll),
  };
}
