"""Rate-limit counters in this process's memory: `make run`'s store for flask-limiter (``limits``).

``limits``' own ``memory://`` store expires its counters on a background timer that it restarts
from whichever request thread finds it stopped; two threads finding it stopped at once both call
``start()`` on the same timer, and one request fails with "threads can only be started once"
(about 1 message in 2,000 under load). This store has no thread: each fixed-window counter is a
(count, window end) pair behind one lock, an ended window restarts on its next use, and ended
windows are dropped when the table has grown, in the request that notices.

Registered under the URI scheme ``memlab-memory://``.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from limits.storage import Storage

SCHEME = "memlab-memory"
# drop ended windows once the table holds this many keys (one per limit and address or account)
PRUNE_AT = 10_000


class MemoryRateLimitStorage(Storage):
    """Fixed-window counters (``incr``/``get``/``get_expiry``) in a dict guarded by one lock."""

    STORAGE_SCHEME = [SCHEME]

    def __init__(self, uri: str | None = None, wrap_exceptions: bool = False, **options: Any) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[int, float]] = {}

    @property
    def base_exceptions(self) -> type[Exception]:
        return ValueError

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        now = time.time()
        with self._lock:
            count, ends = self._windows.get(key, (0, now))
            if ends <= now:
                count, ends = 0, now + expiry
            count += amount
            self._windows[key] = (count, ends)
            if len(self._windows) > PRUNE_AT:
                self._prune(now)
            return count

    def _prune(self, now: float) -> None:
        for key in [k for k, (_, ends) in self._windows.items() if ends <= now]:
            del self._windows[key]

    def _window(self, key: str) -> tuple[int, float] | None:
        with self._lock:
            window = self._windows.get(key)
        if window is None or window[1] <= time.time():
            return None
        return window

    def get(self, key: str) -> int:
        window = self._window(key)
        return window[0] if window else 0

    def get_expiry(self, key: str) -> float:
        window = self._window(key)
        return window[1] if window else time.time()

    def check(self) -> bool:
        return True

    def reset(self) -> int | None:
        with self._lock:
            count = len(self._windows)
            self._windows.clear()
        return count

    def clear(self, key: str) -> None:
        with self._lock:
            self._windows.pop(key, None)
