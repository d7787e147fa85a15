"""Reply pacing (chat.reply_pacing): the study file's key, match mode's quantile matching as pure
functions with a seeded RNG, and the held-back stream that keeps the model's pace."""
from __future__ import annotations

import random
import re
import statistics
import time

import pytest

from services.chat.pacing import PacingPlan, ReplyTiming, match_target_ms, quantile, rank_fraction
from services.llm.types import ChatResult
from services.study.definition import ReplyPacing, StudyDefinitionError, load_study


def test_the_default_study_does_not_pace():
    assert load_study().chat.reply_pacing == ReplyPacing(mode="off")


@pytest.mark.parametrize("pacing, expected", [
    ({"mode": "floor", "min_seconds": 2.5}, ReplyPacing("floor", 2.5)),
    ({"mode": "match"}, ReplyPacing("match")),
    ({"mode": "match", "min_seconds": 1, "window": 50, "min_samples": 10}, ReplyPacing("match", 1.0, 50, 10)),
])
def test_valid_pacing_is_typed(pacing, expected):
    assert load_study(overrides={"chat": {"reply_pacing": pacing}}).chat.reply_pacing == expected


@pytest.mark.parametrize("pacing, message", [
    ({"mode": "slow"}, "chat.reply_pacing.mode is 'slow'; allowed: off, floor, match"),
    ({"mode": "floor"}, "missing key chat.reply_pacing.min_seconds"),
    ({"mode": "floor", "min_seconds": 0}, "must be above 0 in mode 'floor'"),
    ({"mode": "floor", "min_seconds": -1}, "min_seconds must be between 0 and 120"),
    ({"mode": "floor", "min_seconds": "3"}, "chat.reply_pacing.min_seconds must be float"),
    ({"mode": "floor", "min_seconds": True}, "chat.reply_pacing.min_seconds must be float"),
    ({"mode": "floor", "min_seconds": 2, "window": 10}, "unknown key chat.reply_pacing.window"),
    ({"mode": "off", "min_seconds": 2}, "unknown key chat.reply_pacing.min_seconds; allowed here: mode"),
    ({"mode": "match", "min_samples": 1}, "min_samples must be at least 2"),
    ({"mode": "match", "window": 5, "min_samples": 10}, "window at least min_samples"),
    ("floor", "chat.reply_pacing must be a mapping"),
])
def test_bad_pacing_is_refused_naming_the_key(pacing, message):
    with pytest.raises(StudyDefinitionError, match=re.escape(message)):
        load_study(overrides={"chat": {"reply_pacing": pacing}})


def test_an_unknown_chat_key_is_refused():
    with pytest.raises(StudyDefinitionError, match=re.escape("unknown key chat.reply_pace")):
        load_study(overrides={"chat": {"reply_pace": {"mode": "off"}}})


def test_rank_fraction_inverts_the_quantile():
    values = [100.0, 150.0, 400.0, 1000.0]
    for x in (100.0, 120.0, 150.0, 399.0, 999.0):
        assert quantile(values, rank_fraction(values, x, 0.0)) == pytest.approx(x)
    assert rank_fraction(values, 50.0, 0.5) == 0.0 and rank_fraction(values, 5000.0, 0.5) == 1.0


def test_tied_latencies_spread_by_the_seeded_draw():
    values = [10.0, 20.0, 20.0, 20.0, 20.0, 30.0]  # four ties: positions 1..4
    draws = [rank_fraction(values, 20.0, random.Random(seed).random()) for seed in range(200)]
    assert min(draws) >= 1 / 5 and max(draws) <= 4 / 5
    assert statistics.mean(draws) == pytest.approx(0.5, abs=0.05)
    again = [rank_fraction(values, 20.0, random.Random(seed).random()) for seed in range(200)]
    assert draws == again  # the same seed, the same draw


def test_match_holds_a_fast_condition_to_the_slow_conditions_distribution():
    """Two conditions, one fast (100-300 ms) and one slow (500-1500 ms): after matching, the time to the
    first visible token has the same distribution in both, nobody is sped up, and the slowest condition
    is barely held back."""
    rng = random.Random(27)
    fast = lambda: rng.uniform(100, 300)  # noqa: E731
    slow = lambda: rng.uniform(500, 1500)  # noqa: E731
    samples = {"L1": sorted(fast() for _ in range(400)), "L4": sorted(slow() for _ in range(400))}
    pacing = ReplyPacing("match", min_samples=20)
    visible = {}
    for condition, draw in (("L1", fast), ("L4", slow)):
        plan = PacingPlan(pacing, condition, samples)
        assert not plan.cold_start
        shown = []
        for _ in range(2000):
            own = draw()
            delay = plan.delay_ms(own, rng)
            assert delay >= 0
            shown.append(own + delay)
        visible[condition] = sorted(shown)
    for u in (0.1, 0.25, 0.5, 0.75, 0.9):
        assert quantile(visible["L1"], u) == pytest.approx(quantile(visible["L4"], u), rel=0.06)
    assert statistics.median(visible["L1"]) > 900  # the fast condition was slowed to the slow one
    assert statistics.mean(visible["L4"]) == pytest.approx(1000, rel=0.06)  # the slow one stays as it was


