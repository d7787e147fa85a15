"""Reply pacing: a reply's timing must not reveal the participant's memory condition (issue 27, part 4).

Conditions differ in prompt size and in the work done before the model is asked (L4 recalls, S1 scores
fragments), so, unpaced, the time from a message to its reply's first token can differ by condition. The
study file's ``chat.reply_pacing`` holds replies back:

* ``off``: shown as soon as the model answers;
* ``floor``: nothing is shown before ``min_seconds`` after the message was received;
* ``match``: every condition's time to the first visible token follows one shared distribution.

Times are real seconds (not study seconds, also in pilot mode): pacing is about what a person perceives,
like the idle gap. The times are measured from when the participant's message was stored.

The ``match`` method (quantile matching; docs/reply_timing.md): the unpaced latency ``x`` of a reply
(message stored -> model's first token) is placed in its own condition's recent unpaced latencies at the
rank ``u`` (ties broken by a uniform draw), and the reply is shown at ``Q(u) = max_c Q_c(u)``, where ``Q_c``
is condition ``c``'s empirical quantile function. Since ``Q`` lies above every ``Q_c``, each condition's
visible latency then follows ``Q`` (up to sampling error of the empirical distributions). Its limits: it can
only slow replies down, so every condition is paced to the slowest condition's distribution; it learns from
the last ``window`` replies per condition, so it lags a change of provider speed; and until every enabled
condition has ``min_samples`` replies (cold start) only ``min_seconds`` applies.

Streaming keeps its pace: every event of the model's stream is shifted by the same delay (a reader thread
notes when each token arrived), so tokens are held back, never dropped or bunched, and the page shows its
typing indicator until the first one.
"""
from __future__ import annotations

import bisect
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import Message
from services.study.definition import ReplyPacing

Event = dict[str, Any]
# replies answered later than this after their message (the scheduler's late answers, a retry after a
# failure) are not what a participant waited for live: ``match`` does not learn from them
LIVE_REPLY_MS = 60_000.0


# ---------------------------------------------------------------------------
# Pure: the delay
# ---------------------------------------------------------------------------


def quantile(values: Sequence[float], u: float) -> float:
    """The empirical quantile of sorted ``values`` at ``u`` in [0, 1], linearly interpolated."""
    if not values:
        raise ValueError("no values")
    position = min(max(u, 0.0), 1.0) * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def rank_fraction(values: Sequence[float], x: float, jitter: float) -> float:
    """The inverse of ``quantile``: the ``u`` in [0, 1] at which sorted ``values`` reach ``x`` (0 below
    them, 1 above). Where several values equal ``x`` the position among them is drawn (``jitter`` uniform
    in [0, 1)), so tied latencies spread over their share of the distribution."""
    n = len(values)
    if n == 1:
        return jitter
    low, high = bisect.bisect_left(values, x), bisect.bisect_right(values, x)
    if high > low:
        position = low + jitter * (high - 1 - low)
    elif low == 0:
        position = 0.0
    elif low == n:
        position = n - 1.0
    else:
        position = low - 1 + (x - values[low - 1]) / (values[low] - values[low - 1])
    return position / (n - 1)


def match_target_ms(own_ms: float, own_samples: Sequence[float], samples: Mapping[str, Sequence[float]],
                    jitter: float) -> float:
    """The visible first-token time of a reply whose unpaced latency is ``own_ms``: its rank in its own
    condition's sorted samples, mapped through the largest of the conditions' quantile functions."""
    u = rank_fraction(own_samples, own_ms, jitter)
    return max(quantile(values, u) for values in samples.values())


@dataclass(frozen=True)
class PacingPlan:
    """One reply's pacing, fixed before the model is asked (``match``: the samples it learns from)."""

    pacing: ReplyPacing
    condition: str
    samples: Mapping[str, Sequence[float]] = field(default_factory=dict)  # sorted, per condition

    @property
    def active(self) -> bool:
        return self.pacing.mode != "off"

    @property
    def cold_start(self) -> bool:
        return self.pacing.mode == "match" and (
            not self.samples or any(len(v) < self.pacing.min_samples for v in self.samples.values()))

    def delay_ms(self, unpaced_ms: float, rng: random.Random | Callable[[], float]) -> float:
        """How long to hold back a reply whose first token came ``unpaced_ms`` after its message."""
        floor_ms = self.pacing.min_seconds * 1000.0
        target = floor_ms
        if self.pacing.mode == "match" and not self.cold_start:
            draw = rng.random() if isinstance(rng, random.Random) else rng()
            target = max(floor_ms, match_target_ms(unpaced_ms, self.samples[self.condition], self.samples, draw))
        elif self.pacing.mode == "off":
            return 0.0
        return max(0.0, target - unpaced_ms)


def recent_unpaced_ms(session: Session, conditions: Sequence[str], window: int) -> dict[str, list[float]]:
    """Per condition, the unpaced latencies (message stored -> model's first token) of its last ``window``
    live replies, sorted."""
    samples = {}
    for condition in dict.fromkeys(conditions):
        rows = session.scalars(
            select(Message.visible_first_token_ms - Message.pacing_delay_ms)
            .where(Message.role == "assistant", Message.memory_group == condition,
                   Message.visible_first_token_ms.is_not(None), Message.pacing_delay_ms.is_not(None))
            .order_by(Message.id.desc()).limit(window)).all()
        samples[condition] = sorted(float(v) for v in rows if v is not None and 0 <= v <= LIVE_REPLY_MS)
    return samples


