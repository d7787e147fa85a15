// The data-quality signals sent with each message (static/js/core/typing_signals.js), fed with the fields of
// the browser events the message box sees.
import assert from "node:assert/strict";
import { test } from "node:test";
import { TypingSignals } from "../../static/js/core/typing_signals.js";

function clock(start = 1000) {
  const c = { at: start, now: () => c.at };
  return c;
}

function typeKey(signals, key) {
  signals.keyDown({ isComposing: false, keyCode: key.charCodeAt(0), key });
  signals.inputEvent({ inputType: "insertText", data: key, isComposing: false });
}

test("nothing seen: no typing time and an unknown input kind", () => {
  const signals = new TypingSignals(clock().now).signals();
  assert.deepEqual(signals, {
    typing_ms: 0, keystrokes: 0, pasted_chars: 0, focus_losses: 0, input_events: 0, composition_events: 0,
    input_kind: "unknown",
  });
});

test("characters after key presses are typed, and the typing time runs from the first key", () => {
  const c = clock();
  const signals = new TypingSignals(c.now);
  typeKey(signals, "h");
  c.at += 1500;
  typeKey(signals, "i");
  c.at += 250.4;
  const sent = signals.signals();
  assert.equal(sent.typing_ms, 1750);
  assert.equal(sent.keystrokes, 2);
  assert.equal(sent.input_events, 2);
  assert.equal(sent.input_kind, "typed");
});

test("an input method's keys (keyCode 229) compose: the characters are counted at compositionend", () => {
  const signals = new TypingSignals(clock().now);
  for (const key of ["n", "i", "h", "a", "o"]) {
    signals.keyDown({ isComposing: true, keyCode: 229, key: "Process" });
    signals.inputEvent({ inputType: "insertCompositionText", data: key, isComposing: true });
  }
  signals.began();  // compositionstart
  signals.compositionEnded("你好");
  const sent = signals.signals();
  assert.equal(sent.keystrokes, 5);
  assert.equal(sent.composition_events, 1);
  assert.equal(sent.input_kind, "composed");
  assert.deepEqual(signals.chars, { typed: 0, composed: 2, pasted: 0, dictated: 0 });
});

test("text with no key press before it was dictated or autocompleted", () => {
  const signals = new TypingSignals(clock().now);
  signals.inputEvent({ inputType: "insertText", data: "hello there", isComposing: false });
  typeKey(signals, "!");
  assert.equal(signals.signals().input_kind, "dictated");
  assert.deepEqual(signals.chars, { typed: 1, composed: 0, pasted: 0, dictated: 11 });
});

test("a paste is counted once (by the paste event, not its input event), a drop as pasted", () => {
  const signals = new TypingSignals(clock().now);
  signals.pastedText("copied words");
  signals.inputEvent({ inputType: "insertFromPaste", data: null, isComposing: false });
  signals.inputEvent({ inputType: "insertFromDrop", data: "dropped", isComposing: false });
  const sent = signals.signals();
  assert.equal(sent.pasted_chars, 12);
  assert.equal(sent.input_kind, "pasted");
  assert.deepEqual(signals.chars, { typed: 0, composed: 0, pasted: 19, dictated: 0 });
});

test("deletions count as input events but add no characters; a non-printing key types nothing", () => {
  const signals = new TypingSignals(clock().now);
  signals.keyDown({ isComposing: false, keyCode: 8, key: "Backspace" });
  signals.inputEvent({ inputType: "deleteContentBackward", data: null, isComposing: false });
  signals.keyDown({ isComposing: false, keyCode: 16, key: "Shift" });
  signals.inputEvent({ inputType: "insertText", data: "x", isComposing: false });
  assert.equal(signals.signals().input_events, 2);
  assert.deepEqual(signals.chars, { typed: 0, composed: 0, pasted: 0, dictated: 1 });
});

test("the kind is the source of most characters; characters are code points, not UTF-16 units", () => {
  const signals = new TypingSignals(clock().now);
  typeKey(signals, "a");
  signals.compositionEnded("😀😀");
  assert.equal(signals.chars.composed, 2);
  assert.equal(signals.signals().input_kind, "composed");
});

test("focus losses are counted, and every figure is capped and never negative", () => {
  const c = clock();
  const signals = new TypingSignals(c.now);
  signals.focusLost();
  signals.focusLost();
  signals.began();
  c.at += 2 * 86_400_000;
  signals.keystrokes = 500_000;
  signals.focusLosses = -3;
  const sent = signals.signals();
  assert.equal(sent.typing_ms, 86_400_000);
  assert.equal(sent.keystrokes, 200_000);
  assert.equal(sent.focus_losses, 0);
});

test("after a message is stored the counts start again", () => {
  const c = clock();
  const signals = new TypingSignals(c.now);
  typeKey(signals, "a");
  signals.focusLost();
  signals.reset();
  c.at += 5000;
  assert.deepEqual(signals.signals(), new TypingSignals(c.now).signals());
  typeKey(signals, "b");
  c.at += 10;
  assert.equal(signals.signals().typing_ms, 10);
});

test("events without data or type add nothing but the event; the page's clock is performance.now", () => {
  const signals = new TypingSignals();
  signals.compositionEnded(undefined);
  signals.inputEvent({ isComposing: false });
  signals.pastedText(undefined);
  signals.keyDown({ isComposing: false, keyCode: 0 });
  assert.deepEqual(signals.chars, { typed: 0, composed: 0, pasted: 0, dictated: 0 });
  assert.equal(signals.signals().input_events, 1);
  assert.ok(signals.firstKeyAt > 0 && signals.firstKeyAt <= performance.now());
});
