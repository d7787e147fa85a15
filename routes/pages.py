"""The pages (static HTML over the JSON API), the OpenAPI document and public study facts."""
from __future__ import annotations

import json
from pathlib import Path

from flask import Blueprint, current_app, send_from_directory
from sqlalchemy import text

from routes.access import db_session, ok, runtime, staff_permission
from services.text.languages import LANGUAGES

bp = Blueprint("pages", __name__)
OPENAPI = Path(__file__).resolve().parent.parent / "static" / "openapi.json"


@bp.get("/")
def participant_page():
    return send_from_directory(current_app.static_folder, "index.html")


@bp.get("/admin")
@bp.get("/admin/")
@staff_permission("monitor")
def admin_page():
    return send_from_directory(current_app.static_folder, "admin.html")


@bp.get("/admin/login")
def admin_login_page():
    """The admins' own sign-in page: in the admin's language, no consent or registration offer."""
    return send_from_directory(current_app.static_folder, "admin_login.html")


@bp.get("/api/openapi.json")
def openapi():
    return ok(json.loads(OPENAPI.read_text(encoding="utf-8")))


@bp.get("/api/study")
def study_facts():
    """What anyone may know before registering: consent text, tasks, languages. No conditions."""
    study = runtime().study
    return ok({
        "name": study.name,
        "default_language": study.default_language,
        "languages": list(LANGUAGES),
        "consent": {"version": study.consent.version, "text": dict(study.consent.text),
                    "contact": dict(study.consent.contact) if study.consent.contact else None,
                    "erasure_on_withdrawal": study.consent.erasure_on_withdrawal},
        "tasks": [{"id": t.id, "title": dict(t.title), "unlock_offset_days": t.unlock_offset_days}
                  for t in study.tasks],
        "limits": {"max_message_chars": study.limits.max_message_chars},
        "pilot_mode": runtime().settings.pilot_mode,
        "pilot_day_seconds": runtime().settings.day_seconds if runtime().settings.pilot_mode else None,
        "task_chat_real_seconds": study.timing.task_active_seconds * runtime().settings.timer_scale,
        "panel": {"id_parameter": study.panel.id_parameter,
                  "session_parameters": list(study.panel.session_parameters)},
        "contacts_enabled": bool(runtime().settings.contact_encryption_key),
    })


@bp.get("/healthz")
def health():
    db_session().execute(text("SELECT 1"))
    return ok({"ok": True})
