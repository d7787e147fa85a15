// Feeds the message box's events to the data-quality counters (core/typing_signals.js).

import { TypingSignals } from "../core/typing_signals.js";

/** Counts what happens in `input` (and the window losing focus); `stop()` removes the window's listener. */
export function watchTyping(input) {
  const signals = new TypingSignals();
  input.addEventListener("keydown", (event) => signals.keyDown(event));
  input.addEventListener("compositionstart", () => signals.began());
  input.addEventListener("compositionend", (event) => signals.compositionEnded(event.data));
  input.addEventListener("input", (event) => signals.inputEvent(event));
  input.addEventListener("paste", (event) => signals.pastedText(event.clipboardData?.getData("text")));
  const onBlur = () => signals.focusLost();
  window.addEventListener("blur", onBlur);
  return { signals, stop: () => window.removeEventListener("blur", onBlur) };
}
