"""Admin API (admin role only): monitor, participant record, actions."""
from __future__ import annotations

from flask import Blueprint

from routes.access import admin_required, db_session, ok, runtime
from services import admin_service
from services.chat_service import task_service

bp = Blueprint("admin", __name__, url_prefix="/api/admin")


@bp.get("/participants")
@admin_required
def participants():
    rows = admin_service.monitor_rows(db_session(), task_service(db_session(), runtime()))
    return ok({"participants": rows})


@bp.get("/participants/<int:user_id>")
@admin_required
def participant(user_id: int):
    return ok(admin_service.participant_record(db_session(), task_service(db_session(), runtime()), user_id))
