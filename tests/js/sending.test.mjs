// The rules of sending a chat message (static/js/core/sending.js): what may be sent, what a refusal says,
// when a failed reply is asked for again, idempotency keys and the back-pressure loop.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AUTO_RETRIES, autoRetryDelay, chatClosedBy, idempotencyKey, messageProblem, refusalText, transcriptChanged,
  waitOutRefusals,
} from "../../static/js/core/sending.js";

test("an empty or blank message and one over the limit are refused before sending", () => {
  assert.deepEqual(messageProblem("", 10), ["task.empty_message", {}]);
  assert.deepEqual(messageProblem(" \n\t", 10), ["task.empty_message", {}]);
  assert.deepEqual(messageProblem("12345678901", 10), ["task.too_long", { limit: 10 }]);
  assert.equal(messageProblem("1234567890", 10), null);
});

test("the chat is over when the time is up or the task moved on to its questionnaire", () => {
  assert.equal(chatClosedBy({ code: "time_up" }), true);
  assert.equal(chatClosedBy({ code: "task_phase_questionnaire" }), true);
  assert.equal(chatClosedBy({ code: "database_busy" }), false);
});

test("a refusal is said in the page's words when its code is known, else by the general error text", () => {
  assert.deepEqual(refusalText({ code: "database_busy" }, 4000), ["task.db_busy_gave_up", {}]);
  assert.deepEqual(refusalText({ code: "message_too_long", details: { limit: 2000 } }, 4000), ["task.too_long", { limit: 2000 }]);
  assert.deepEqual(refusalText({ code: "message_too_long" }, 4000), ["task.too_long", { limit: 4000 }]);
  assert.deepEqual(refusalText({ code: "empty_message" }, 4000), ["task.empty_message", {}]);
  assert.equal(refusalText({ code: "network" }, 4000), null);
});

test("a failed reply is asked for again after the server's wait, a few times only", () => {
  assert.equal(autoRetryDelay(5, 0), 5);
  assert.equal(autoRetryDelay("2.5", 1), 2.5);
  assert.equal(autoRetryDelay(5, AUTO_RETRIES - 1), 5);
  assert.equal(autoRetryDelay(5, AUTO_RETRIES), null);
  for (const none of [null, undefined, 0, -1, "soon"]) assert.equal(autoRetryDelay(none, 0), null);
});

test("idempotency keys: the browser's UUID, else 16 random bytes in hex", () => {
  assert.equal(idempotencyKey({ randomUUID: () => "uuid-1" }), "uuid-1");
  const bytes = { getRandomValues: (array) => { array.forEach((_, i) => { array[i] = i * 17; }); return array; } };
  assert.equal(idempotencyKey(bytes), "00112233445566778899aabbccddeeff");
  assert.match(idempotencyKey(), /^[0-9a-f-]{32,36}$/);
  assert.notEqual(idempotencyKey(), idempotencyKey());
});

test("the transcript is redrawn only when the server's messages differ from those shown", () => {
  const messages = [{ id: 3 }, { id: 4 }, { id: 10 }];
  assert.equal(transcriptChanged(messages, [10, 3, 4]), false);  // shown ids in any order, compared by number
  assert.equal(transcriptChanged(messages, [3, 4]), true);
  assert.equal(transcriptChanged([], []), false);
});

function refusal(seconds) {
  return Object.assign(new Error("busy"), { code: "database_busy", details: seconds === undefined ? {} : { retry_after_seconds: seconds } });
}

test("back-pressure: a refused request is sent again after the server's wait, and its answer returned", async () => {
  const waits = [];
  const said = [];
  let calls = 0;
  const answer = await waitOutRefusals(async () => {
    calls += 1;
    if (calls === 1) throw refusal(3);
    if (calls === 2) throw refusal();
    return "stored";
  }, {
    attempts: 4,
    refusedForNow: (err) => err.code === "database_busy",
    onWait: (attempt, seconds) => said.push([attempt, seconds]),
    afterWait: () => said.push("after"),
    wait: async (ms) => { waits.push(ms); },
  });
  assert.equal(answer, "stored");
  assert.deepEqual(waits, [3000, 2000]);  // no Retry-After: 2 s
  assert.deepEqual(said, [[1, 3], "after", [2, 2], "after"]);
});

test("back-pressure: the last refusal, or any other error, reaches the caller", async () => {
  let calls = 0;
  const options = { attempts: 3, refusedForNow: (err) => err.code === "database_busy", onWait: () => {}, wait: async () => {} };
  await assert.rejects(waitOutRefusals(async () => { calls += 1; throw refusal(1); }, options), { code: "database_busy" });
  assert.equal(calls, 3);
  calls = 0;
  await assert.rejects(waitOutRefusals(async () => { calls += 1; throw Object.assign(new Error("x"), { code: "time_up" }); }, options),
    { code: "time_up" });
  assert.equal(calls, 1);
});

test("back-pressure waits on a real timer by default", async () => {
  let calls = 0;
  const started = performance.now();
  await waitOutRefusals(async () => { calls += 1; if (calls === 1) throw refusal(0.05); return "ok"; },
    { attempts: 2, refusedForNow: () => true, onWait: () => {} });
  assert.ok(performance.now() - started >= 45);
});