def plan_for(session: Session, pacing: ReplyPacing, condition: str, enabled: Sequence[str]) -> PacingPlan:
    if pacing.mode != "match":
        return PacingPlan(pacing, condition)
    return PacingPlan(pacing, condition, recent_unpaced_ms(session, [*enabled, condition], pacing.window))


# ---------------------------------------------------------------------------
# Measuring and holding back
# ---------------------------------------------------------------------------


@dataclass
class ReplyTiming:
    """What one reply's timing was; stored with the reply (messages.csv)."""

    plan: PacingPlan
    received_ago_ms: float  # the message had been stored this long when the model was asked
    rng: random.Random | Callable[[], float] = field(default_factory=random.Random)
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    asked_at: float = 0.0
    model_first_token_ms: float | None = None
    model_total_ms: float | None = None
    pacing_delay_ms: float | None = None
    visible_first_token_ms: float | None = None

    @classmethod
    def start(cls, plan: PacingPlan, *, received_at: datetime, now: datetime, prepared_since: float | None = None,
              **clocks: Any) -> ReplyTiming:
        """Timing from here, when the model is asked. ``received_at`` and ``now`` (the study clock, when
        preparing began) give how long the message had waited; ``prepared_since`` (monotonic) adds the
        context building since, measured in real time also when the study clock is a manual one."""
        timing = cls(plan, max(0.0, (now - received_at).total_seconds() * 1000.0), **clocks)
        timing.asked_at = timing.monotonic()
        if prepared_since is not None:
            timing.received_ago_ms += max(0.0, (timing.asked_at - prepared_since) * 1000.0)
        return timing

    def _since_asked_ms(self, at: float) -> float:
        return (at - self.asked_at) * 1000.0

    def first_token(self, at: float) -> float:
        """The model's first token (or whole answer) came at ``at``: decide the delay, in seconds."""
        self.model_first_token_ms = round(self._since_asked_ms(at), 1)
        unpaced = self.received_ago_ms + self.model_first_token_ms
        self.pacing_delay_ms = round(self.plan.delay_ms(unpaced, self.rng), 1)
        return self.pacing_delay_ms / 1000.0

    def shown(self, at: float) -> None:
        if self.visible_first_token_ms is None:
            self.visible_first_token_ms = round(self.received_ago_ms + self._since_asked_ms(at), 1)

    def hold_until(self, at: float) -> None:
        wait = at - self.monotonic()
        if wait > 0:
            self.sleep(wait)

    def blocking(self, answered_at: float) -> None:
        """A non-streamed reply answered at ``answered_at``: hold it back, then it is shown whole."""
        self.model_total_ms = round(self._since_asked_ms(answered_at), 1)
        delay = self.first_token(answered_at)
        self.hold_until(answered_at + delay)
        self.shown(self.monotonic())

    def columns(self) -> dict[str, float | None]:
        return {"model_first_token_ms": self.model_first_token_ms, "model_total_ms": self.model_total_ms,
                "pacing_delay_ms": self.pacing_delay_ms, "visible_first_token_ms": self.visible_first_token_ms}

    def audit(self) -> dict[str, Any]:
        """Stored in the reply's params: how its delay was decided."""
        pacing = self.plan.pacing
        data: dict[str, Any] = {"mode": pacing.mode, "min_seconds": pacing.min_seconds,
                                "received_ago_ms": round(self.received_ago_ms, 1)}
        if pacing.mode == "match":
            data.update(cold_start=self.plan.cold_start, samples={c: len(v) for c, v in self.plan.samples.items()})
        return data

    def stream(self, events: Iterator[Event]) -> Iterator[Event]:
        """The model's stream with every event shifted by the delay decided at its first token (or result)."""
        if not self.plan.active:
            yield from self._timed(events)
            return
        yield from self._shifted(events)

    def _note(self, event: Event, at: float) -> float:
        """Record ``event`` arriving at ``at``; the delay (s) once the first visible event has come."""
        if "result" in event:
            self.model_total_ms = round(self._since_asked_ms(at), 1)
        if self.model_first_token_ms is None and ("delta" in event or "result" in event):
            return self.first_token(at)
        return (self.pacing_delay_ms or 0.0) / 1000.0

    def _timed(self, events: Iterator[Event]) -> Iterator[Event]:
        events = iter(events)
        for event in events:
            self._note(event, self.monotonic())
            if "delta" in event or "result" in event:
                self.shown(self.monotonic())
                yield event
                break
            yield event
        # the first token is timed: the rest pass on untouched (a clock read per token was for nothing),
        # except the result, which says when the model finished
        for event in events:
            if "result" in event:
                self._note(event, self.monotonic())
            yield event

    def _shifted(self, events: Iterator[Event]) -> Iterator[Event]:
        arrivals: queue.Queue[tuple[float, Event | None, BaseException | None]] = queue.Queue()
        stop = threading.Event()

        def read() -> None:
            try:
                for event in events:
                    arrivals.put((self.monotonic(), event, None))
                    if stop.is_set():
                        return
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
                arrivals.put((self.monotonic(), None, exc))
                return
            arrivals.put((self.monotonic(), None, None))

        reader = threading.Thread(target=read, name="reply-pacing-reader", daemon=True)
        reader.start()
        try:
            while True:
                at, event, error = arrivals.get()
                if error is not None:
                    raise error
                if event is None:
                    return
                delay = self._note(event, at)
                self.hold_until(at + delay)
                if "delta" in event or "result" in event:
                    self.shown(self.monotonic())
                yield event
        finally:
            stop.set()
