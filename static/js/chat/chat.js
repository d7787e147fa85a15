// One timed chat: the transcript, the timer, the composer (sender) and the data-quality signals, kept in step
// with the server by a heartbeat. The server keeps the timer and the conversation; this page shows them.

import { api } from "../api.js";
import { transcriptChanged } from "../core/sending.js";
import { createChatTimer } from "./timer.js";
import { createSender } from "./sender.js";
import { createTranscript } from "./transcript.js";

const HEARTBEAT_MS = 10_000;
const TICK_MS = 250;

/**
 * Draws the chat of `task` (in progress, in its chat phase) and returns the function that stops it.
 * page: what the participant page lends the chat — limit (longest message), draftKey, render(title, ...children),
 * header (the elements above the chat), noticeBox(), errorText(err), onEnded(timeUp) (the chat is over: show
 * the task again), reopen() (re-read the task), signedOut().
 */
export function startChat(task, page) {
  const taskPath = `/api/tasks/${encodeURIComponent(task.id)}`;
  const chat = { ended: false, sending: false };
  let checking = false;
  let resyncing = false;

  let sender = null;
  const transcript = createTranscript({
    onRetry: (messageId, el) => sender.retryReply(messageId, el),
    onAutoRetry: (messageId, el) => sender.autoRetry(messageId, el),
    onShowNewest: () => sender.input.focus({ preventScroll: true }),
  });
  const timer = createChatTimer({
    task, chat, taskPath, noticeBox: page.noticeBox, errorText: page.errorText,
    sentCount: transcript.sentCount, onTimeUp: () => heartbeat(), onClosed: (timeUp) => chatEnded(timeUp),
  });
  sender = createSender({
    chat, taskPath, transcript, limit: page.limit, draftKey: page.draftKey, noticeBox: page.noticeBox,
    errorText: page.errorText, onClosed: () => chatEnded(), onAnsweredElsewhere: () => page.reopen(),
    afterSend: () => timer.refresh(),
  });

  async function heartbeat() {
    if (chat.ended || checking) return;
    checking = true;
    let missed = false;
    try {
      const data = await api.post(`${taskPath}/heartbeat`);
      timer.applyTask(data.task);
      missed = data.last_message_id != null && !transcript.shows(data.last_message_id);
    } catch (err) {
      if (err.status === 409) chatEnded();
      else if (err.status === 401) page.signedOut();
    } finally {
      checking = false;
    }
    if (missed) resync();
  }

  // Another tab (or a reply this page lost) changed the conversation: show the one the server holds.
  async function resync() {
    if (chat.ended || chat.sending || resyncing) return;
    resyncing = true;
    try {
      const fresh = (await api.get(taskPath)).task;
      if (chat.ended || chat.sending) return;
      if (fresh.status !== "in_progress" || fresh.phase !== "chat") {
        chatEnded(Boolean(fresh.timer?.time_up));
        return;
      }
      timer.applyTask(fresh);
      const messages = fresh.messages || [];
      if (transcriptChanged(messages, transcript.shownIds())) transcript.grow(() => transcript.show(messages));
    } catch (err) {
      if (err.status === 401) page.signedOut();
    } finally {
      resyncing = false;
    }
  }

  function chatEnded(timeUp = true) {
    if (chat.ended) return;
    chat.ended = true;
    stop();
    page.onEnded(timeUp);
  }

  const onVisibility = () => { if (document.visibilityState === "visible") { heartbeat(); resync(); } };
  document.addEventListener("visibilitychange", onVisibility);
  const onFocus = () => resync();
  window.addEventListener("focus", onFocus);
  const ticker = window.setInterval(timer.tick, TICK_MS);
  const beat = window.setInterval(() => { if (document.visibilityState === "visible") heartbeat(); }, HEARTBEAT_MS);
  function stop() {
    window.clearInterval(ticker);
    window.clearInterval(beat);
    document.removeEventListener("visibilitychange", onVisibility);
    sender.stop();
    window.removeEventListener("focus", onFocus);
    transcript.stop();
  }

  page.render(task.title, ...page.header, timer.card, timer.statusError, transcript.log, sender.composer);

  const messages = task.messages || [];
  transcript.show(messages);
  sender.restoreDraft();
  timer.start();
  window.setTimeout(() => {
    if (messages.length) transcript.revealNewest();  // a resumed chat opens at its newest message
    sender.input.focus({ preventScroll: true });
  }, 0);
  return () => { chat.ended = true; stop(); };
}
