"""Lab staff: accounts with a role, invited by a one-time link, with an optional TOTP second factor.

Every staff member is a user with ``role == "admin"`` (so the admin pages and the login stay as they are)
and a ``staff_role`` that says what they may do:

=========== ==========================================================================================
owner       everything, including staff and publishing
researcher  edit drafts, preview, run consolidation and the pre-flight, export, read conversations
assistant   monitor, read conversations, withdraw a participant; not export identifiable data, erase,
            or publish
viewer      the monitor and the report only
=========== ==========================================================================================

An owner invites by a one-time link whose last path segment is the token; only its SHA-256 is stored,
so a database reader cannot use an open invitation. The same kind of link resets a password. Disabling a
member ends every session of theirs (``session_version``) and refuses their next sign-in.
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

import pyotp
from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import AuditLog, StaffToken, User
from services.participants.account_service import (
    _check_credentials_shape,
    check_password_strength,
    end_sessions,
    find_user,
    hash_password,
)
from services.platform.errors import BadInput, Conflict, Forbidden, NotFound, Unauthorised

ROLES = ("owner", "researcher", "assistant", "viewer")
MONITOR, REPORT = "monitor", "report"
PERMISSIONS: dict[str, frozenset[str]] = {
    "owner": frozenset({"monitor", "report", "read_conversations", "withdraw", "consolidate", "preflight",
                        "export", "export_deidentified", "payments", "manage_participants", "edit_drafts",
                        "preview", "publish", "erase", "staff"}),
    "researcher": frozenset({"monitor", "report", "read_conversations", "withdraw", "consolidate", "preflight",
                             "export", "export_deidentified", "payments", "manage_participants", "edit_drafts",
                             "preview"}),
    "assistant": frozenset({"monitor", "report", "read_conversations", "withdraw", "export_deidentified"}),
    "viewer": frozenset({"monitor", "report"}),
}
ALL_PERMISSIONS = frozenset().union(*PERMISSIONS.values())
INVITE_LIFETIME = timedelta(days=7)
RESET_LIFETIME = timedelta(days=1)
TOTP_ISSUER = "AI Memory Lab"


def role_of(user: User) -> str | None:
    """The staff role of ``user``: None for a participant; an admin from before roles is an owner."""
    if user.role != "admin":
        return None
    return user.staff_role or "owner"


def permissions(user: User) -> frozenset[str]:
    return PERMISSIONS.get(role_of(user) or "", frozenset())


def may(user: User, permission: str) -> bool:
    if permission not in ALL_PERMISSIONS:
        raise ValueError(f"unknown permission {permission!r}")
    return permission in permissions(user)


def require(user: User, permission: str) -> None:
    """Refuse (403 ``role_forbidden``) when ``user``'s role does not allow ``permission``."""
    if not may(user, permission):
        raise Forbidden(f"the {role_of(user) or 'participant'} role may not do this ({permission})",
                        code="role_forbidden", details={"role": role_of(user), "needs": permission})


def _check_role(role: object) -> str:
    if role not in ROLES:
        raise BadInput(f"role must be one of {', '.join(ROLES)}", code="invalid_role", details={"role": str(role)})
    return str(role)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _audit(session: Session, now: datetime, actor: User | None, action: str, target: User | None,
           **details: object) -> None:
    session.add(AuditLog(at=now, actor_user_id=actor.id if actor else None, action=action,
                         target_user_id=target.id if target else None,
                         details={"actor": actor.username if actor else None, **details}))


def _new_token(session: Session, *, kind: str, username: str, staff_role: str, creator: User, now: datetime,
               user_id: int | None, lifetime: timedelta) -> str:
    token = secrets.token_urlsafe(32)
    session.add(StaffToken(token_hash=_digest(token), kind=kind, username=username, staff_role=staff_role,
                           user_id=user_id, created_by=creator.id, created_at=now, expires_at=now + lifetime))
    return token


def invite(session: Session, owner: User, *, username: object, role: object, now: datetime) -> str:
    """A one-time invitation token for a new staff member. The caller builds the link and commits."""
    require(owner, "staff")
    staff_role = _check_role(role)
    if not isinstance(username, str):
        raise BadInput("username is required", code="invalid_username")
    # the same name rules as any account: the strength check runs when the invitee sets the password
    name, _ = _check_credentials_shape(username, "placeholder-Unused-9z!")
    if find_user(session, name) is not None:
        raise Conflict(f"{name} is taken", code="username_taken")
    open_invite = session.scalar(select(StaffToken).where(StaffToken.kind == "invite", StaffToken.used_at.is_(None),
                                                          StaffToken.username == name, StaffToken.expires_at > now))
    if open_invite is not None:
        open_invite.used_at = now  # a new invitation replaces the open one: one live link per name
    token = _new_token(session, kind="invite", username=name, staff_role=staff_role, creator=owner, now=now,
                       user_id=None, lifetime=INVITE_LIFETIME)
    _audit(session, now, owner, "staff_invited", None, username=name, role=staff_role)
    return token


def _open_token(session: Session, token: object, now: datetime) -> StaffToken:
    if not isinstance(token, str) or not 10 <= len(token) <= 128:
        raise BadInput("token is required", code="invalid_token")
    row = session.scalar(select(StaffToken).where(StaffToken.token_hash == _digest(token)).with_for_update())
    if row is None or row.used_at is not None or row.expires_at <= now:
        raise NotFound("this link is not valid any more; ask the study's owner for a new one", code="token_invalid")
    return row


