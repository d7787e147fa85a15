// Language choice over plain values (static/js/core/language.js): a study text in the page's language, and
// whether the page follows the account or the account learns the page's choice.
import assert from "node:assert/strict";
import { test } from "node:test";
import { accountLanguage, localised } from "../../static/js/core/language.js";

test("a study text in the page's language, else the Chinese, else any", () => {
  assert.equal(localised({ zh: "你好", en: "Hello" }, "en"), "Hello");
  assert.equal(localised({ zh: "你好", en: "Hello" }, "zh"), "你好");
  assert.equal(localised({ zh: "你好" }, "en"), "你好");
  assert.equal(localised({ de: "Hallo" }, "en"), "Hallo");
  assert.equal(localised({ en: "" , zh: "" }, "en"), "");
  assert.equal(localised("plain text", "en"), "plain text");
  assert.equal(localised(null, "en"), "");
});

test("a choice made on this page is stored on a participant's account that says otherwise", () => {
  assert.deepEqual(accountLanguage("en", { role: "participant", language: "zh" }), { store: "en" });
});

test("otherwise the page follows the account", () => {
  assert.deepEqual(accountLanguage(null, { role: "participant", language: "en" }), { adopt: "en" });
  assert.deepEqual(accountLanguage("en", { role: "participant", language: "en" }), { adopt: "en" });
  // staff accounts are never rewritten by a participant link's language
  assert.deepEqual(accountLanguage("en", { role: "admin", language: "zh" }), { adopt: "zh" });
});

test("an account with no language and no choice here changes nothing", () => {
  assert.deepEqual(accountLanguage(null, { role: "participant", language: null }), {});
  assert.deepEqual(accountLanguage("en", { role: "admin" }), {});
});
