"""Work that must not block a participant's request: consolidation, S1 summary updates.

A small thread pool per app. With ``inline=True`` (tests, scripts) the work runs
at once in the caller's thread, so its effects can be asserted right after the
response. Failures are logged; the work itself records its status in the
database (consolidation runs, provider failures), where admins see it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)


class BackgroundRunner:
    def __init__(self, *, inline: bool = False, max_workers: int = 2) -> None:
        self.inline = inline
        self._pool = None if inline else ThreadPoolExecutor(max_workers=max_workers,
                                                            thread_name_prefix="memory-lab-bg")

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future | None:
        if self._pool is None:
            try:
                fn(*args, **kwargs)
            except Exception:
                log.exception("background job %s failed", getattr(fn, "__name__", fn))
            return None
        future = self._pool.submit(fn, *args, **kwargs)
        future.add_done_callback(_log_failure)
        return future

    def shutdown(self, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait)


def _log_failure(future: Future) -> None:
    exc = future.exception()
    if exc is not None:
        log.error("background job failed", exc_info=exc)