def test_match_never_speeds_a_reply_up():
    samples = {"L1": [100.0, 200.0, 300.0], "L2": [50.0, 60.0, 70.0]}
    for own in (100.0, 150.0, 250.0, 300.0):  # within its condition's samples: the target is at least itself
        assert match_target_ms(own, samples["L1"], samples, 0.3) >= own
    plan = PacingPlan(ReplyPacing("match", min_samples=3), "L1", samples)
    assert plan.delay_ms(900.0, random.Random(3)) == 0.0  # slower than anything seen: shown as it comes
    assert plan.delay_ms(10.0, random.Random(3)) == 90.0  # faster than anything seen: held to the lowest


def test_match_cold_start_applies_only_the_floor():
    pacing = ReplyPacing("match", min_seconds=0.5, min_samples=20)
    plan = PacingPlan(pacing, "L1", {"L1": [100.0] * 30, "L4": [900.0] * 5})
    assert plan.cold_start
    assert plan.delay_ms(200.0, random.Random(1)) == 300.0
    assert plan.delay_ms(800.0, random.Random(1)) == 0.0


def test_floor_and_off():
    assert PacingPlan(ReplyPacing("floor", 2.0), "L1").delay_ms(500.0, random.Random(0)) == 1500.0
    assert PacingPlan(ReplyPacing("floor", 2.0), "L1").delay_ms(2500.0, random.Random(0)) == 0.0
    assert PacingPlan(ReplyPacing("off"), "L1").delay_ms(10.0, random.Random(0)) == 0.0


def _model_stream(arrivals: list[float], gap: float = 0.03, n: int = 5):
    for i in range(n):
        time.sleep(gap)
        arrivals.append(time.monotonic())
        yield {"delta": f"t{i} "}
    yield {"result": ChatResult(text="".join(f"t{i} " for i in range(n)), provider="p", model="m")}


def test_a_held_back_stream_shifts_every_token_by_the_same_delay():
    """Floor 0.25 s: the first token is shown no earlier than 0.25 s after the message, and each later token
    no earlier than its own arrival plus the same delay (held back, not bunched), all of them, in order."""
    from datetime import datetime

    now = datetime(2026, 3, 2, 9, 0, 0)
    timing = ReplyTiming.start(PacingPlan(ReplyPacing("floor", 0.25), "L1"), received_at=now, now=now)
    arrivals: list[float] = []
    shown: list[tuple[float, dict]] = []
    for event in timing.stream(_model_stream(arrivals)):
        shown.append((time.monotonic(), event))
    deltas = [e["delta"] for _, e in shown if "delta" in e]
    assert deltas == [f"t{i} " for i in range(5)] and "result" in shown[-1][1]
    delay = timing.pacing_delay_ms / 1000
    assert delay > 0.1 and timing.model_first_token_ms >= 30
    assert shown[0][0] - timing.asked_at >= 0.25
    for arrived, (at, _) in zip(arrivals, shown, strict=False):
        assert at >= arrived + delay - 0.002
    assert timing.visible_first_token_ms >= 250
    assert timing.model_total_ms >= timing.model_first_token_ms


def test_an_unpaced_stream_is_timed_without_a_delay():
    from datetime import datetime

    now = datetime(2026, 3, 2, 9, 0, 0)
    timing = ReplyTiming.start(PacingPlan(ReplyPacing("off"), "L1"), received_at=now, now=now)
    events = list(timing.stream(_model_stream([], gap=0.0)))
    assert len(events) == 6 and timing.pacing_delay_ms == 0.0
    assert timing.visible_first_token_ms >= timing.model_first_token_ms


def test_a_stream_failure_reaches_the_caller_through_the_hold():
    from datetime import datetime

    def failing():
        yield {"delta": "a"}
        raise RuntimeError("provider broke")

    now = datetime(2026, 3, 2, 9, 0, 0)
    timing = ReplyTiming.start(PacingPlan(ReplyPacing("floor", 0.05), "L1"), received_at=now, now=now)
    seen = []
    with pytest.raises(RuntimeError, match="provider broke"):
        for event in timing.stream(failing()):
            seen.append(event)
    assert seen == [{"delta": "a"}]
