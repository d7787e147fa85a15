"""Panel participants and personal return links.

A panel (Prolific, Credamo, wjx, a lab's own list) sends participants to
``/enter?<id_parameter>=<id>``. After consent they get an account keyed by that
external id, with no password, assigned like everyone else; the same id later
reaches the same account, never a second one.

A panel id is not a secret (it is in payment sheets and reminder webhooks), so it
opens an account only once: a known id enters again only from a browser that
entered as that participant before (its long-lived device cookie, of which only
the SHA-256 is stored) or through the personal return link. Anyone else gets a
page saying how to get back in; the refusal is audited and counted, apart from the account the id names
(nobody writes into another person's record by knowing their id). An optional
allowlist (``PANEL_ALLOWLIST``) and an enrolment cap (``panel.max_participants``)
keep invented ids out. Every arrival is a ``PanelEntry`` with the panel's session
parameters the study file names.

A return link logs its holder in and opens their next task. Its token comes
from ``secrets.token_urlsafe`` and only its SHA-256 is stored, so the database
alone cannot be used to log in. A link expires when the study ends for that
participant (the last task's unlock plus ``return_link_grace_days``) and an
admin can revoke every link of a participant and issue a new one. A link for
the done page or the calendar file revokes the earlier live link of that
purpose, so revisiting a page never piles up live links (reminders are sent once
per task and kind, so theirs are bounded already).
"""
from __future__ import annotations

import csv
import hashlib
import logging
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.models import AuditLog, PanelDevice, PanelEntry, ReturnLink, User, username_key
from database.participant_lock import hold_participant
from services.participants.account_service import (
    end_sessions,
    enrol,
    full_details,
    hash_password,
    places_taken,
    study_full,
)
from services.participants.tombstone import tombstone_hash
from services.platform.clock import Clock, utc_iso
from services.platform.errors import BadInput, Conflict, Forbidden, NotFound, Unavailable
from services.study.assignment_service import hold_slots
from services.study.definition import Study
from services.study.timer_service import TaskService
from services.text.languages import LANGUAGES

log = logging.getLogger(__name__)

PANEL_USERNAME_PREFIX = "panel:"  # ':' never passes the register form's username rule
LINK_PATH = "/r/"
TOKEN_BYTES = 32
DEVICE_COOKIE = "memlab_device"
DEVICE_COOKIE_DAYS = 400  # browsers keep a cookie at most this long (Chrome caps at 400 days)
MAX_PARAM_CHARS = 128


# -- panel entry -----------------------------------------------------------------------------------


def check_external_id(study: Study, raw: object) -> str:
    """The panel id if it matches the study's pattern in full; BadInput otherwise."""
    pattern = study.panel.id_pattern
    if not isinstance(raw, str) or not re.fullmatch(pattern, raw.strip()):
        raise BadInput("this study link carries no valid participant id; please use the link your panel gave you",
                       code="invalid_panel_id")
    external_id = raw.strip()
    if len(PANEL_USERNAME_PREFIX + external_id) > 64:
        raise BadInput("this participant id is too long", code="invalid_panel_id")
    return external_id


def find_panel_user(session: Session, external_id: str, *, case_sensitive: bool = False) -> User | None:
    """The account of a panel id; unless the study says ids are case-sensitive, "AbC" finds "abc"'s."""
    if case_sensitive:
        return session.scalar(select(User).where(User.external_id == external_id))
    return session.scalar(select(User).where(User.username_key == username_key(PANEL_USERNAME_PREFIX + external_id),
                                             User.external_id.is_not(None)))


