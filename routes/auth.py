"""Accounts API: CSRF token, register (with consent), login, logout, who am I."""
from __future__ import annotations

from flask import Blueprint, request
from flask_login import current_user, login_user, logout_user
from flask_wtf.csrf import generate_csrf

from database.models import username_key
from routes.access import (
    configured_limit,
    current,
    db_session,
    failed,
    json_body,
    limiter,
    login_required,
    ok,
    runtime,
)
from services import account_service, preflight
from services.languages import LANGUAGES

bp = Blueprint("auth", __name__, url_prefix="/api/auth")


def limit_key() -> str:
    """Login attempts are limited per account, named as the login compares names (padding and case
    do not make a new name), from any address."""
    data = request.get_json(silent=True)
    name = data.get("username") if isinstance(data, dict) else None
    return "login:" + (username_key(name[:256]) if isinstance(name, str) else "")


def failed_login(response) -> bool:
    return response.status_code == 401


def user_view(user) -> dict:
    """What a user may see about themselves. The memory group is never included."""
    return {"id": user.id, "username": user.username, "role": user.role, "language": user.language,
            "participant_code": user.participant_code, "status": user.status, "external_id": user.external_id}


@bp.get("/csrf")
def csrf():
    return ok({"csrf_token": generate_csrf()})


@bp.post("/register")
@limiter.limit(configured_limit("register"), key_func=lambda: f"register:{request.remote_addr}")
@limiter.limit(configured_limit("register_failures"), key_func=lambda: f"register-failed:{request.remote_addr}",
               deduct_when=failed)
def register():
    data = json_body()
    rt = runtime()
    preflight.require_open(db_session(), rt.settings)  # REQUIRE_PREFLIGHT: 503 study_not_open until verified
    user = account_service.register(
        db_session(), username=data.get("username"), password=data.get("password"), consent=data.get("consent"),
        language=data.get("language"), study=rt.study, clock=rt.clock, seed=rt.settings.assignment_seed,
    )
    login_user(user)
    return ok({"user": user_view(user), "csrf_token": generate_csrf()}, 201)


@bp.post("/login")
@limiter.limit("10 per minute", key_func=limit_key)
# Only failures count per address: a class behind one address logs in freely, but one address cannot
# try many usernames (password spraying).
@limiter.limit("30 per minute", key_func=lambda: f"login-failures:{request.remote_addr}",
               deduct_when=failed_login)
def login():
    data = json_body()
    user = account_service.authenticate(db_session(), data.get("username"), data.get("password"))
    login_user(user)
    return ok({"user": user_view(user), "csrf_token": generate_csrf()})


@bp.post("/logout")
def logout():
    if current_user.is_authenticated:
        account_service.end_sessions(current())
        db_session().commit()
        logout_user()
    return ok({"logged_out": True})


@bp.get("/me")
@login_required
def me():
    return ok({"user": user_view(current())})


@bp.post("/language")
@login_required
def set_language():
    language = json_body().get("language")
    if language not in LANGUAGES:
        from services.errors import BadInput

        raise BadInput("language must be zh or en", code="invalid_language")
    user = current()
    user.language = language
    db_session().commit()
    return ok({"user": user_view(user)})

