// The participant page's clocks (static/js/core/timing.js): task-list re-checks, the chat countdown and the
// minimum-time hint.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  TASK_LIST_POLL_MS, UNLOCK_RECHECK_MAX_MS, UNLOCK_RECHECK_MS, minimumHint, nextTaskListCheck, opensSoon, timerEstimate,
} from "../../static/js/core/timing.js";

const now = new Date("2026-03-01T12:00:00Z");
const lockedUntil = (iso) => ({ status: "locked", locked_reason: "opens_at", available_at: iso });

test("a task opening within the hour is shown to the second, later ones are not", () => {
  assert.equal(opensSoon({ available_at: "2026-03-01T12:59:59Z" }, now), true);
  assert.equal(opensSoon({ available_at: "2026-03-01T13:00:00Z" }, now), false);
  assert.equal(opensSoon({ available_at: "2026-03-01T11:00:00Z" }, now), true);  // already past
});

test("with nothing waiting on a time the task list is read now and then", () => {
  assert.equal(nextTaskListCheck([], now, 0), TASK_LIST_POLL_MS);
  assert.equal(nextTaskListCheck([{ status: "available" }, { status: "locked", locked_reason: "previous_task" }], now, 3),
    TASK_LIST_POLL_MS);
});

test("the list is read just after the nearest unlock, never later than the usual poll", () => {
  const tasks = [lockedUntil("2026-03-01T12:00:10Z"), lockedUntil("2026-03-01T12:00:04Z")];
  assert.equal(nextTaskListCheck(tasks, now, 0), 4_000 + UNLOCK_RECHECK_MS);
  assert.equal(nextTaskListCheck([lockedUntil("2026-03-02T12:00:00Z")], now, 0), TASK_LIST_POLL_MS);
});

test("past an unlock time that the server has not honoured yet, the wait doubles up to a ceiling", () => {
  const tasks = [lockedUntil("2026-03-01T11:59:59Z")];
  const waits = [0, 1, 2, 3, 4, 5, 9].map((failed) => nextTaskListCheck(tasks, now, failed));
  assert.deepEqual(waits, [500, 1000, 2000, 4000, 8000, UNLOCK_RECHECK_MAX_MS, UNLOCK_RECHECK_MAX_MS]);
});

test("the countdown runs from the server's last answer and stops at zero", () => {
  const timer = { remaining_real_seconds: 600, remaining_seconds: 600, active_seconds: 0, min_active_seconds: 300 };
  assert.equal(timerEstimate(timer, 0).remaining, 600);
  assert.equal(timerEstimate(timer, 42.5).remaining, 557.5);
  assert.equal(timerEstimate(timer, 900).remaining, 0);
});

test("finishing is allowed once the minimum active time is reached, or when the server says so", () => {
  const timer = { remaining_real_seconds: 600, remaining_seconds: 600, active_seconds: 100, min_active_seconds: 300 };
  assert.equal(timerEstimate(timer, 199).canFinish, false);
  assert.equal(timerEstimate(timer, 200).canFinish, true);
  assert.equal(timerEstimate({ ...timer, can_finish: true }, 0).canFinish, true);
});

test("pilot mode: the server's scale turns wall seconds into study seconds", () => {
  // 60 study seconds pass in 1 real second
  const timer = { remaining_real_seconds: 10, remaining_seconds: 600, active_seconds: 0, min_active_seconds: 300, timer_scale: 1 / 60 };
  const { scale, active, canFinish } = timerEstimate(timer, 5);
  assert.equal(scale, 1 / 60);
  assert.equal(active, 300);
  assert.equal(canFinish, true);
  // an older server without timer_scale: the ratio of what is left
  assert.equal(timerEstimate({ ...timer, timer_scale: undefined }, 0).scale, 10 / 600);
});

test("no timer yet: nothing left, nothing required", () => {
  assert.deepEqual(timerEstimate(null, 3), { remaining: 0, canFinish: true, scale: 1, active: 3 });
});

test("the minimum-time hint says minutes from two minutes up, seconds below, never less than nothing", () => {
  const timer = { min_active_seconds: 300 };
  assert.deepEqual(minimumHint(timer, { scale: 1, active: 0 }), ["task.min_hint", { minutes: 5 }]);
  assert.deepEqual(minimumHint(timer, { scale: 1, active: 179 }), ["task.min_hint", { minutes: 3 }]);
  assert.deepEqual(minimumHint(timer, { scale: 1, active: 181 }), ["task.min_hint_seconds", { seconds: 119 }]);
  assert.deepEqual(minimumHint(timer, { scale: 1, active: 400 }), ["task.min_hint_seconds", { seconds: 0 }]);
  // pilot mode: what is left is said on the wall clock
  assert.deepEqual(minimumHint(timer, { scale: 0.1, active: 0 }), ["task.min_hint_seconds", { seconds: 30 }]);
});

test("a stopped clock (scale 0) credits no active time; a hint without a timer asks for nothing", () => {
  const { active, remaining } = timerEstimate({ remaining_real_seconds: 5, timer_scale: 0, active_seconds: 7 }, 3);
  assert.equal(active, 7);
  assert.equal(remaining, 2);
  assert.deepEqual(minimumHint(null, { scale: 1, active: 0 }), ["task.min_hint_seconds", { seconds: 0 }]);
  assert.deepEqual(minimumHint({}, { scale: 1, active: 0 }), ["task.min_hint_seconds", { seconds: 0 }]);
});
