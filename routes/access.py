"""Request plumbing shared by the blueprints: the runtime, the request's DB session, role checks.

Role decorators answer API calls with JSON 401/403 and page requests with a
redirect to the login page, so a participant never sees an admin page.
"""
from __future__ import annotations

import math
import time
from functools import wraps
from typing import Any

from flask import current_app, g, has_request_context, jsonify, redirect, request
from flask_limiter import HeaderNames, Limiter
from flask_login import current_user
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from werkzeug.routing import IntegerConverter

from database import rate_limit_store
from database.models import User
from services.hosting.runtime import Runtime
from services.participants import staff
from services.participants.input_checks import MAX_DB_ID, check_json_text
from services.platform.errors import BadInput, Forbidden, Unauthorised


def runtime() -> Runtime:
    return current_app.extensions["memory_lab"]


def db_session() -> Session:
    if "db_session" not in g:
        g.db_session = runtime().db.Session()
    return g.db_session


def close_db_session(_exc: BaseException | None = None) -> None:
    session = g.pop("db_session", None)
    if session is not None:
        session.close()
        # a refused request's rate-limit count went back with its transaction: it stands all the same
        rate_limit_store.recount_lost(session)


def request_transaction() -> Session | None:
    """The request's session while it has a transaction under way (begun by the login's read), for a rate-limit
    count to join: the count then costs no connection of its own and commits with the request's writes."""
    if not has_request_context():
        return None
    session = g.get("db_session")
    return session if session is not None and session.in_transaction() else None


def take_db_session() -> Session:
    """The request's session for work that goes on after the view (a reply, streamed or not): the rows
    the request loaded stay loaded and are not read again, its transaction ends here so it holds no
    connection, and the caller closes it."""
    session = g.pop("db_session", None)
    if session is not None:
        try:
            session.commit()  # keeps the loaded rows (expire_on_commit=False) and gives the connection back
            rate_limit_store.recount_lost(session)  # a repeated message's count, rolled back with its insert
            return session
        except SQLAlchemyError:  # a read's connection broke: the reply reads what it needs in a new session
            session.close()
            rate_limit_store.recount_lost(session)
    return runtime().db.Session()


def release_db_session(response):
    """After the view: end the request's session now (teardown would), so its connection is free
    for what still runs before the response leaves (the rate limiter's counters)."""
    close_db_session()
    return response


def current() -> User:
    """The logged-in user, attached to this request's session: the row ``load_user`` read for this
    request (in this session, unless it was closed since), attached as it is (``load=False``), not read a
    second time."""
    return db_session().merge(current_user._get_current_object(), load=False)


def _wants_json() -> bool:
    return request.path.startswith("/api/") or request.accept_mimetypes.best == "application/json"


# who may use the participant API: participants, test (pilot) participants and admins' preview accounts
PARTICIPANT_ROLES = ("participant", "test", "preview")


def _guard(role: str | None, allowed: tuple[str, ...] | None = None):
    allowed = allowed or ((role,) if role else ())

    def decorator(view):
        @wraps(view)
        def wrapped(*args: Any, **kwargs: Any):
            if not current_user.is_authenticated:
                if _wants_json():
                    raise Unauthorised("please log in", code="login_required")
                # an admin page asks for the admin's own sign-in page, everything else for the participants'
                login = "/admin/login" if role == "admin" else "/"
                return redirect(f"{login}?next={request.path}")
            if allowed and current_user.role not in allowed:
                if _wants_json():
                    raise Forbidden("this needs the admin role" if role == "admin" else "participants only",
                                    code="forbidden")
                return redirect("/")
            return view(*args, **kwargs)
        return wrapped
    return decorator


login_required = _guard(None)
participant_required = _guard("participant", PARTICIPANT_ROLES)
admin_required = _guard("admin")


def staff_permission(permission: str):
    """A staff route: signed in as staff (``admin_required``), and the member's role allows ``permission``
    (services.participants.staff.PERMISSIONS); otherwise 403 ``role_forbidden``. The view carries
    ``.permission``, so a test can see that every admin route names one."""
    if permission not in staff.ALL_PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")

    def decorator(view):
        @wraps(view)
        def checked(*args: Any, **kwargs: Any):
            staff.require(current_user, permission)
            return view(*args, **kwargs)
        guarded = admin_required(checked)
        guarded.permission = permission
        return guarded
    return decorator


def pin_study(study) -> None:
    """Answer the rest of this request under ``study`` (a running task's own version: services.study.versions)."""
    studies = runtime().studies
    if studies is not None and study is not runtime().study:
        g.setdefault("study_pins", []).append(studies.pin_request(study))


def json_body() -> dict[str, Any]:
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        raise BadInput("the request body must be a JSON object", code="invalid_json")
    check_json_text(data)
    return data


class DbIdConverter(IntegerConverter):
    """``<id:name>`` in a route: a row id the database can hold; a longer number is a 404, not an overflow."""

    def __init__(self, url_map, **kwargs: Any) -> None:
        super().__init__(url_map, min=1, max=MAX_DB_ID, **kwargs)


def ok(payload: dict[str, Any], status: int = 200):
    return jsonify(payload), status


def _limit_identity() -> str:
    if current_user.is_authenticated:
        return f"user:{current_user.get_id()}"
    return f"addr:{request.remote_addr}"


# Rate limits (429): password guessing, registration floods, message floods.
# the store (memory, or the database for several processes) comes from the app config (app._limiter_storage).
# flask-limiter's own Retry-After goes on every response of a limited route, a 503's included (where it
# overrode back-pressure's shorter wait: 59 s in the header, 2 s in the body), so it is renamed; the app's
# error handlers set Retry-After on refusals only, to the value the body's retry_after_seconds says.
limiter = Limiter(key_func=_limit_identity, headers_enabled=True,
                  header_name_mapping={HeaderNames.RETRY_AFTER: "X-RateLimit-Retry-After"})


def limit_retry_after() -> int:
    """Whole seconds until the breached limit's window ends (a 429's Retry-After and retry_after_seconds)."""
    breached = limiter.current_limit
    if breached is None:
        return 1
    return max(1, math.ceil(breached.reset_at - time.time()))


def configured_limit(name: str):
    """A limit set in the environment (services.study.settings.RATE_LIMIT_DEFAULTS), read per request."""
    return lambda: current_app.config["MEMORY_LAB_RATE_LIMITS"][name]


def failed(response) -> bool:
    """Count only refused requests (4xx) against a failure-based limit."""
    return 400 <= response.status_code < 500
