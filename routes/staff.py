"""Lab staff in the console: invitations by one-time link, roles, disabling, password resets, TOTP.

Owners manage staff (permission ``staff``); every member manages their own second factor. Accepting an
invitation or a reset link needs no sign-in: the token in the link is the credential (CSRF still applies).
"""
from __future__ import annotations

from flask import Blueprint, current_app, request, send_from_directory

from routes.access import admin_required, current, db_session, json_body, ok, runtime, staff_permission
from services.participants import staff
from services.platform.clock import utc_iso

bp = Blueprint("staff", __name__)


def _link(kind: str, token: str) -> str:
    base = (runtime().settings.public_base_url or request.url_root).rstrip("/")
    return f"{base}/staff/{kind}/{token}"


@bp.get("/staff/accept/<token>")
@bp.get("/staff/reset/<token>")
def accept_page(token: str):
    """The page where an invited member (or one with a reset link) sets a password."""
    return send_from_directory(current_app.static_folder, "staff_accept.html")


@bp.get("/api/admin/staff")
@staff_permission("staff")
def members():
    return ok({"staff": staff.members(db_session()), "roles": list(staff.ROLES)})


@bp.get("/api/admin/staff/me")
@admin_required
def me():
    """The signed-in member's role and permissions: the console hides what the role cannot do."""
    user = current()
    return ok({"username": user.username, "role": staff.role_of(user),
               "permissions": sorted(staff.permissions(user)),
               "totp": user.totp_secret is not None and user.totp_enabled_at is not None})


@bp.post("/api/admin/staff")
@staff_permission("staff")
def invite():
    """{username, role} -> 201 {invite_url, expires_at}; the link's last path segment is the one-time token."""
    data = json_body()
    now = runtime().clock.now()
    token = staff.invite(db_session(), current(), username=data.get("username"), role=data.get("role"), now=now)
    db_session().commit()
    return ok({"invite_url": _link("accept", token), "expires_at": utc_iso(now + staff.INVITE_LIFETIME)}, 201)


@bp.post("/api/admin/staff/accept")
def accept():
    """{token, password}: an invitation creates the account, a reset link sets a new password. Then sign in
    at the usual login route."""
    data = json_body()
    user = staff.accept(db_session(), token=data.get("token"), password=data.get("password"),
                        now=runtime().clock.now())
    return ok({"username": user.username, "role": staff.role_of(user), "login": "/admin/login"})


@bp.post("/api/admin/staff/<id:user_id>/disable")
@staff_permission("staff")
def disable(user_id: int):
    user = staff.set_disabled(db_session(), current(), user_id, disabled=True, now=runtime().clock.now())
    db_session().commit()
    return ok({"id": user.id, "disabled": True})


@bp.post("/api/admin/staff/<id:user_id>/enable")
@staff_permission("staff")
def enable(user_id: int):
    user = staff.set_disabled(db_session(), current(), user_id, disabled=False, now=runtime().clock.now())
    db_session().commit()
    return ok({"id": user.id, "disabled": False})


@bp.post("/api/admin/staff/<id:user_id>/role")
@staff_permission("staff")
def set_role(user_id: int):
    user = staff.set_role(db_session(), current(), user_id, role=json_body().get("role"), now=runtime().clock.now())
    db_session().commit()
    return ok({"id": user.id, "role": staff.role_of(user)})


@bp.post("/api/admin/staff/<id:user_id>/reset-link")
@staff_permission("staff")
def reset_link(user_id: int):
    now = runtime().clock.now()
    token = staff.reset_link(db_session(), current(), user_id, now=now)
    db_session().commit()
    return ok({"reset_url": _link("reset", token), "expires_at": utc_iso(now + staff.RESET_LIFETIME)})


@bp.post("/api/admin/staff/totp/setup")
@admin_required
def totp_setup():
    """A new second-factor secret for the signed-in member (active once confirmed with a code)."""
    user = current()
    secret = staff.totp_setup(user)
    db_session().commit()
    return ok(secret)


@bp.post("/api/admin/staff/totp/confirm")
@admin_required
def totp_confirm():
    staff.totp_confirm(db_session(), current(), json_body().get("code"), runtime().clock.now())
    db_session().commit()
    return ok({"totp": True})
