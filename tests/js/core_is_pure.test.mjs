// static/js/core/ is the pages' functional core: its modules import only each other (never the DOM helpers,
// the API client or i18n.js, which read the browser at import), so node imports every one of them.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";

const core = new URL("../../static/js/core/", import.meta.url);
const modules = readdirSync(core).filter((name) => name.endsWith(".js"));

test("core/ holds the modules the page tests import", () => {
  for (const name of ["failure_attempt.js", "format.js", "language.js", "monitor_rows.js", "sending.js", "timing.js",
    "typing_signals.js"]) {
    assert.ok(modules.includes(name), name);
  }
});

test("a core module imports only core modules and uses no browser global", async () => {
  for (const name of modules) {
    const text = readFileSync(new URL(name, core), "utf8");
    for (const [, from] of text.matchAll(/\bfrom\s+"([^"]+)"/g)) {
      assert.match(from, /^\.\/[a-z_]+\.js$/, `${name} imports ${from}`);
    }
    assert.doesNotMatch(text, /\b(document|window|localStorage|sessionStorage|location|navigator)\b\s*[.[]/,
      `${name} touches the browser`);
    await import(new URL(name, core));
  }
});
