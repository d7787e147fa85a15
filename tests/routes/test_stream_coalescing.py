"""A streamed reply's deltas are joined into at most one event per STREAM_FLUSH_SECONDS: the first at once,
no text lost or reordered, and held text always sent before a ``reset``, the ``reply`` or an ``error``."""
from __future__ import annotations

from routes.participant import coalesce_deltas


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _timed(events, clock, step):
    for event in events:
        yield event
        clock.now += step


def test_tokens_every_25_ms_leave_in_events_at_least_100_ms_apart():
    clock = Clock()
    tokens = [{"delta": str(i % 10)} for i in range(40)]  # one second of a model at 40 tokens/s
    out = list(coalesce_deltas(_timed([*tokens, {"reply": {"content": "x"}}], clock, 0.025), 0.1, clock))
    deltas = [e["delta"] for e in out if "delta" in e]
    assert out[0] == {"delta": "0"}  # the first token at once: the typing indicator goes away without delay
    assert "".join(deltas) == "".join(t["delta"] for t in tokens)
    assert len(deltas) <= 11  # 40 tokens in ~10 events
    assert out[-1] == {"reply": {"content": "x"}}


def test_held_text_goes_out_before_a_reset_and_an_error():
    clock = Clock()  # the clock never moves: everything after the first delta is held
    events = [{"delta": "a"}, {"delta": "b"}, {"reset": True}, {"delta": "c"}, {"delta": "d"},
              {"error": {"error": "provider_unavailable"}}]
    assert list(coalesce_deltas(iter(events), 0.1, clock)) == [
        {"delta": "a"}, {"delta": "b"}, {"reset": True}, {"delta": "cd"},
        {"error": {"error": "provider_unavailable"}}]


def test_a_stream_that_ends_without_a_final_event_still_sends_its_text():
    clock = Clock()
    assert list(coalesce_deltas(iter([{"delta": "a"}, {"delta": "b"}, {"delta": "c"}]), 0.1, clock)) == [
        {"delta": "a"}, {"delta": "bc"}]