def accept(session: Session, *, token: object, password: object, now: datetime) -> User:
    """Use an invitation (a new account) or a reset link (a new password). Commits."""
    row = _open_token(session, token, now)
    if not isinstance(password, str):
        raise BadInput("password is required", code="invalid_password")
    if row.kind == "invite":
        name, password = _check_credentials_shape(row.username, password)
        if find_user(session, name) is not None:
            raise Conflict(f"{name} is taken", code="username_taken")
        user = User(username=name, password_hash=hash_password(password), role="admin", staff_role=row.staff_role,
                    language="zh", created_at=now, status="active")
        session.add(user)
        session.flush()
        _audit(session, now, user, "staff_joined", user, role=row.staff_role)
    else:
        user = session.get(User, row.user_id)
        if user is None or user.role != "admin":
            raise NotFound("this link is not valid any more", code="token_invalid")
        check_password_strength(password, user.username)
        if len(password) < 8:
            raise BadInput("password must have at least 8 characters", code="invalid_password")
        user.password_hash = hash_password(password)
        end_sessions(user)
        _audit(session, now, user, "staff_password_reset", user)
    row.used_at = now
    session.commit()
    return user


def _member(session: Session, user_id: int) -> User:
    user = session.get(User, user_id)
    if user is None or user.role != "admin":
        raise NotFound("no such staff member", code="staff_not_found")
    return user


def _owners_left(session: Session, without: User) -> int:
    members = session.scalars(select(User).where(User.role == "admin", User.disabled_at.is_(None),
                                                 User.id != without.id))
    return sum(1 for m in members if role_of(m) == "owner")


def reset_link(session: Session, owner: User, user_id: int, *, now: datetime) -> str:
    require(owner, "staff")
    user = _member(session, user_id)
    token = _new_token(session, kind="reset", username=user.username, staff_role=role_of(user) or "viewer",
                       creator=owner, now=now, user_id=user.id, lifetime=RESET_LIFETIME)
    _audit(session, now, owner, "staff_reset_link", user)
    return token


def set_disabled(session: Session, owner: User, user_id: int, *, disabled: bool, now: datetime) -> User:
    """Disable (ending every session) or enable a staff member. The last active owner cannot be disabled."""
    require(owner, "staff")
    user = _member(session, user_id)
    if disabled:
        if role_of(user) == "owner" and _owners_left(session, user) == 0:
            raise Conflict("the last owner cannot be disabled", code="last_owner")
        user.disabled_at = now
        end_sessions(user)
    else:
        user.disabled_at = None
    _audit(session, now, owner, "staff_disabled" if disabled else "staff_enabled", user)
    return user


def set_role(session: Session, owner: User, user_id: int, *, role: object, now: datetime) -> User:
    require(owner, "staff")
    user = _member(session, user_id)
    staff_role = _check_role(role)
    if role_of(user) == "owner" and staff_role != "owner" and _owners_left(session, user) == 0:
        raise Conflict("the last owner must stay an owner", code="last_owner")
    before = role_of(user)
    user.staff_role = staff_role
    end_sessions(user)  # the new role takes effect at the next sign-in, not in an open page
    _audit(session, now, owner, "staff_role_changed", user, before=before, after=staff_role)
    return user


def members(session: Session) -> list[dict[str, object]]:
    rows = session.scalars(select(User).where(User.role == "admin").order_by(User.id))
    return [{"id": u.id, "username": u.username, "role": role_of(u), "disabled": u.disabled_at is not None,
             "totp": u.totp_secret is not None and u.totp_enabled_at is not None} for u in rows]


# ---- second factor (RFC 6238 TOTP, 30 s steps, one step of clock drift either way) -------------------------

def totp_setup(user: User) -> dict[str, str]:
    """A new secret for ``user`` to enter in an authenticator app; not active until ``totp_confirm``."""
    if role_of(user) is None:
        raise Forbidden("only staff accounts have a second factor", code="forbidden")
    user.totp_secret = pyotp.random_base32()
    user.totp_enabled_at = None
    return {"secret": user.totp_secret,
            "uri": pyotp.TOTP(user.totp_secret).provisioning_uri(name=user.username, issuer_name=TOTP_ISSUER)}


def _code_ok(secret: str, code: object, now: datetime) -> bool:
    # the study clock is naive UTC; pyotp would read a naive datetime as local time, so pass seconds
    seconds = int((now if now.tzinfo else now.replace(tzinfo=UTC)).timestamp())
    return isinstance(code, str) and code.isdigit() and len(code) == 6 and \
        pyotp.TOTP(secret).verify(code, for_time=seconds, valid_window=1)


def totp_confirm(session: Session, user: User, code: object, now: datetime) -> None:
    if not user.totp_secret:
        raise Conflict("set up a second factor first", code="totp_not_set_up")
    if not _code_ok(user.totp_secret, code, now):
        raise BadInput("that code is not right; check the time on your phone", code="totp_invalid")
    user.totp_enabled_at = now
    _audit(session, now, user, "staff_totp_enabled", user)


def check_sign_in(user: User, totp: object, now: datetime) -> None:
    """What a staff sign-in needs beyond the password: an enabled account, and the TOTP code when set up."""
    if role_of(user) is None:
        return
    if user.disabled_at is not None:
        raise Forbidden("this staff account is disabled; ask the study's owner", code="staff_disabled")
    if user.totp_secret and user.totp_enabled_at is not None:
        if totp in (None, ""):
            raise Unauthorised("enter the 6-digit code from your authenticator app", code="totp_required")
        if not _code_ok(user.totp_secret, totp, now):
            raise Unauthorised("wrong code from the authenticator app", code="totp_invalid")
