// The chat's timer and its finish button: the time left counts down from the server's last answer
// (core/timing.js does the arithmetic), and finishing early is offered once the minimum chat time is reached.

import { api } from "../api.js";
import { h } from "../dom.js";
import { formatDuration, t } from "../i18n.js";
import { minimumHint, timerEstimate } from "../core/timing.js";

/**
 * chat: the chat's shared flags {ended}; sentCount(): the participant's messages shown; onTimeUp(): the
 * countdown reached zero (ask the server); onClosed(timeUp): the chat is over.
 */
export function createChatTimer({ task, chat, taskPath, noticeBox, errorText, sentCount, onTimeUp, onClosed }) {
  let sync = { at: performance.now(), timer: task.timer };
  const timeValue = h("strong#time-left", { "aria-hidden": "true" });
  const timeLabel = h("span.visually-hidden#time-left-label");
  const finishButton = h("button#finish", { type: "button", disabled: true }, t("task.finish"));
  const finishHint = h("p.hint.finish-hint");
  const belowMinimum = h("p.notice.info#finish-below-minimum", { hidden: true });
  const confirmBox = h("div.confirm-finish", { hidden: true },
    h("p", t("task.finish_confirm")),
    belowMinimum,
    h("div.actions",
      h("button#finish-confirm", { type: "button", onclick: () => finish() }, t("task.finish_yes")),
      h("button.secondary", { type: "button", onclick: () => { confirmBox.hidden = true; finishButton.focus(); } },
        t("task.cancel"))));
  const statusError = noticeBox();
  const card = h("div.chat-status.card",
    h("p.timer", { role: "timer" }, h("span", { "aria-hidden": "true" }, `${t("task.remaining")} `), timeValue, timeLabel),
    h("div.finish-area", finishButton, finishHint),
    confirmBox);

  const estimate = () => timerEstimate(sync.timer, (performance.now() - sync.at) / 1000);
  const hintText = () => t(...minimumHint(sync.timer, estimate()));

  function tick() {
    if (chat.ended) return;
    const { remaining, canFinish } = estimate();
    timeValue.textContent = formatDuration(remaining);
    timeLabel.textContent = t("task.remaining_label", { time: formatDuration(remaining) });
    finishButton.disabled = !canFinish;
    finishHint.hidden = canFinish;
    if (!canFinish) finishHint.textContent = hintText();
    if (remaining <= 0) onTimeUp();
  }

  /** The task as the server answered: a chat going on resets the countdown; anything else ends the chat. */
  function applyTask(status) {
    if (status.status === "in_progress" && status.phase === "chat" && status.timer) {
      sync = { at: performance.now(), timer: status.timer };
      tick();
    } else {
      onClosed();
    }
  }

  async function refresh() {
    try {
      const data = await api.get("/api/tasks");
      const status = (data.tasks || []).find((entry) => entry.id === task.id);
      if (status && !chat.ended) applyTask(status);
    } catch {
      // the next heartbeat resynchronises
    }
  }

  async function finish() {
    finishButton.disabled = true;
    statusError.textContent = "";
    try {
      const data = await api.post(`${taskPath}/finish`);
      if (data.task.status === "in_progress" && data.task.phase === "chat") applyTask(data.task);
      else onClosed(false);
    } catch (err) {
      confirmBox.hidden = true;
      if (err.code === "too_early") {
        statusError.textContent = t("task.too_early");
        if (err.details?.timer) applyTask({ status: "in_progress", phase: "chat", timer: err.details.timer });
      } else if (err.status === 409) {
        onClosed();
      } else {
        statusError.textContent = errorText(err);
        tick();
      }
    }
  }

  finishButton.addEventListener("click", () => {
    // below the study's minimum of messages the task ends incomplete: say so before it happens
    const sent = sentCount();
    belowMinimum.hidden = sent >= (task.min_messages ?? 0);
    // the default study has no completion codes: say what happens without promising one
    belowMinimum.textContent = t(task.completion_code_offered ? "task.finish_below_minimum" : "task.finish_below_minimum_no_code",
      { count: sent, min: task.min_messages });
    confirmBox.hidden = false;
    confirmBox.querySelector("#finish-confirm").focus();
  });

  /** The first drawing, once the card is on the page. */
  function start() {
    finishHint.textContent = hintText();
    tick();
  }

  return { card, statusError, tick, applyTask, refresh, start };
}
