"""The study's time scale is recorded with the database; another one is refused unless allowed."""
import pytest
from sqlalchemy import select

from database.models import AuditLog, DatabaseSetting
from services.platform.time_scale import TimeScaleChanged, check_time_scale

pytestmark = pytest.mark.postgres


def test_first_start_records_the_scale_and_the_same_scale_passes(db_session, clock):
    assert check_time_scale(db_session, 60.0, clock, allow_change=False).outcome == "recorded"
    assert float(db_session.get(DatabaseSetting, "day_seconds").value) == 60.0
    assert check_time_scale(db_session, 60.0, clock, allow_change=False).outcome == "unchanged"


def test_another_scale_is_refused_and_nothing_changes(db_session, clock):
    check_time_scale(db_session, 60.0, clock, allow_change=False)
    with pytest.raises(TimeScaleChanged, match="PILOT_DAY_SECONDS=60.*not 86400.*ALLOW_TIME_SCALE_CHANGE=1"):
        check_time_scale(db_session, 86400.0, clock, allow_change=False)
    db_session.rollback()
    assert float(db_session.get(DatabaseSetting, "day_seconds").value) == 60.0
    assert db_session.scalars(select(AuditLog).where(AuditLog.action == "time_scale_changed")).all() == []


def test_an_allowed_change_is_recorded_and_audited(db_session, clock):
    check_time_scale(db_session, 60.0, clock, allow_change=False)
    result = check_time_scale(db_session, 120.0, clock, allow_change=True)
    assert (result.outcome, result.previous) == ("changed", 60.0)
    assert float(db_session.get(DatabaseSetting, "day_seconds").value) == 120.0
    audit = db_session.scalars(select(AuditLog).where(AuditLog.action == "time_scale_changed")).one()
    assert audit.details == {"day_seconds_before": 60.0, "day_seconds_after": 120.0,
                             "allowed_by": "ALLOW_TIME_SCALE_CHANGE"}
    assert check_time_scale(db_session, 120.0, clock, allow_change=False).outcome == "unchanged"
