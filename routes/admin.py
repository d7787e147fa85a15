"""Admin API (admin role only): the monitor, a participant's record, and the actions on participants."""
from __future__ import annotations

from flask import Blueprint, request

from routes.access import current, db_session, json_body, ok, runtime, staff_permission
from services.chat.chat_service import task_service
from services.operations import admin_service
from services.participants import erasure_service, panel_service
from services.platform.clock import utc_iso
from services.research import preflight

bp = Blueprint("admin", __name__, url_prefix="/api/admin")


def _now_iso() -> str:
    return utc_iso(runtime().clock.now())


@bp.get("/participants")
@staff_permission("monitor")
def participants():
    """Monitor rows, filtered by ?group=L1&status=active|withdrawn|erased&overdue=1|0&pasted=1|0&failed_checks=1|0
    &implausible_typing=1|0; the summary counts everyone."""
    rt = runtime()
    rows = admin_service.monitor_rows(db_session(), task_service(db_session(), rt))
    args = request.args
    shown = admin_service.filter_rows(rows, rt.study, group=args.get("group"), status=args.get("status"),
                                      overdue=args.get("overdue"), pasted=args.get("pasted"),
                                      failed_checks=args.get("failed_checks"),
                                      implausible_typing=args.get("implausible_typing"))
    return ok({"participants": shown, "summary": admin_service.monitor_summary(rows, rt.study),
               "integrity": admin_service.integrity_summary(db_session(), rows, rt.study, rt.clock.now()),
               "generated_at": _now_iso()})


@bp.get("/preflight")
@staff_permission("monitor")
def preflight_status():
    """The latest pre-flight report and its state for the current study definition (the console's banner)."""
    rt = runtime()
    return ok({"preflight": preflight.preflight_status(db_session(), rt.settings, rt.embedder.model)})


@bp.get("/participants/<id:user_id>")
@staff_permission("read_conversations")
def participant(user_id: int):
    return ok(admin_service.participant_record(db_session(), task_service(db_session(), runtime()), user_id))


@bp.post("/participants/<id:user_id>/consolidate")
@staff_permission("consolidate")
def consolidate_participant(user_id: int):
    """Consolidate this participant's closed, unconsolidated tasks now (the admin waits for the result)."""
    admin_service.get_participant(db_session(), user_id)
    return ok(admin_service.consolidate_now(runtime(), user_id=user_id, actor=current()))


@bp.post("/consolidate-pending")
@staff_permission("consolidate")
def consolidate_pending():
    return ok(admin_service.consolidate_now(runtime(), actor=current()))


@bp.post("/participants/<id:user_id>/withdraw")
@staff_permission("withdraw")
def withdraw(user_id: int):
    session = db_session()
    rt = runtime()
    user = admin_service.withdraw(session, user_id, admin=current(), reason=json_body().get("reason"),
                                  now=rt.clock.now())
    session.commit()
    return ok({"participant": {"id": user.id, "participant_code": user.participant_code, "status": user.status,
                               "withdrawn_at": utc_iso(user.withdrawn_at),
                               "withdrawn_reason": user.withdrawn_reason}})


@bp.post("/participants/<id:user_id>/tasks/<task_id>/reset")
@staff_permission("manage_participants")
def reset_task(user_id: int, task_id: str):
    session = db_session()
    rt = runtime()
    tasks = task_service(session, rt)
    ts = admin_service.reset_task(session, tasks, user_id, task_id, admin=current(),
                                  reason=json_body().get("reason"))
    session.commit()
    user = admin_service.get_participant(session, user_id)
    return ok({"task_session_id": ts.id, "attempt": ts.attempt, "task": tasks.status_of(user, task_id)})


@bp.post("/participants/<id:user_id>/erase")
@staff_permission("erase")
def erase(user_id: int):
    """Erase a participant on request: {"confirm": true, "reason": "..."}. Irreversible; the tombstone stays."""
    data = json_body()
    rt = runtime()
    tombstone = erasure_service.erase(rt.db, user_id, admin=current(), confirm=data.get("confirm"),
                                      reason=data.get("reason"), now=rt.clock.now())
    return ok({"tombstone": tombstone})


@bp.post("/participants/<id:user_id>/return-link")
@staff_permission("manage_participants")
def reissue_return_link(user_id: int):
    """Revoke the participant's return links and issue a new one, shown to the admin once."""
    session = db_session()
    rt = runtime()
    user = admin_service.get_participant(session, user_id)
    link = panel_service.reissue_link(session, user, task_service(session, rt), admin=current())
    session.commit()
    return ok({"url": link.url(rt.settings.public_base_url or request.url_root),
               "expires_at": utc_iso(link.expires_at),
               "return_links": panel_service.link_summary(session, user.id, rt.clock.now())})


@bp.post("/participants/<id:user_id>/return-link/revoke")
@staff_permission("manage_participants")
def revoke_return_links(user_id: int):
    session = db_session()
    user = admin_service.get_participant(session, user_id)
    now = runtime().clock.now()
    revoked = panel_service.revoke_all(session, user, admin=current(), now=now)
    session.commit()
    return ok({"revoked": revoked, "return_links": panel_service.link_summary(session, user.id, now)})
