"""Back-pressure: a 503's Retry-After grows with the process's recent refusals per pooled connection,
stays within its cap, and is spread by jitter so that refused clients do not come back together."""
from __future__ import annotations

import random

from services.platform.backpressure import Backpressure


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_wait_grows_with_recent_refusals_and_stops_at_the_cap():
    clock = Ticks()
    pressure = Backpressure(base_seconds=2, cap_seconds=30, window_seconds=10, capacity=10, jitter=0.0, clock=clock)
    assert pressure.retry_after() == 2  # the first refusal: the base
    waits = [pressure.retry_after() for _ in range(49)]
    assert waits == sorted(waits) and waits[-1] == 12  # 50 refusals on 10 connections: 2·(1 + 49/10)
    for _ in range(500):
        last = pressure.retry_after()
    assert last == 30  # the cap
    clock.now = 11.0  # the window has passed: the wait falls back to the base
    assert pressure.retry_after() == 2 and pressure.recent_refusals() == 1


def test_jitter_spreads_the_waits_of_refusals_given_at_once():
    pressure = Backpressure(base_seconds=4, cap_seconds=30, window_seconds=10, capacity=10**6, jitter=0.5,
                            clock=Ticks(), rng=random.Random(7))
    waits = [pressure.retry_after() for _ in range(200)]
    assert min(waits) >= 4 and max(waits) <= 6
    assert len(set(waits)) == 3  # 4, 5 and 6 s: the class does not come back in one second


def test_the_wait_is_a_whole_number_of_seconds_at_least_one():
    pressure = Backpressure(base_seconds=0.2, capacity=1, jitter=0.0, clock=Ticks())
    assert pressure.retry_after() == 1 and isinstance(pressure.retry_after(), int)
