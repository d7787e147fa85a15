// Data-quality signals sent with each message (codebook: messages.csv), counted since the last send.
// Text reaches the box by key presses, an input method's compositions (pinyin), a paste, or with no key at
// all (dictation, autocomplete): each is counted, and the source of most characters is the input kind.
// Plain counting over the events' fields (no DOM): chat/typing_signals.js feeds it the box's events.

const capped = (value, cap) => Math.max(0, Math.min(Math.round(value), cap));

export class TypingSignals {
  /** `now` gives milliseconds on a monotonic clock (performance.now in the page). */
  constructor(now = () => performance.now()) {
    this.now = now;
    this.reset();
  }

  reset() {
    Object.assign(this, {
      firstKeyAt: null, keystrokes: 0, pasted: 0, focusLosses: 0, inputEvents: 0, compositions: 0,
      keyPending: false, chars: { typed: 0, composed: 0, pasted: 0, dictated: 0 },
    });
  }

  began() {
    if (this.firstKeyAt === null) this.firstKeyAt = this.now();
  }

  keyDown({ isComposing, keyCode, key }) {
    this.began();
    this.keystrokes += 1;
    // a key an input method takes (keyCode 229) composes; the characters come at compositionend
    this.keyPending = !isComposing && keyCode !== 229 && key?.length === 1;
  }

  compositionEnded(data) {
    this.began();
    this.compositions += 1;
    this.chars.composed += [...(data || "")].length;
  }

  inputEvent({ inputType, data, isComposing }) {
    this.began();
    this.inputEvents += 1;
    const type = inputType || "";
    const inserted = [...(data || "")].length;
    if (isComposing || type === "insertCompositionText" || type.startsWith("insertFromPaste")) {
      // counted at compositionend, or by the paste handler
    } else if (type === "insertFromDrop") {
      this.chars.pasted += inserted;
    } else if (type.startsWith("insert") && inserted) {
      // characters after a key press were typed; characters with no key press before them were dictated,
      // autocompleted or chosen from a suggestion
      this.chars[this.keyPending ? "typed" : "dictated"] += inserted;
    }
    this.keyPending = false;
  }

  pastedText(text) {
    this.began();
    const pasted = (text || "").length;
    this.pasted += pasted;
    this.chars.pasted += pasted;
  }

  focusLost() {
    this.focusLosses += 1;
  }

  inputKind() {
    const entries = Object.entries(this.chars).filter(([, count]) => count > 0);
    if (!entries.length) return "unknown";  // no input seen: a restored draft, or text set by other means
    return entries.reduce((best, entry) => (entry[1] > best[1] ? entry : best))[0];
  }

  /** The fields a message is posted with. */
  signals() {
    return {
      typing_ms: capped(this.firstKeyAt === null ? 0 : this.now() - this.firstKeyAt, 86_400_000),
      keystrokes: capped(this.keystrokes, 200_000),
      pasted_chars: capped(this.pasted, 1_000_000),
      focus_losses: capped(this.focusLosses, 10_000),
      input_events: capped(this.inputEvents, 200_000),
      composition_events: capped(this.compositions, 200_000),
      input_kind: this.inputKind(),
    };
  }
}
