"""The study's clock. Code asks a Clock for the time so tests and simulations can move it.

All times are naive UTC datetimes (what SQLite stores). ``ManualClock`` is a
real clock whose time only moves when told to; it is used by tests and by
simulations that skip days.
"""
from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

SECONDS_PER_DAY = 86400  # real seconds in a study day outside pilot mode (PILOT_DAY_SECONDS shortens it)


class Clock:
    def now(self) -> datetime:
        return datetime.now(UTC).replace(tzinfo=None)


class ManualClock(Clock):
    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 5, 9, 0, 0)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0.0, *, days: float = 0.0) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds, days=days)
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when


def utc_iso(value: datetime | None) -> str | None:
    """A stored (naive UTC) time as the API writes it: ISO 8601 to the second, with a ``Z``."""
    return value.isoformat(timespec="seconds") + "Z" if value else None


def parse_utc_iso(value: str) -> datetime:
    """The naive UTC datetime of a string written by ``utc_iso`` (its inverse)."""
    return datetime.fromisoformat(value.rstrip("Z"))