def session_params(study: Study, raw: object) -> dict[str, str]:
    """The panel's session parameters (study file: panel.session_parameters) the entry page passed on."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadInput("session parameters must be an object", code="invalid_session_params")
    params = {}
    for name in study.panel.session_parameters:
        value = raw.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str) or len(value) > MAX_PARAM_CHARS or not value.isprintable():
            raise BadInput(f"the panel parameter {name} is not valid", code="invalid_session_params")
        params[name] = value
    return params


@dataclass
class Entrant:
    """Who is asking to enter: the browser's device token (None: it has none yet) and the account its
    login session is for (None: not logged in)."""

    device_token: str | None = None
    session_user_id: int | None = None
    allowlist_path: str | None = None  # PANEL_ALLOWLIST: the lab's CSV of expected ids, read for new ids only


@dataclass
class Entered:
    user: User
    created: bool
    device_token: str  # what the browser's device cookie must hold from now on


def device_hash(token: str) -> str:
    return hashlib.sha256(("device:" + token).encode("utf-8")).hexdigest()


def known_device(session: Session, user_id: int, token: str | None) -> bool:
    """Whether the browser holding ``token`` entered as this participant before."""
    if not token:
        return False
    return session.scalar(select(PanelDevice.id).where(PanelDevice.user_id == user_id,
                                                       PanelDevice.token_hash == device_hash(token))) is not None


def remember_device(session: Session, user_id: int, token: str | None, now: datetime, *,
                    via_link: int | None = None) -> str:
    """Record that this browser entered as ``user_id`` (``via_link``: through that return link, whose
    revocation unbinds it again); returns its (possibly new) token. Flushes."""
    token = token if token and len(token) <= 128 else secrets.token_urlsafe(TOKEN_BYTES)
    row = session.scalar(select(PanelDevice).where(PanelDevice.user_id == user_id,
                                                   PanelDevice.token_hash == device_hash(token)))
    if row is None:
        session.add(PanelDevice(user_id=user_id, token_hash=device_hash(token), created_at=now, last_seen_at=now,
                                return_link_id=via_link))
    else:
        row.last_seen_at = now
    session.flush()
    return token


def is_returning(session: Session, study: Study, raw_id: object, entrant: Entrant) -> bool:
    """A returning visit (this browser or login session is the id's participant): not rate limited."""
    try:
        external_id = check_external_id(study, raw_id)
    except BadInput:
        return False
    user = find_panel_user(session, external_id, case_sensitive=study.panel.id_case_sensitive)
    return user is not None and (user.id == entrant.session_user_id
                                 or known_device(session, user.id, entrant.device_token))


def _record(session: Session, now: datetime, outcome: str, params: dict[str, str], *, user_id: int | None = None,
            via: str | None = None) -> None:
    session.add(PanelEntry(user_id=user_id, at=now, outcome=outcome, via=via, session_params=params))


def id_closed(session: Session, study: Study, external_id: str, secret: str | None) -> bool:
    """Whether this panel id has taken part and may not again: its participant withdrew (and has read the
    debrief), or was erased (the tombstone's keyed hash, ``services.participants.tombstone``)."""
    existing = find_panel_user(session, external_id, case_sensitive=study.panel.id_case_sensitive)
    if existing is not None:
        return existing.status != "active"
    return secret is not None and session.scalar(select(User.id).where(
        User.erased_id_hash == tombstone_hash(secret, "panel_id", external_id))) is not None


def enter_panel(session: Session, *, external_id: object, consent: object, language: object, study: Study,
                clock: Clock, entrant: Entrant | None = None, params: object = None, seed: int | None = None,
                attempts: int = 5, secret: str | None = None, gate: Callable[[], None] | None = None) -> Entered:
    """Enter with a panel id: a returning participant (recognised browser or login session) without a new
    consent; a new id after consent, created and assigned. Commits, refusals included (they are recorded).
    An id that withdrew or was erased is refused (403 panel_id_closed, with the panel's "no places" code);
    ``secret`` (SECRET_KEY) finds the erased ones by their tombstone hash. ``gate`` runs before a new id is
    let in, never for a returning one (REQUIRE_PREFLIGHT stops new enrolment only)."""
    entrant = entrant or Entrant()
    external_id = check_external_id(study, external_id)
    entry_params = session_params(study, params)
    now = clock.now()
    if id_closed(session, study, external_id, secret):
        _record(session, now, "closed", entry_params)  # apart from the account it names (issue 28 item 9)
        session.commit()
        raise Forbidden("this participant id can no longer take part in this study", code="panel_id_closed",
                        details=full_details(study))
    existing = find_panel_user(session, external_id, case_sensitive=study.panel.id_case_sensitive)
    if existing is not None:
        return _return(session, existing, entrant, entry_params, now)
    if gate is not None:
        gate()
    _check_expected(session, study, external_id, entrant, entry_params, now)
    if consent is not True:
        raise BadInput("consent is required to take part", code="consent_required")
    def admit() -> None:
        if study.panel.max_participants is not None:
            hold_slots(session)
            _check_place(session, study, entry_params, now)

    user, created = _create(session, study, clock, external_id, language, seed=seed, attempts=attempts,
                            admit=admit)
    if not created:  # the same id entered at this moment by another request, which owns the account
        return _return(session, user, entrant, entry_params, now)
    token = remember_device(session, user.id, entrant.device_token, now)
    _record(session, now, "created", entry_params, user_id=user.id, via="new")
    session.commit()
    return Entered(user=user, created=True, device_token=token)


def _return(session: Session, user: User, entrant: Entrant, params: dict[str, str], now: datetime) -> Entered:
    if user.id == entrant.session_user_id:
        via = "session"
    elif known_device(session, user.id, entrant.device_token):
        via = "device"
    else:
        # stored apart from the participant the id names: whoever knows an id cannot write into their record
        _record(session, now, "refused", params)
        session.add(AuditLog(at=now, action="panel_reentry_refused",
                             details={"had_device_cookie": bool(entrant.device_token)}))
        session.commit()
        raise Forbidden("this participant id has already been used to enter the study from another browser; "
                        "please use your personal link or contact the research team",
                        code="panel_reentry_refused")
    token = remember_device(session, user.id, entrant.device_token, now)
    _record(session, now, "returned", params, user_id=user.id, via=via)
    session.commit()
    return Entered(user=user, created=False, device_token=token)


def _check_expected(session: Session, study: Study, external_id: str, entrant: Entrant, params: dict[str, str],
                    now: datetime) -> None:
    """A new id must be on the allowlist (when there is one) and find a place under the cap. An allowlist
    that cannot be used lets nobody new in (503 panel_allowlist_unavailable) and logs why for the admin."""
    try:
        allowlist = load_allowlist(entrant.allowlist_path, study)
    except AllowlistUnavailable as exc:
        log.error("panel entry turned away: %s", exc)
        _record(session, now, "allowlist_unavailable", params)
        session.commit()
        raise Unavailable("the list of expected participants cannot be read right now, so nobody new can enter; "
                          "the research team has been told, please try again later",
                          code="panel_allowlist_unavailable") from None
    if allowlist is not None and _id_form(study, external_id) not in allowlist:
        _record(session, now, "not_allowed", params)
        session.commit()
        raise Forbidden("this participant id is not on this study's list of expected participants",
                        code="panel_id_not_expected")
    _check_place(session, study, params, now)


def _check_place(session: Session, study: Study, params: dict[str, str], now: datetime) -> None:
    """Conflict study_full when the participants (panel and password accounts) have reached
    ``panel.max_participants``. Checked once early (a full study answers before consent) and again in the
    creating transaction after the slot counter's lock (``hold_slots``), so two entries for the last place
    cannot both count one free."""
    cap = study.panel.max_participants
    if cap is not None and places_taken(session) >= cap:
        _record(session, now, "full", params)
        session.commit()
        raise study_full(study)


def _create(session: Session, study: Study, clock: Clock, external_id: str, language: object, *, seed: int | None,
            attempts: int, admit: Callable[[], None]) -> tuple[User, bool]:
    lang = language if language in LANGUAGES else study.default_language
    username = PANEL_USERNAME_PREFIX + external_id
    case_sensitive = study.panel.id_case_sensitive

    def collided(_exc: IntegrityError) -> User | None:
        existing = find_panel_user(session, external_id, case_sensitive=case_sensitive)
        if existing is None and session.scalar(select(User.id).where(User.username_key == username_key(username))):
            raise Conflict("another participant id that differs from this one only in upper/lower case is already "
                           "taken, and this study treats ids as case-sensitive (panel.id_case_sensitive), so the "
                           "two cannot both be used: please contact the research team",
                           code="panel_id_case_conflict") from None
        return existing

    return enrol(session, study, clock, seed=seed, attempts=attempts, after_collision=collided,
                 audit_action="panel_entry", admit=admit,
                 fields={"username": username, "external_id": external_id, "language": lang,
                         "password_hash": hash_password(secrets.token_urlsafe(32))})


def _id_form(study: Study, external_id: str) -> str:
    return external_id if study.panel.id_case_sensitive else username_key(external_id)


# the column of a panel's export that holds its participant ids (Prolific: "Participant id")
_ALLOWLIST_COLUMNS = ("participant id", "participant_id", "participantid", "external_id", "prolific_pid", "pid", "id")
_allowlist_cache: dict[tuple[str, float, bool], frozenset[str]] = {}


class AllowlistUnavailable(Exception):
    """``PANEL_ALLOWLIST`` names a file that cannot be used (missing, unreadable, no ids, bad lines); the
    message, for the admin, says which and where."""


def load_allowlist(path: str | None, study: Study) -> frozenset[str] | None:
    """The expected panel ids from the lab's CSV (``PANEL_ALLOWLIST``), re-read when the file changes;
    None when no allowlist is configured. A header naming the id column (Prolific's export: "Participant
    id") is used; without one, the first column. AllowlistUnavailable when the file is missing or
    unreadable, holds no ids, or has a line whose id is missing or does not match ``panel.id_pattern``."""
    if not path:
        return None
    try:
        key = (path, os.stat(path).st_mtime, study.panel.id_case_sensitive)
        if key not in _allowlist_cache:
            ids = _read_allowlist(path, study)
            _allowlist_cache.clear()
            _allowlist_cache[key] = ids
    except (OSError, UnicodeError, csv.Error) as exc:
        raise AllowlistUnavailable(f"PANEL_ALLOWLIST={path} cannot be read ({exc})") from exc
    return _allowlist_cache[key]


def _read_allowlist(path: str, study: Study) -> frozenset[str]:
    with Path(path).open(encoding="utf-8-sig", newline="") as handle:
        rows = [(n, row) for n, row in enumerate(csv.reader(handle), 1) if any(cell.strip() for cell in row)]
    header = [cell.strip().lower() for cell in rows[0][1]] if rows else []
    column = next((header.index(name) for name in _ALLOWLIST_COLUMNS if name in header), None)
    body = rows[1:] if column is not None else rows
    index = column or 0
    bad = [n for n, row in body if len(row) <= index or not re.fullmatch(study.panel.id_pattern, row[index].strip())]
    if bad:
        raise AllowlistUnavailable(f"PANEL_ALLOWLIST={path}: line(s) {', '.join(map(str, bad[:10]))} hold no "
                                   "valid participant id (panel.id_pattern)")
    if not body:
        raise AllowlistUnavailable(f"PANEL_ALLOWLIST={path} holds no participant ids")
    return frozenset(_id_form(study, row[index].strip()) for _, row in body)


# -- completion codes --------------------------------------------------------------------------------


def completion_for(study: Study, task_id: str, user: User, *, incomplete: bool = False) -> dict[str, Any] | None:
    """What a finished task shows: its completion code and redirect URL from the study file; for a task
    below the minimum engagement (``incomplete``) never that code, only the panel's incomplete code if any."""
    entry = study.panel.tasks.get(task_id) if user.external_id else None  # panel codes: panel accounts only
    if incomplete:
        code, url = (entry.incomplete_code, entry.incomplete_redirect_url) if entry else (None, None)
        return {"completion_code": code, "redirect_url": _fill(url, code, user.external_id), "incomplete": True}
    if entry is None:
        return None
    return {"completion_code": entry.completion_code,
            "redirect_url": _fill(entry.redirect_url, entry.completion_code, user.external_id), "incomplete": False}


def _fill(url: str | None, code: str | None, external_id: str | None) -> str | None:
    if not url:
        return url
    return url.replace("{completion_code}", code or "").replace("{external_id}", external_id or "")


# -- return links -------------------------------------------------------------------------------------


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def study_end(user: User, tasks: TaskService) -> datetime:
    """When this participant's study is over: the last task's unlock plus the grace days (study days)."""
    study = tasks.study
    first = tasks.live_session(user.id, tasks.task_ids[0])
    anchor = first.completed_at if first is not None and first.completed_at else (user.consent_at or user.created_at)
    days = max(t.unlock_offset_days for t in study.tasks) + study.panel.return_link_grace_days
    return anchor + timedelta(days=days * tasks.time_scale)


LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")  # a local run: links to this machine mislead nobody


def link_base_url(public_base_url: str | None, public_hosts: tuple[str, ...], *, host: str, url_root: str) -> str:
    """Where personal links point: ``PUBLIC_BASE_URL``; without it, the address the request came to, but only
    when its host is on ``PUBLIC_HOSTS`` or local. A link is never built from any other Host header (a
    forged one would send participants' links elsewhere): 503 link_host_not_configured."""
    if public_base_url:
        return public_base_url
    name = host.lower()
    bare = name.rsplit(":", 1)[0] if not name.endswith("]") else name
    if name in public_hosts or bare in public_hosts or bare in LOCAL_HOSTS:
        return url_root
    raise Unavailable("personal links cannot be made for this address: set PUBLIC_BASE_URL (or PUBLIC_HOSTS) to "
                      "the address participants use", code="link_host_not_configured")


@dataclass
class IssuedLink:
    token: str
    expires_at: datetime

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + LINK_PATH + self.token


# links shown on pages a participant may open any number of times: a new one replaces the last
ROTATED_PURPOSES = ("task_end", "calendar")


def issue_return_link(session: Session, user: User, tasks: TaskService, *, purpose: str) -> IssuedLink:
    """A new personal link for ``user`` (flushes; the caller commits). For the done page and the calendar
    file it replaces (revokes) the earlier live link of that purpose, so 50 visits leave one live link."""
    if user.status != "active":
        raise Conflict("this participant is not active", code=f"participant_{user.status}")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    now = tasks.clock.now()
    if purpose in ROTATED_PURPOSES:
        # the participant lock before this Core write, not after it at the flush: taking it after a row
        # lock on return_links deadlocks with an erasure (database.participant_lock)
        hold_participant(session, user.id)
        session.execute(update(ReturnLink).where(ReturnLink.user_id == user.id, ReturnLink.purpose == purpose,
                                                 ReturnLink.revoked_at.is_(None)).values(revoked_at=now))
    expires = study_end(user, tasks)
    session.add(ReturnLink(user_id=user.id, token_hash=token_hash(token), purpose=purpose, created_at=now,
                           expires_at=expires))
    session.flush()
    return IssuedLink(token=token, expires_at=expires)


def redeem(session: Session, token: str, now: datetime) -> tuple[User, ReturnLink]:
    """The active participant a valid, unexpired, unrevoked link belongs to, and the link; NotFound otherwise."""
    link = session.scalar(select(ReturnLink).where(ReturnLink.token_hash == token_hash(token or "")))
    if link is None or link.revoked_at is not None or link.expires_at <= now:
        raise NotFound("this link is not valid (any more)", code="invalid_return_link")
    user = session.get(User, link.user_id)
    if user is None or user.status != "active":
        raise NotFound("this link is not valid (any more)", code="invalid_return_link")
    link.last_used_at = now
    return user, link


def revoke_links(session: Session, user_id: int, now: datetime) -> int:
    """Revoke every live link of a participant; returns how many. Whoever is inside through one is put out:
    the browsers the revoked links bound are unbound, and every session of the participant ends (a login
    session does not record how it began; the participant's own browser enters again by its device cookie
    or the new link)."""
    hold_participant(session, user_id)  # before the first write (database.participant_lock)
    live = select(ReturnLink.id).where(ReturnLink.user_id == user_id, ReturnLink.revoked_at.is_(None))
    session.execute(delete(PanelDevice).where(PanelDevice.user_id == user_id,
                                              PanelDevice.return_link_id.in_(live.scalar_subquery())))
    result = session.execute(update(ReturnLink).where(ReturnLink.user_id == user_id,
                                                      ReturnLink.revoked_at.is_(None))
                             .values(revoked_at=now))
    _end_sessions(session, user_id)
    return result.rowcount or 0


def _end_sessions(session: Session, user_id: int) -> None:
    user = session.get(User, user_id)
    if user is not None:
        end_sessions(user)


def sign_out_everywhere(session: Session, user: User, *, admin: User, now: datetime) -> int:
    """Admin: end every session of the participant and forget every browser bound to them (their panel link
    then enters nowhere until a return link binds a browser again); audited, the caller commits. Returns
    how many browsers were unbound."""
    hold_participant(session, user.id)
    removed = session.execute(delete(PanelDevice).where(PanelDevice.user_id == user.id)).rowcount or 0
    end_sessions(user)
    session.add(AuditLog(at=now, actor_user_id=admin.id, action="signed_out_everywhere", target_user_id=user.id,
                         details={"devices_removed": removed}))
    return removed


def reissue_link(session: Session, user: User, tasks: TaskService, *, admin: User) -> IssuedLink:
    """Admin: revoke the participant's links and issue a new one (audited; the caller commits)."""
    now = tasks.clock.now()
    revoked = revoke_links(session, user.id, now)
    link = issue_return_link(session, user, tasks, purpose="admin")
    session.add(AuditLog(at=now, actor_user_id=admin.id, action="return_link_reissued", target_user_id=user.id,
                         details={"revoked": revoked, "expires_at": utc_iso(link.expires_at)}))
    return link


def revoke_all(session: Session, user: User, *, admin: User, now: datetime) -> int:
    revoked = revoke_links(session, user.id, now)
    session.add(AuditLog(at=now, actor_user_id=admin.id, action="return_links_revoked", target_user_id=user.id,
                         details={"revoked": revoked}))
    return revoked


def link_summary(session: Session, user_id: int, now: datetime) -> dict[str, Any]:
    """What the admin record shows about a participant's links (never a token)."""
    links = session.scalars(select(ReturnLink).where(ReturnLink.user_id == user_id).order_by(ReturnLink.id)).all()
    live = [link for link in links if link.revoked_at is None and link.expires_at > now]
    used = [link.last_used_at for link in links if link.last_used_at]
    return {"issued": len(links), "live": len(live), "last_used_at": utc_iso(max(used)) if used else None,
            "expires_at": utc_iso(max(link.expires_at for link in live)) if live else None}


# -- where a link leads ---------------------------------------------------------------------------------


def next_task(tasks: TaskService, user: User) -> dict[str, Any] | None:
    """The first task not done yet, with its status and unlock time; None when all are done."""
    for task in tasks.overview(user):
        if task["status"] != "done":
            return {"id": task["id"], "title": task["title"], "status": task["status"],
                    "available_at": task["available_at"]}
    return None


def landing_path(tasks: TaskService, user: User) -> str:
    task = next_task(tasks, user)
    if task and task["status"] in ("available", "in_progress"):
        return f"/#/task/{task['id']}"
    return "/#/tasks"


def calendar_file(*, study_name: str, task: dict[str, Any], url: str, unlock_at: datetime,
                  language: str, now: datetime) -> bytes:
    """An .ics event at the next task's unlock time, with the return link (icalendar writes RFC 5545)."""
    from icalendar import Calendar, Event

    calendar = Calendar()
    calendar.add("prodid", "-//AI Memory Lab//return link//EN")
    calendar.add("version", "2.0")
    event = Event()
    title = f"{study_name}: {task['id']} {task['title']}"
    event.add("uid", f"{secrets.token_hex(8)}@ai-memory-lab")
    event.add("dtstamp", now.replace(tzinfo=UTC))
    event.add("dtstart", unlock_at.replace(tzinfo=UTC))
    event.add("dtend", (unlock_at + timedelta(minutes=30)).replace(tzinfo=UTC))
    event.add("summary", title)
    note = "任务开放后，打开这个链接继续：" if language == "zh" else "When the task opens, continue with this link: "
    event.add("description", note + url)
    event.add("url", url)
    calendar.add_component(event)
    return calendar.to_ical()

