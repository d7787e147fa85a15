// The composer and the sending of messages: the text is kept as a draft until the server has stored it,
// the reply is read from the stream into the transcript, and a failed reply can be asked for again.

import { postStream } from "../api.js";
import { h } from "../dom.js";
import { t } from "../i18n.js";
import { chatClosedBy, idempotencyKey, messageProblem, refusalText, waitOutRefusals } from "../core/sending.js";
import { textOf } from "./transcript.js";
import { watchTyping } from "./typing_signals.js";

// Reads the reply stream of a post to `path` into a pending bubble of `transcript`; `onStored(message)` runs
// when the server has stored the participant's message. Resolves to true when a reply was stored.
async function streamReply(transcript, path, body, onStored) {
  let replyEl = null;
  let storedId = null;
  let gotReply = false;
  const ensureReply = () => { replyEl = replyEl || transcript.pendingReply(); return replyEl; };
  const { log } = transcript;
  // Screen readers announce the finished reply once instead of every streamed fragment.
  log.setAttribute("aria-busy", "true");
  try {
    await postStream(path, body, (name, data) => {
      if (name === "message") {
        storedId = data.id;
        onStored(data);
        ensureReply();
      } else if (name === "delta") {
        const el = ensureReply();
        transcript.grow(() => {
          if (el.classList.contains("pending")) { el.classList.remove("pending"); textOf(el).textContent = ""; }
          textOf(el).append(data.text);
        });
      } else if (name === "reset") {
        const el = ensureReply();
        textOf(el).textContent = "";
      } else if (name === "reply") {
        const el = ensureReply();
        transcript.grow(() => {
          el.classList.remove("pending");
          textOf(el).textContent = data.content;
        });
        transcript.settleReply(el, data.id, data.reply_to_id);
        gotReply = true;
      } else if (name === "error") {
        replyEl?.remove();
        replyEl = null;
        transcript.markFailed(data.message_id ?? storedId, true, data.retryable ? data.retry_after_seconds : null);
      }
    });
  } catch (err) {
    replyEl?.remove();
    if (storedId !== null) {  // the stream was cut after the message was stored: ask again shortly
      transcript.markFailed(storedId, true, err.status === 503 ? err.details?.retry_after_seconds : 2);
      return false;
    }
    throw err;
  } finally {
    log.removeAttribute("aria-busy");
  }
  if (!gotReply && storedId !== null && replyEl) {
    replyEl.remove();
    transcript.markFailed(storedId);
  }
  return gotReply;
}

/**
 * chat: the chat's shared flags {ended, sending}; transcript: chat/transcript.js; limit: the longest message;
 * draftKey: where the unsent text is kept (sessionStorage); noticeBox, errorText: the page's;
 * onClosed(): the server says the chat is over; onAnsweredElsewhere(): the reply exists already (re-read the task);
 * afterSend(): a send finished and the chat goes on (the timer is re-read).
 */
