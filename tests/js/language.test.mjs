// Language choice over plain values (static/js/core/language.js): a study text in the page's language, whether
// the page follows the account or the account learns the page's choice, where the language button goes next and
// the tag it carries.
import assert from "node:assert/strict";
import { test } from "node:test";
import { accountLanguage, languageTag, localised, nextLanguage } from "../../static/js/core/language.js";

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

test("the language button goes round the languages offered, whatever their number", () => {
  assert.equal(nextLanguage("zh", ["zh", "en"]), "en");
  assert.equal(nextLanguage("en", ["zh", "en"]), "zh");
  assert.equal(nextLanguage("en", ["en", "eo", "zh"]), "eo");
  assert.equal(nextLanguage("zh", ["en", "eo", "zh"]), "en");
  // a page in a language not offered (a link's lang the study does not speak) goes to the first offered
  assert.equal(nextLanguage("eo", ["zh", "en"]), "zh");
  assert.equal(nextLanguage("zh", []), "zh");
});

test("a language's tag is the one its catalog declares, else its name written as a tag", () => {
  const tags = { zh: "zh-CN", en: "en", eo: "eo" };
  assert.equal(languageTag("zh", tags), "zh-CN");
  assert.equal(languageTag("eo", tags), "eo");
  assert.equal(languageTag("pt_BR", tags), "pt-BR");
  assert.equal(languageTag("zh"), "zh");
});
