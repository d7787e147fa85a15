"""Participant rights: withdraw (and erase, when the consent offers it), the debrief, a copy of the consent.

Views parse, authorise, call one service and serialise. Only the logged-in participant's own account is
ever touched; the debrief (which names the memory condition) is refused until the last task is done or
the participant has withdrawn.
"""
from __future__ import annotations

from flask import Blueprint, make_response, render_template, request
from flask_login import logout_user

from routes.access import current, db_session, json_body, ok, participant_required, runtime
from services.chat.chat_service import task_service
from services.participants import participant_rights
from services.participants.consent import consent_copy
from services.text.languages import LANGUAGES

bp = Blueprint("rights", __name__)


@bp.post("/api/me/withdraw")
@participant_required
def withdraw():
    """{"confirm": true, "erase": false|true} -> {"withdrawn_at", "erased", "debrief"}; erasing ends the session."""
    data = json_body()
    rt = runtime()
    session = db_session()
    result = participant_rights.withdraw_self(session, task_service(session, rt), current(),
                                              confirm=data.get("confirm"), erase=data.get("erase", False),
                                              now=rt.clock.now(), secret=rt.settings.secret_key)
    session.commit()
    if result["erased"]:
        logout_user()
    return ok(result)


@bp.get("/api/me/debrief")
@participant_required
def debrief():
    return ok({"debrief": participant_rights.debrief_for(task_service(db_session(), runtime()), current())})


def _language() -> str | None:
    wanted = request.args.get("lang")
    return wanted if wanted in LANGUAGES else None


@bp.get("/api/me/consent")
@participant_required
def my_consent():
    """The consent wording the participant accepted, with the date and its hash."""
    return ok({"consent": consent_copy(db_session(), current(), runtime().study, _language())})


@bp.get("/consent/copy")
@participant_required
def consent_copy_page():
    """The accepted consent as a printable page (?download=1: as a file to keep; ?lang=zh|en)."""
    copy = consent_copy(db_session(), current(), runtime().study, _language())
    response = make_response(render_template("consent_copy.html", copy=copy))
    if request.args.get("download") == "1":
        response.headers["Content-Disposition"] = (
            f'attachment; filename="consent-{copy["participant_code"]}-{copy["accepted_at"][:10]}.html"')
    response.headers["Cache-Control"] = "no-store"
    return response
