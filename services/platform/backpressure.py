"""Back-pressure: how long a client that was refused for now (503) should wait before asking again.

A fixed ``Retry-After`` sends every client refused in the same second back in the same second, so an
overload repeats itself in waves (the 1,000-participant load run resent 1,845 messages). Here the wait
grows with how many refusals this process gave in the last ``window_seconds``, per connection of its
request pool (a pool that refused twice its size in ten seconds is not free two seconds later), and
carries jitter, so the refused clients come back spread out.

One ``Backpressure`` per process (``BACKPRESSURE``); ``app.create_app`` sizes it to the request pool.
Every 503 of the platform (the JSON error, the database-busy answer, a stream's ``error`` event) takes
its ``Retry-After`` from ``retry_after()``, and the participant page and the bots wait for what it says.
"""
from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable


class Backpressure:
    def __init__(self, *, base_seconds: float = 2.0, cap_seconds: float = 30.0, window_seconds: float = 10.0,
                 capacity: int = 10, jitter: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.base_seconds = base_seconds
        self.cap_seconds = cap_seconds
        self.window_seconds = window_seconds
        self.capacity = max(1, capacity)
        self.jitter = jitter
        self._clock = clock
        self._rng = rng or random.Random()
        self._refusals: deque[float] = deque()
        self._lock = threading.Lock()

    def configure(self, *, capacity: int) -> None:
        """The request pool's connections (pool size + overflow)."""
        self.capacity = max(1, capacity)

    def recent_refusals(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._refusals)

    def retry_after(self) -> int:
        """Record one refusal now and return the whole seconds the client should wait (HTTP's
        ``Retry-After`` is an integer): base·(1 + recent refusals / capacity), at most the cap, times a
        random factor in [1, 1 + jitter]."""
        now = self._clock()
        with self._lock:
            self._expire(now)
            self._refusals.append(now)
            recent = len(self._refusals)
            factor = 1.0 + self._rng.uniform(0.0, self.jitter)
        wait = min(self.cap_seconds, self.base_seconds * (1.0 + (recent - 1) / self.capacity)) * factor
        return max(1, min(int(round(wait)), int(self.cap_seconds * (1.0 + self.jitter))))

    def _expire(self, now: float) -> None:
        while self._refusals and now - self._refusals[0] > self.window_seconds:
            self._refusals.popleft()


BACKPRESSURE = Backpressure()


def retry_after() -> int:
    """``BACKPRESSURE.retry_after()``: seconds to put in a 503's ``Retry-After``."""
    return BACKPRESSURE.retry_after()
