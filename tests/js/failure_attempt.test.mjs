// A failure row's try in words (static/js/core/failure_attempt.js): the server sends facts, a catalog key says them.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { attemptMessage } from "../../static/js/core/failure_attempt.js";

test("a retried try names its number and the delay", () => {
  assert.deepEqual(attemptMessage({ try: 2, action: "retry", retry_in_s: 0.5 }),
    { key: "admin.failures.attempt.retry", vars: { try: 2, seconds: 0.5 } });
});

test("a try followed by the fallback or by giving up says which", () => {
  assert.equal(attemptMessage({ try: 1, action: "fallback", retry_in_s: null }).key, "admin.failures.attempt.fallback");
  assert.equal(attemptMessage({ try: 3, action: "give_up" }).key, "admin.failures.attempt.give_up");
  assert.equal(attemptMessage({ try: 3, action: null }).key, "admin.failures.attempt.give_up");
});

test("a provider skipped with its circuit open was not tried; a row without a try has no words", () => {
  assert.equal(attemptMessage({ try: 0, action: "fallback" }).key, "admin.failures.attempt.not_tried");
  assert.equal(attemptMessage({ try: null, action: null }), null);
  assert.equal(attemptMessage({}), null);
});

test("an action this page does not know is shown as it was stored", () => {
  assert.deepEqual(attemptMessage({ try: 1, action: "queued" }),
    { key: "admin.failures.attempt.other", vars: { try: 1, action: "queued" } });
});

test("every key it can give is in both catalogs, with the placeholders it fills", () => {
  const rows = [{ try: 2, action: "retry", retry_in_s: 1 }, { try: 1, action: "fallback" }, { try: 1, action: "give_up" },
    { try: 0 }, { try: 1, action: "queued" }];
  for (const lang of ["en", "zh"]) {
    const po = readFileSync(new URL(`../../translations/${lang}/LC_MESSAGES/messages.po`, import.meta.url), "utf8");
    for (const { key, vars } of rows.map(attemptMessage)) {
      const found = po.match(new RegExp(`^msgid "${key.replace(/\./g, "\\.")}"\\nmsgstr "(.+)"$`, "m"));
      assert.ok(found, `${lang} has ${key}`);
      const names = [...found[1].matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
      assert.deepEqual(names, Object.keys(vars).sort(), `${lang} ${key}`);
    }
  }
});
