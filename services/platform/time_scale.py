"""The study's time scale, recorded with the database it governs.

Every unlock time, reminder and memory age is computed from ``PILOT_DAY_SECONDS`` (real seconds per
study day). A database filled under one scale and served under another moves every unlock and ages
every memory wrongly, silently. So the first start records the scale in ``database_settings``, and a
later start with a different one is refused unless ``ALLOW_TIME_SCALE_CHANGE=1`` says the change is
meant; an allowed change is recorded, and written to the audit log.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from database.models import AuditLog, DatabaseSetting
from services.platform.clock import Clock

KEY = "day_seconds"


class TimeScaleChanged(Exception):
    """The database was filled under another time scale and no change was allowed."""

    def __init__(self, recorded: float, requested: float) -> None:
        self.recorded = recorded
        self.requested = requested
        super().__init__(
            f"this database was run with PILOT_DAY_SECONDS={recorded:g} (1 study day = {recorded:g} real s), "
            f"not {requested:g}: every unlock time and memory age in it would move. Start with "
            f"PILOT_DAY_SECONDS={recorded:g}, or set ALLOW_TIME_SCALE_CHANGE=1 to change it on purpose "
            f"(the change is recorded in the audit log).")


@dataclass(frozen=True)
class TimeScaleCheck:
    outcome: str  # "recorded" (first start), "unchanged" or "changed" (allowed)
    day_seconds: float
    previous: float | None = None


def check_time_scale(session: Session, day_seconds: float, clock: Clock, *, allow_change: bool) -> TimeScaleCheck:
    """Record ``day_seconds`` on the first start; refuse another one later unless ``allow_change``.

    Commits what it records. Raises ``TimeScaleChanged`` (nothing written) for a refused change."""
    row = session.get(DatabaseSetting, KEY)
    now = clock.now()
    if row is None:
        session.add(DatabaseSetting(key=KEY, value=repr(float(day_seconds)), updated_at=now))
        session.commit()
        return TimeScaleCheck("recorded", day_seconds)
    recorded = float(row.value)
    if recorded == float(day_seconds):
        return TimeScaleCheck("unchanged", day_seconds)
    if not allow_change:
        raise TimeScaleChanged(recorded, day_seconds)
    row.value = repr(float(day_seconds))
    row.updated_at = now
    session.add(AuditLog(at=now, actor_user_id=None, action="time_scale_changed", target_user_id=None,
                         details={"day_seconds_before": recorded, "day_seconds_after": float(day_seconds),
                                  "allowed_by": "ALLOW_TIME_SCALE_CHANGE"}))
    session.commit()
    return TimeScaleCheck("changed", day_seconds, previous=recorded)
