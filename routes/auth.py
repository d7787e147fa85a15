"""Accounts API: CSRF token, register (with consent), login, logout, who am I."""
from __future__ import annotations

from flask import Blueprint, request
from flask_login import current_user, login_user, logout_user
from flask_wtf.csrf import generate_csrf

from database.rate_limit_store import login_subject
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
from routes.i18n import catalogs
from services.participants import account_service, staff
from services.participants.input_checks import check_json_text
from services.platform.errors import BadInput
from services.study import preflight_gate
from services.text.languages import LANGUAGES

bp = Blueprint("auth", __name__, url_prefix="/api/auth")


def _posted_name() -> object:
    """The posted login name; the body is checked first, so text the database cannot store is a 400
    here, never a counter key."""
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        return None
    check_json_text(data)
    return data.get("username")


def name_key() -> str:
    """The account a login names, as the login compares names (padding, case and width do not make a new
    name), as a digest (``login_subject``): the counters keep no names, and erasure finds them by it."""
    name = _posted_name()
    return login_subject(name[:256]) if isinstance(name, str) else "login:"


def limit_key() -> str:
    """Login attempts are limited per (account, address): one address guessing at one account."""
    return f"{name_key()}/{request.remote_addr}"


def owner_address() -> bool:
    """The account has logged in from this address before: other people's guesses at the name (the
    per-account ceiling) never lock its owner out from here."""
    return account_service.is_owner_address(db_session(), _posted_name(), request.remote_addr,
                                            runtime().settings.secret_key)


def registered(response) -> bool:
    return response.status_code == 201


def failed_login(response) -> bool:
    return response.status_code == 401


def user_view(user) -> dict:
    """What a user may see about themselves. The memory group is never included."""
    return {"id": user.id, "username": user.username, "role": user.role, "language": user.language,
            "participant_code": user.participant_code, "status": user.status, "external_id": user.external_id,
            "time_zone": user.time_zone}


@bp.get("/csrf")
def csrf():
    return ok({"csrf_token": generate_csrf()})


@bp.post("/register")
# Only registrations that created an account use up the per-address quota: a request turned away (a 503
# under back-pressure, a taken name) and sent again must not lock the rest of a class out.
@limiter.limit(configured_limit("register"), key_func=lambda: f"register:{request.remote_addr}",
               deduct_when=registered)
@limiter.limit(configured_limit("register_failures"), key_func=lambda: f"register-failed:{request.remote_addr}",
               deduct_when=failed)
def register():
    data = json_body()
    rt = runtime()
    preflight_gate.require_open(db_session(), rt.settings)  # REQUIRE_PREFLIGHT: 503 study_not_open until verified
    user = account_service.register(
        db_session(), username=data.get("username"), password=data.get("password"), consent=data.get("consent"),
        language=data.get("language"), study=rt.study, clock=rt.clock, seed=rt.settings.assignment_seed,
        secret=rt.settings.secret_key,
    )
    login_user(user)
    return ok({"user": user_view(user), "csrf_token": generate_csrf()}, 201)


@bp.post("/login")
@limiter.limit(configured_limit("login_per_account_address"), key_func=limit_key)
# A far higher ceiling of failures per account from every address together (a guessing botnet), which
# does not apply where the account has logged in before.
@limiter.limit(configured_limit("login_failures_per_account"), key_func=lambda: f"{name_key()}/any-address",
               deduct_when=failed_login, exempt_when=owner_address)
# Only failures count per address: a class behind one address logs in freely, but one address cannot
# try many usernames (password spraying).
@limiter.limit("30 per minute", key_func=lambda: f"login-failures:{request.remote_addr}",
               deduct_when=failed_login)
def login():
    data = json_body()
    rt = runtime()
    # a language chosen on the login page is the participant's newest explicit choice: the account keeps it
    chosen = data.get("language")
    if chosen is not None and chosen not in LANGUAGES:
        raise BadInput("language must be zh or en", code="invalid_language")
    user = account_service.log_in(db_session(), data.get("username"), data.get("password"),
                                  address=request.remote_addr, secret=rt.settings.secret_key, now=rt.clock.now())
    staff.check_sign_in(user, data.get("totp"), rt.clock.now())  # a staff account: enabled, and its second factor
    if chosen is not None and user.language != chosen:
        user.language = chosen
        db_session().commit()
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
    user = current()
    # a participant chats in one of the study's languages; staff may keep any language with a catalog
    # (adding a catalog is all a third language for the admin pages takes)
    allowed = catalogs().has(language) if user.role == "admin" and isinstance(language, str) else (
        language in LANGUAGES)
    if not allowed:
        raise BadInput("language must be zh or en" if user.role != "admin" else
                       "language must be one with a catalog", code="invalid_language")
    user.language = language
    db_session().commit()
    return ok({"user": user_view(user)})