export function createSender({ chat, taskPath, transcript, limit, draftKey, noticeBox, errorText, onClosed,
  onAnsweredElsewhere, afterSend }) {
  const input = h("textarea#message-input", {
    rows: 3, placeholder: t("task.input_placeholder"), "aria-describedby": "message-counter",
  });
  const counter = h("span.counter#message-counter", { "aria-live": "off" });
  const sendButton = h("button#send", { type: "submit" }, t("task.send"));
  const composerError = noticeBox();
  const composer = h("form.composer", { novalidate: true },
    transcript.newMessages,
    h("label.visually-hidden", { for: "message-input" }, t("task.input_label")),
    input,
    composerError,
    h("div.composer-row", counter, sendButton));
  const typing = watchTyping(input);
  let pendingSend = null;

  function updateCounter() {
    counter.textContent = t("task.chars", { count: input.value.length, limit });
    counter.classList.toggle("over", input.value.length > limit);
  }

  // A busy or read-only database answers 503 "database_busy": nothing was stored, so the same
  // request is sent again after the server's Retry-After, a few times, with the text left in the box.
  function postWhileBusy(post, attempts = 4) {
    return waitOutRefusals(post, {
      attempts,
      refusedForNow: (err) => err.code === "database_busy" && !chat.ended,
      onWait: (attempt) => { composerError.textContent = t("task.db_busy_retrying", { attempt }); },
    });
  }

  async function send() {
    if (chat.sending || chat.ended) return;
    composerError.textContent = "";
    const content = input.value;
    const problem = messageProblem(content, limit);
    if (problem) {
      composerError.textContent = t(...problem);
      input.focus();
      return;
    }
    chat.sending = true;
    sendButton.disabled = true;
    sendButton.textContent = t("task.sending");
    // One idempotency key per message, reused when the same text is sent again (a retry after a
    // lost answer), so the server stores it once.
    if (!pendingSend || pendingSend.content !== content) pendingSend = { content, key: idempotencyKey() };
    const idempotency_key = pendingSend.key;
    try {
      // the signals as of each attempt (a busy database's retry sends them again, later)
      const body = () => ({ content, idempotency_key, ...typing.signals.signals() });
      await postWhileBusy(() => streamReply(transcript, `${taskPath}/messages`, body(), (stored) => {
        // Only now is the text safe on the server: clear the box and the saved draft.
        pendingSend = null;
        typing.signals.reset();
        if (input.value === content) input.value = "";
        sessionStorage.removeItem(draftKey);
        composerError.textContent = "";
        updateCounter();
        transcript.addMessage(stored);
        transcript.revealNewest();  // the participant's own message: always in view
      }));
    } catch (err) {
      if (chatClosedBy(err)) {
        onClosed();
        return;
      }
      if (err.status === 503 && err.details?.message_id) {
        typing.signals.reset();
        // The message is stored even though no reply came: show it, offer a retry.
        input.value = "";
        sessionStorage.removeItem(draftKey);
        transcript.addMessage({ id: err.details.message_id, role: "user", content: content.trim() });
        transcript.markFailed(err.details.message_id, true, err.details.retry_after_seconds);
        transcript.revealNewest();
      } else {
        const refusal = refusalText(err, limit);
        composerError.textContent = refusal ? t(...refusal) : errorText(err);
      }
    } finally {
      chat.sending = false;
      sendButton.disabled = chat.ended;
      sendButton.textContent = t("task.send");
      if (!chat.ended) {
        input.focus();
        afterSend();
      }
    }
  }

  async function retryReply(messageId, el) {
    if (chat.sending || chat.ended) return;
    chat.sending = true;
    sendButton.disabled = true;
    transcript.clearFailed(el);
    try {
      await streamReply(transcript, `${taskPath}/messages/${messageId}/reply`, {}, () => {});
    } catch (err) {
      if (chatClosedBy(err)) {
        onClosed();
        return;
      }
      if (err.code === "already_answered") {
        onAnsweredElsewhere();
        return;
      }
      transcript.markFailed(messageId, true, err.status === 503 ? err.details?.retry_after_seconds : null);
      composerError.textContent = errorText(err);
    } finally {
      chat.sending = false;
      sendButton.disabled = chat.ended;
    }
  }

  function autoRetry(messageId, el) {
    if (chat.ended || transcript.isAnswered(messageId) || !el.isConnected || !el.querySelector(".msg-failed")) return;
    if (chat.sending) { setTimeout(() => autoRetry(messageId, el), 1000); return; }  // after the message being sent
    retryReply(messageId, el);
  }

  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    // Enter sends; Shift+Enter breaks the line; Enter that confirms an IME candidate does neither.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      send();
    }
  });
  input.addEventListener("input", () => {
    sessionStorage.setItem(draftKey, input.value);
    updateCounter();
  });

  /** The draft kept from an earlier visit, and the counter for it. */
  function restoreDraft() {
    input.value = sessionStorage.getItem(draftKey) || "";
    updateCounter();
  }

  return { composer, input, retryReply, autoRetry, restoreDraft, stop: typing.stop };
}
